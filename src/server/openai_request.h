// Reading OpenAI requests (/v1/chat/completions, /v1/completions, /apply-template) into what the
// engine needs, with every field type-checked.
//
// Accepted: the OpenAI fields and the llama-server / vLLM extensions users send (top_k, min_p,
// repetition_penalty / repeat_penalty, repeat_last_n, n_predict, chat_template_kwargs,
// reasoning_format, cache_prompt; `reasoning` on incoming assistant messages), and the output
// constraints of server/constraint_request.h (response_format, json_schema, grammar; tool_choice
// required or a named function and strict functions). A field the server cannot honour (n > 1,
// images, legacy functions, audio, echo, suffix, best_of) is an ApiError 400 that says so, never
// silently ignored; the same holds
// for the sampler and constraint fields of other servers that qwick lacks (guided_*, mirostat,
// ...: unsupported_fields.h). Null counts as absent. Request fields win over the server's
// defaults, which come from its command line, else the model's generation_config.json.
//
// Tested in tests/server/server_api_rules_test.cpp and server_bad_input_test.cpp (rejections with
// their message and param) and end to end in tests/node/server_api.mjs (each field).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "server/constraint_request.h"
#include "text/chat_template.h"

namespace qwick {

enum class ReasoningFormat {
  kParsed,  // reasoning in its own field (llama-server's "deepseek" / "auto")
  kNone,    // the raw text, think tags included, in the content
};

struct RequestDefaults {
  SamplingParams sampling;
  int64_t seed = -1;        // < 0: a random seed per request
  int64_t max_tokens = -1;  // < 0: until a stop token or the context is full
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  ReasoningFormat reasoning_format = ReasoningFormat::kParsed;
  bool cache_prompt = true;
  int64_t vocab_size = 0;  // to check logit_bias token ids
};

struct CompletionRequest {
  bool chat = true;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage

  // Chat: the conversation for the template (tools only when they may be called).
  ChatTemplateInput conversation;
  bool tool_calls = false;  // parse tool calls in the output
  bool parallel_tool_calls = true;
  ReasoningFormat reasoning_format = ReasoningFormat::kParsed;

  // Completions: the prompt as text, or as token ids.
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;

  SamplingParams sampling;
  int64_t max_tokens = -1;
  std::vector<std::string> stop;
  bool logprobs = false;
  int top_logprobs = 0;
  bool cache_prompt = true;
  std::optional<RequestedConstraint> constraint;
};

CompletionRequest parse_chat_request(const nlohmann::ordered_json& body, const RequestDefaults& defaults);
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body,
                                           const RequestDefaults& defaults);

// /apply-template: messages, tools, tool_choice, chat_template_kwargs and add_generation_prompt.
ChatTemplateInput parse_template_request(const nlohmann::ordered_json& body, const RequestDefaults& defaults);

// The server's sampling defaults with the seed resolved (a random one for a negative seed).
SamplingParams default_sampling(const RequestDefaults& defaults);
// A request's seed: a random one when negative.
uint64_t seed_value(int64_t seed);

// The request body as JSON (ordered: tool schemas keep their key order into the prompt); an
// ApiError 400 naming the position for invalid JSON or anything but an object.
nlohmann::ordered_json parse_body(const std::string& body);

}  // namespace qwick
