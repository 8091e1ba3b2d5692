// Errors a user can cause: a malformed file, an unsupported config, a bad argument.
//
// Every such failure is thrown as qwick::Error with a message that names the thing at fault (the
// file, the tensor, the config field and its value). The edges of the program (CLI commands, the
// server) catch it, report it and carry on; nothing below them prints or exits.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace qwick {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace qwick
