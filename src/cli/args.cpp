#include "cli/args.h"

#include <fmt/format.h>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace qwick {

int64_t parse_int(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE)
    fail("{}: expected an integer, got \"{}\"", what, text);
  return v;
}

double parse_double(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v))
    fail("{}: expected a number, got \"{}\"", what, text);
  return v;
}

ArgParser::ArgParser(std::string usage, std::string summary)
    : usage_(std::move(usage)), summary_(std::move(summary)) {
  options_.push_back({{"-h", "--help"}, "", "show this help and exit", "", "", nullptr});
}

void ArgParser::flag(std::vector<std::string> names, std::string help, bool* target, std::string env) {
  options_.push_back({std::move(names), "", std::move(help), std::move(env), *target ? "on" : "off",
                      [target](const std::string& name, const std::string& value) {
                        if (value == "1" || value == "true" || value == "on" || value == "enabled")
                          *target = true;
                        else if (value == "0" || value == "false" || value == "off" || value == "disabled")
                          *target = false;
                        else
                          fail("{}: expected true/false, got \"{}\"", name, value);
                      }});
}

void ArgParser::add_value(std::vector<std::string> names, std::string value_name, std::string help,
                          std::string env, std::string default_text,
                          std::function<void(const std::string&, const std::string&)> set) {
  options_.push_back({std::move(names), std::move(value_name), std::move(help), std::move(env),
                      std::move(default_text), std::move(set)});
}

void ArgParser::option(std::vector<std::string> names, std::string value_name, std::string help,
                       std::string* target, std::string env) {
  add_value(std::move(names), std::move(value_name), std::move(help), std::move(env), *target,
            [target](const std::string&, const std::string& v) { *target = v; });
}
void ArgParser::option(std::vector<std::string> names, std::string value_name, std::string help,
                       int64_t* target, std::string env) {
  add_value(std::move(names), std::move(value_name), std::move(help), std::move(env), std::to_string(*target),
            [target](const std::string& n, const std::string& v) { *target = parse_int(v, n); });
}
void ArgParser::option(std::vector<std::string> names, std::string value_name, std::string help, int* target,
                       std::string env) {
  add_value(std::move(names), std::move(value_name), std::move(help), std::move(env), std::to_string(*target),
            [target](const std::string& n, const std::string& v) {
              const int64_t x = parse_int(v, n);
              if (x < INT32_MIN || x > INT32_MAX) fail("{}: {} is out of range", n, v);
              *target = static_cast<int>(x);
            });
}
void ArgParser::option(std::vector<std::string> names, std::string value_name, std::string help,
                       double* target, std::string env) {
  add_value(std::move(names), std::move(value_name), std::move(help), std::move(env),
            fmt::format("{}", *target),
            [target](const std::string& n, const std::string& v) { *target = parse_double(v, n); });
}
void ArgParser::option(std::vector<std::string> names, std::string value_name, std::string help,
                       std::optional<double>* target, std::string env) {
  add_value(std::move(names), std::move(value_name), std::move(help), std::move(env),
            target->has_value() ? fmt::format("{}", **target) : "",
            [target](const std::string& n, const std::string& v) { *target = parse_double(v, n); });
}

void ArgParser::positional(std::string name, std::string help, std::string* target, bool required) {
  positionals_.push_back({std::move(name), std::move(help), target, required});
}

const ArgParser::Option* ArgParser::find(const std::string& name, bool* negated) const {
  *negated = false;
  for (const auto& o : options_)
    for (const auto& n : o.names)
      if (n == name) return &o;
  if (name.rfind("--no-", 0) == 0) {
    const std::string positive = "--" + name.substr(5);
    for (const auto& o : options_)
      for (const auto& n : o.names)
        if (n == positive && o.value_name.empty()) {
          *negated = true;
          return &o;
        }
  }
  return nullptr;
}

bool ArgParser::parse(int argc, char** argv) {
  for (const auto& o : options_) {
    if (o.env.empty() || !o.set) continue;
    if (const char* v = std::getenv(o.env.c_str()); v != nullptr && *v != '\0') o.set(o.env, v);
  }
  size_t next_positional = 0;
  bool only_positionals = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!only_positionals && arg == "--") {
      only_positionals = true;
      continue;
    }
    if (only_positionals || arg.size() < 2 || arg[0] != '-' || (arg[1] >= '0' && arg[1] <= '9')) {
      if (next_positional >= positionals_.size()) fail("unexpected argument \"{}\"", arg);
      *positionals_[next_positional++].target = arg;
      continue;
    }
    std::string inline_value;
    bool has_inline = false;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_inline = true;
    }
    bool negated = false;
    const Option* o = find(arg, &negated);
    if (o == nullptr) fail("unknown option \"{}\" (see --help)", arg);
    if (o->names.front() == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (o->value_name.empty()) {
      o->set(arg, has_inline ? inline_value : (negated ? "false" : "true"));
    } else {
      if (!has_inline) {
        if (i + 1 >= argc) fail("option {} needs a value ({})", arg, o->value_name);
        inline_value = argv[++i];
      }
      o->set(arg, inline_value);
    }
  }
  for (size_t p = next_positional; p < positionals_.size(); ++p)
    if (positionals_[p].required) fail("missing argument {} (see --help)", positionals_[p].name);
  return true;
}

std::string ArgParser::help() const {
  std::string out = fmt::format("usage: {}\n\n{}\n", usage_, summary_);
  if (!positionals_.empty()) {
    out += "\narguments:\n";
    for (const auto& p : positionals_) out += fmt::format("  {:<30} {}\n", p.name, p.help);
  }
  out += "\noptions:\n";
  for (const auto& o : options_) {
    std::string names;
    for (const auto& n : o.names) names += (names.empty() ? "" : ", ") + n;
    if (!o.value_name.empty()) names += " " + o.value_name;
    std::string line = fmt::format("  {:<30} {}", names, o.help);
    if (!o.default_text.empty() && !o.value_name.empty())
      line += fmt::format(" (default: {})", o.default_text);
    if (!o.env.empty()) line += fmt::format(" [env: {}]", o.env);
    out += line + "\n";
  }
  return out;
}

}  // namespace qwick
