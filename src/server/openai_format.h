// The JSON the server answers with, shaped as llama-server sends it (api-and-ecosystem.md §1):
// chat.completion / chat.completion.chunk, text_completion, usage with
// prompt_tokens_details.cached_tokens, llama-server's timings, and log-probabilities in the chat
// ({"content": [{token, logprob, bytes, top_logprobs}]}) and legacy completion forms. Keys are
// written in llama-server's order.
//
// A ResponseAccumulator collects a response's events (deltas, tokens) into the final message and
// gives tool calls their ids, so the streamed and the whole response agree by construction.
//
// Tested in tests/server/server_stream_test.cpp (exact SSE bytes) and tests/node.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "server/response_task.h"
#include "text/tokenizer.h"

namespace qwick {

struct ResponseMeta {
  std::string id;  // chatcmpl-... / cmpl-...
  int64_t created = 0;
  std::string model;
  std::string fingerprint;
  bool chat = true;
  std::string reasoning_field = "reasoning_content";
};

struct AccumulatedCall {
  std::string id, name, arguments;
};

class ResponseAccumulator {
 public:
  explicit ResponseAccumulator(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Adds an output event's deltas and tokens. Returns the streaming deltas for the event, in the
  // chat form ({"content": ...}, {"tool_calls": [...]}, ...), one per delta; completions get one
  // {"text": ...} for the whole event.
  std::vector<nlohmann::ordered_json> add(const ResponseEvent& event, const ResponseMeta& meta);
  // The log-probabilities of `tokens` in the endpoint's form (chat: {"content": [...]};
  // completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}).
  nlohmann::ordered_json logprobs(const std::vector<GeneratedToken>& tokens, bool chat);

  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<AccumulatedCall>& calls() const { return calls_; }
  const std::vector<GeneratedToken>& tokens() const { return tokens_; }

 private:
  const Tokenizer& tokenizer_;
  std::string reasoning_, content_;
  std::vector<AccumulatedCall> calls_;
  std::vector<GeneratedToken> tokens_;
  int64_t text_offset_ = 0;  // completions: where the next token's text starts
};

// "data: <json>\n\n"
std::string sse_event(const nlohmann::ordered_json& data);

nlohmann::ordered_json usage_json(const CompletionStats& stats);
nlohmann::ordered_json timings_json(const CompletionStats& stats);

// One streamed chunk: chat {"choices": [{"finish_reason", "index", "delta"[, "logprobs"]}], ...}
// or completions {"choices": [{"text", "index", "logprobs", "finish_reason"}], ...}.
nlohmann::ordered_json stream_chunk(const ResponseMeta& meta, nlohmann::ordered_json delta,
                                    const nlohmann::ordered_json& finish_reason,
                                    const nlohmann::ordered_json& logprobs);
// The include_usage chunk: no choices, usage (and the caller adds timings).
nlohmann::ordered_json usage_chunk(const ResponseMeta& meta, const CompletionStats& stats);

// The whole (non-streamed) response.
nlohmann::ordered_json whole_response(const ResponseMeta& meta, ResponseAccumulator& acc,
                                      const std::string& finish_reason, const CompletionStats& stats,
                                      bool logprobs);

// A random id: `prefix` + 32 letters and digits.
std::string random_id(const std::string& prefix, size_t length = 32);

}  // namespace qwick
