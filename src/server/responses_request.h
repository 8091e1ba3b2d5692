// Reading OpenAI Responses requests (POST /v1/responses) into the chat template's conversation and
// the engine's settings, every field type-checked.
//
// Mapping: `input` as a string -> one user message; as items -> messages: a `message` item
// (role user / assistant / system / developer; content a string or input_text / output_text
// parts) -> a message of that role (developer -> system); `function_call` items -> tool_calls of
// one assistant message (after that turn's assistant text, if any); `function_call_output` -> a
// tool message; a `reasoning` item (its reasoning_text content, else its summary) -> the
// reasoning_content of the assistant message that follows. `instructions` and the system /
// developer messages before the first other message become the one system message (the template
// takes a system message only first). With `previous_response_id`, the stored conversation of that
// response (its input and output, without its instructions) comes before `input`.
// `tools` of type function -> the template's tools; `tool_choice` auto, none, required or a named
// function; `parallel_tool_calls`; `reasoning.effort` none -> enable_thinking false (other
// efforts keep thinking on); `max_output_tokens`, `temperature`, `top_p`; `text.format` text,
// json_object or json_schema. A forced call, `strict` function tools and a JSON format are output
// constraints (server/constraint_request.h), at most one per request.
//
// Refused with a 400 naming the field: other item, part and tool types (images, files, built-in
// tools, item references), `tool_choice` allowed_tools, a schema the constraint cannot enforce,
// a JSON format together with a forced or strict tool call, `background`,
// `conversation`, `prompt`, `top_logprobs`, a function_call_output whose call_id no earlier
// function_call issued, arguments that are not a JSON object.
//
// Tested in tests/server/openai_responses_test.cpp; fuzzed by fuzz/fuzz_responses_request.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "server/openai_request.h"

namespace qwick {

struct ResponsesRequest {
  CompletionRequest chat;  // the conversation (with instructions) and the engine's settings
  // The conversation without the instructions: what a later previous_response_id continues.
  nlohmann::ordered_json history = nlohmann::ordered_json::array();
  // The request fields a response object repeats (instructions, tools, tool_choice, ...).
  nlohmann::ordered_json echo = nlohmann::ordered_json::object();
  bool store = true;
  std::string previous_response_id;
};

// `previous` is the stored conversation of the request's previous_response_id (an array of the
// template's messages), or null when it has none; the caller looks it up (its id is read with
// previous_response_id()).
ResponsesRequest parse_responses_request(const nlohmann::ordered_json& body, const RequestDefaults& defaults,
                                         const nlohmann::ordered_json& previous);

// The request's previous_response_id ("" when absent); a 400 when it is not a string.
std::string previous_response_id(const nlohmann::ordered_json& body);

}  // namespace qwick
