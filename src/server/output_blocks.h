// A chat turn's output as the agent APIs present it: a sequence of blocks (Anthropic's content
// blocks, the Responses API's output items). Consecutive reasoning deltas form one reasoning
// block, consecutive content deltas one text block, and each tool call is a block of its own.
// Blocks open, grow and close in order, and a listener sees each step, so a stream's events and
// the whole response are built from the same sequence and agree by construction.
//
// Whitespace-only text between blocks (the newlines the model writes around a tool call) is not a
// block: it is held back and only becomes one when more text follows.
//
// Tested through tests/server (the Messages and Responses streams, byte for byte).
#pragma once

#include <string>
#include <vector>

#include "text/output_parser.h"

namespace qwick {

struct OutputBlock {
  enum class Kind { kReasoning, kText, kToolCall };
  Kind kind = Kind::kText;
  std::string text;  // reasoning or text; a tool call's arguments (a JSON object's text)
  std::string name;  // tool call: the function
  std::string id;    // tool call: the id given to it
};

class OutputBlocks {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void opened(const OutputBlock& block, size_t index) = 0;
    virtual void appended(const OutputBlock& block, size_t index, const std::string& delta) = 0;
    virtual void closed(const OutputBlock& block, size_t index) = 0;
  };

  // Tool calls get ids of `call_id_prefix` and 24 random letters and digits.
  explicit OutputBlocks(std::string call_id_prefix) : call_id_prefix_(std::move(call_id_prefix)) {}

  void add(const std::vector<OutputDelta>& deltas, Listener& listener);
  // The end of the output: closes the open block.
  void finish(Listener& listener);

  const std::vector<OutputBlock>& blocks() const { return blocks_; }
  bool has_tool_calls() const;

 private:
  void open(OutputBlock block, Listener& listener);
  void append(const std::string& text, Listener& listener);
  void close(Listener& listener);

  std::string call_id_prefix_;
  std::vector<OutputBlock> blocks_;
  bool open_ = false;
  std::string held_;  // whitespace that starts a text block only if more text follows
};

}  // namespace qwick
