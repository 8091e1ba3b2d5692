// Helpers shared by the text tests: reading fixture files and running the qwick binary.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

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

}  // namespace qwick::test
