// A small table-driven command-line parser in the llama.cpp style.
//
// Every option has one or more names ("-m", "--model"), an optional environment variable
// (LLAMA_ARG_MODEL style; the command line wins), a help line and a typed target. Long names accept
// "--name value" and "--name=value"; boolean flags also get a "--no-name" form. CLI11 and cxxopts
// (Debian's versions) reject llama's multi-letter single-dash names, hence this parser.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace qwick {

class ArgParser {
 public:
  ArgParser(std::string usage, std::string summary);

  void flag(std::vector<std::string> names, std::string help, bool* target, std::string env = "");
  void option(std::vector<std::string> names, std::string value_name, std::string help, std::string* target,
              std::string env = "");
  void option(std::vector<std::string> names, std::string value_name, std::string help, int64_t* target,
              std::string env = "");
  void option(std::vector<std::string> names, std::string value_name, std::string help, int* target,
              std::string env = "");
  void option(std::vector<std::string> names, std::string value_name, std::string help, double* target,
              std::string env = "");
  void option(std::vector<std::string> names, std::string value_name, std::string help,
              std::optional<double>* target, std::string env = "");
  // Positional arguments in order; required ones must be present.
  void positional(std::string name, std::string help, std::string* target, bool required);

  // Applies environment variables, then argv (argv[0] is the command name). Returns false when
  // --help was asked for (the help text is printed). Throws Error on anything malformed.
  bool parse(int argc, char** argv);
  std::string help() const;

 private:
  struct Option {
    std::vector<std::string> names;
    std::string value_name;  // empty for flags
    std::string help;
    std::string env;
    std::string default_text;
    std::function<void(const std::string& name, const std::string& value)> set;
  };
  struct Positional {
    std::string name, help;
    std::string* target;
    bool required;
  };
  void add_value(std::vector<std::string> names, std::string value_name, std::string help, std::string env,
                 std::string default_text, std::function<void(const std::string&, const std::string&)> set);
  const Option* find(const std::string& name, bool* negated) const;

  std::string usage_, summary_;
  std::vector<Option> options_;
  std::vector<Positional> positionals_;
};

// Parses numbers strictly: the whole string must be the number. Throw Error naming `what`.
int64_t parse_int(const std::string& text, const std::string& what);
double parse_double(const std::string& text, const std::string& what);

}  // namespace qwick
