#include "server/output_blocks.h"

#include <algorithm>
#include <utility>

#include "server/openai_format.h"

namespace qwick {
namespace {

bool is_blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; });
}

OutputBlock::Kind kind_of(OutputDelta::Kind k) {
  return k == OutputDelta::Kind::kReasoning ? OutputBlock::Kind::kReasoning : OutputBlock::Kind::kText;
}

}  // namespace

bool OutputBlocks::has_tool_calls() const {
  return std::any_of(blocks_.begin(), blocks_.end(),
                     [](const OutputBlock& b) { return b.kind == OutputBlock::Kind::kToolCall; });
}

void OutputBlocks::open(OutputBlock block, Listener& listener) {
  close(listener);
  blocks_.push_back(std::move(block));
  open_ = true;
  listener.opened(blocks_.back(), blocks_.size() - 1);
}

void OutputBlocks::append(const std::string& text, Listener& listener) {
  if (text.empty()) return;
  blocks_.back().text += text;
  listener.appended(blocks_.back(), blocks_.size() - 1, text);
}

void OutputBlocks::close(Listener& listener) {
  if (!open_) return;
  open_ = false;
  listener.closed(blocks_.back(), blocks_.size() - 1);
}

void OutputBlocks::add(const std::vector<OutputDelta>& deltas, Listener& listener) {
  for (const OutputDelta& d : deltas) {
    switch (d.kind) {
      case OutputDelta::Kind::kReasoning:
      case OutputDelta::Kind::kContent: {
        const OutputBlock::Kind kind = kind_of(d.kind);
        if (open_ && blocks_.back().kind == kind) {
          append(d.text, listener);
          break;
        }
        held_ += d.text;
        if (is_blank(held_)) break;
        OutputBlock b;
        b.kind = kind;
        open(std::move(b), listener);
        append(std::exchange(held_, {}), listener);
        break;
      }
      case OutputDelta::Kind::kToolCallStart: {
        held_.clear();
        OutputBlock b;
        b.kind = OutputBlock::Kind::kToolCall;
        b.name = d.text;
        b.id = random_id(call_id_prefix_, 24);
        open(std::move(b), listener);
        break;
      }
      case OutputDelta::Kind::kToolCallArguments:
        append(d.text, listener);
        break;
    }
  }
}

void OutputBlocks::finish(Listener& listener) {
  close(listener);
}

}  // namespace qwick
