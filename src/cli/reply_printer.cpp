#include "cli/reply_printer.h"

#include <unistd.h>

#include <cstdlib>

namespace qwick {
namespace {

constexpr const char* kDim = "\x1b[2m";
constexpr const char* kReset = "\x1b[0m";

void put(std::FILE* out, const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), out);
}

}  // namespace

bool use_color(std::FILE* stream) {
  const char* no_color = std::getenv("NO_COLOR");
  return isatty(fileno(stream)) && (no_color == nullptr || *no_color == '\0');
}

ReplyPrinter::ReplyPrinter(std::FILE* out, bool show_reasoning, bool color)
    : out_(out), show_reasoning_(show_reasoning), color_(color) {}

void ReplyPrinter::close_reasoning() {
  if (!in_reasoning_) return;
  std::fputs(color_ ? kReset : "\n</think>", out_);
  std::fputs("\n\n", out_);
  in_reasoning_ = false;
}

void ReplyPrinter::print(const std::vector<OutputDelta>& deltas) {
  for (const OutputDelta& d : deltas) {
    if (d.kind == OutputDelta::Kind::kReasoning) {
      if (!show_reasoning_) continue;
      if (!in_reasoning_) std::fputs(color_ ? kDim : "<think>\n", out_);
      in_reasoning_ = true;
      put(out_, d.text);
    } else if (d.kind == OutputDelta::Kind::kContent) {
      close_reasoning();
      put(out_, d.text);
    }
  }
  std::fflush(out_);
}

void ReplyPrinter::end(const ParsedMessage& message) {
  close_reasoning();
  for (const ToolCall& call : message.tool_calls)
    std::fprintf(out_, "\n[tool call] %s %s", call.name.c_str(), call.arguments.c_str());
  std::fputs("\n", out_);
  std::fflush(out_);
}

}  // namespace qwick
