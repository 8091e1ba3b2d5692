// Helpers shared by the text tests: reading fixture files and running the qwick binary.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <sys/wait.h>

namespace qwick::test {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline nlohmann::ordered_json read_json(const std::string& path) {
  return nlohmann::ordered_json::parse(read_file(path));
}

inline std::string tokenizer_fixture(const std::string& name) {
  return std::string(QWICK_TOKENIZER_FIXTURES) + "/" + name + "/tokenizer.json";
}

inline void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// A fresh directory for one test under the build tree (tests may run in parallel).
inline std::filesystem::path scratch_dir(const std::string& name) {
  const auto dir = std::filesystem::path(QWICK_TEXT_SCRATCH) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

struct Run {
  int status = -1;
  std::string out, err;
};

// Runs `qwick ARGS` (shell-quoted by the caller) with `stdin_text` on stdin, in `dir`.
inline Run run_qwick(const std::filesystem::path& dir, const std::string& args,
                     const std::string& stdin_text = "") {
  write_file(dir / "stdin.txt", stdin_text);
  const std::string command = std::string("'") + QWICK_BINARY + "' " + args + " < '" +
                              (dir / "stdin.txt").string() + "' > '" + (dir / "stdout.txt").string() +
                              "' 2> '" + (dir / "stderr.txt").string() + "'";
  Run r;
  const int status = std::system(command.c_str());
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file((dir / "stdout.txt").string());
  r.err = read_file((dir / "stderr.txt").string());
  return r;
}

}  // namespace qwick::test
