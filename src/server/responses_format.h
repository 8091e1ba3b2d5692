// The OpenAI Responses response: the response object and its stream of events.
//
//   {"id": "resp_...", "object": "response", "created_at", "status", "error",
//    "incomplete_details", "model", "output": [items], "usage": {"input_tokens",
//    "input_tokens_details": {"cached_tokens"}, "output_tokens", "output_tokens_details":
//    {"reasoning_tokens"}, "total_tokens"}, ...the request's settings (instructions, tools, ...)}
//
// Output items follow the model's output (output_blocks.h): `reasoning` (its text as a
// reasoning_text content part, summary empty), `message` (one output_text part) and
// `function_call` (call_id "call_...", arguments a JSON object's text). status is completed, or
// incomplete with incomplete_details.reason max_output_tokens.
//
// The stream ("event: TYPE\ndata: JSON\n\n", every event with its sequence_number):
// response.created, response.in_progress, then per item response.output_item.added,
// response.content_part.added, response.output_text.delta / response.reasoning_text.delta /
// response.function_call_arguments.delta, their .done events, response.content_part.done and
// response.output_item.done; then response.completed (or response.incomplete). A failure ends it
// with response.failed.
//
// Tested in tests/server/openai_responses_test.cpp (exact bytes) and tests/node/openai_responses.mjs.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>

#include "server/chat_generation.h"
#include "server/output_blocks.h"

namespace qwick {

class ResponsesWriter : public ChatWriter, private OutputBlocks::Listener {
 public:
  // `echo`: the request settings a response repeats. `on_complete` gets the finished response
  // object and the assistant message the output makes (for the store); not called on failure.
  using Completion =
      std::function<void(const nlohmann::ordered_json& response, nlohmann::ordered_json message)>;
  ResponsesWriter(std::string model, nlohmann::ordered_json echo, Completion on_complete);

  const std::string& id() const { return id_; }
  std::string stream_start() override;
  bool add(const std::vector<ResponseEvent>& events, std::string* out) override;
  int status() const override;
  std::string body() override;
  std::string label() const override { return "responses " + id_; }

 private:
  void opened(const OutputBlock& block, size_t index) override;
  void appended(const OutputBlock& block, size_t index, const std::string& delta) override;
  void closed(const OutputBlock& block, size_t index) override;
  void event(const std::string& type, nlohmann::ordered_json data);
  nlohmann::ordered_json item(size_t index, bool done) const;
  nlohmann::ordered_json response() const;
  nlohmann::ordered_json assistant_message() const;

  std::string id_, model_;
  int64_t created_;
  nlohmann::ordered_json echo_;
  Completion on_complete_;
  OutputBlocks blocks_{"call_"};
  std::vector<std::string> item_ids_;  // per block
  std::string* out_ = nullptr;         // the stream text being written, while streaming
  int64_t sequence_ = 0;
  std::string status_ = "in_progress";
  CompletionStats stats_;
  std::unique_ptr<ApiError> error_;
};

}  // namespace qwick
