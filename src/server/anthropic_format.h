// The Anthropic Messages response: the message object, its stream of events, and Anthropic's
// error shape.
//
//   {"id": "msg_...", "type": "message", "role": "assistant", "model", "content": [blocks],
//    "stop_reason", "stop_sequence", "usage": {"input_tokens", "cache_creation_input_tokens",
//    "cache_read_input_tokens", "output_tokens"}}
//
// Blocks are `thinking` (the reasoning; signature ""), `text` and `tool_use` (id "toolu_...",
// input parsed from the call's arguments), in the order the model wrote them (output_blocks.h).
// stop_reason: end_turn, max_tokens, stop_sequence (with the sequence) or tool_use. input_tokens
// counts the prompt tokens that were prefilled, cache_read_input_tokens those restored from the
// prompt cache (Anthropic's split: their sum is the prompt).
//
// The stream: message_start, ping, then per block content_block_start, content_block_delta
// (text_delta / thinking_delta / input_json_delta) and content_block_stop, then message_delta
// (stop_reason and the final usage) and message_stop; each as "event: TYPE\ndata: JSON\n\n".
// A failure ends the stream with an `error` event.
//
// Tested in tests/server/anthropic_messages_test.cpp (exact bytes) and tests/node/anthropic_sdk.mjs.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "server/api_error.h"
#include "server/chat_generation.h"
#include "server/output_blocks.h"

namespace qwick {

// {"type": "error", "error": {"type", "message"}} with Anthropic's error types.
nlohmann::ordered_json anthropic_error(const ApiError& e);

class MessagesWriter : public ChatWriter, private OutputBlocks::Listener {
 public:
  MessagesWriter(std::string model, int64_t prompt_tokens);

  std::string stream_start() override;
  bool add(const std::vector<ResponseEvent>& events, std::string* out) override;
  int status() const override;
  std::string body() override;
  std::string label() const override { return "messages " + id_; }

 private:
  void opened(const OutputBlock& block, size_t index) override;
  void appended(const OutputBlock& block, size_t index, const std::string& delta) override;
  void closed(const OutputBlock& block, size_t index) override;
  void event(const char* type, const nlohmann::ordered_json& data);
  nlohmann::ordered_json message(const nlohmann::ordered_json& content) const;

  std::string id_, model_;
  int64_t prompt_tokens_;
  OutputBlocks blocks_{"toolu_"};
  std::string* out_ = nullptr;  // the stream text being written, while streaming
  // Once finished.
  CompletionStats stats_;
  std::string stop_reason_, stop_sequence_;
  std::unique_ptr<ApiError> error_;
};

}  // namespace qwick
