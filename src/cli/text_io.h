// Whole-stream text I/O for the commands that read stdin and write stdout byte for byte.
// Tested through the commands in tests/text/text_cli_test.cpp.
#pragma once

#include <functional>
#include <string>

namespace qwick {

// All of stdin (binary-safe).
std::string read_stdin();
// Writes `text` to stdout as is (NUL bytes included) and flushes.
void write_stdout(const std::string& text);

// Calls `fn(line, line_number)` for each line of `text` that is not blank (JSON Lines input).
void for_each_line(const std::string& text, const std::function<void(const std::string&, size_t)>& fn);

}  // namespace qwick
