// Prints a parsed reply as it streams: reasoning dimmed on a terminal (on a pipe framed by
// <think> ... </think> so scripts can tell it apart), or hidden; content as is; tool calls as
// "[tool call] NAME ARGUMENTS" lines at the end.
// Tested by `qwick chat` in tests/text/text_cli_test.cpp.
#pragma once

#include <cstdio>
#include <vector>

#include "text/output_parser.h"

namespace qwick {

class ReplyPrinter {
 public:
  ReplyPrinter(std::FILE* out, bool show_reasoning, bool color);
  void print(const std::vector<OutputDelta>& deltas);
  // After the last deltas: closes the reasoning if still open, lists tool calls, ends the line.
  void end(const ParsedMessage& message);

 private:
  void close_reasoning();
  std::FILE* out_;
  bool show_reasoning_, color_;
  bool in_reasoning_ = false;
};

// Whether `stream` is a terminal that should get colours (and NO_COLOR is not set).
bool use_color(std::FILE* stream);

}  // namespace qwick
