// Reading Anthropic Messages requests (POST /v1/messages, /v1/messages/count_tokens) into the chat
// template's conversation and the engine's settings, every field type-checked.
//
// Mapping: `system` (a string or text blocks) and system messages among `messages` -> the one
// system message, joined by blank lines; `messages` -> the template's
// messages, where an assistant turn's `thinking` blocks become its reasoning_content and its
// `tool_use` blocks its tool_calls, and a user turn's `tool_result` blocks become tool messages
// (before the turn's other text; `is_error` prefixes the result with "Error: "); `tools`
// (name, description, input_schema) -> function tools; `tool_choice` auto, any (a call is
// required), tool (that tool is called) or none, with disable_parallel_tool_use; `strict` tools
// and a forced call are output constraints (server/constraint_request.h: tool_constraint);
// `thinking` enabled / adaptive / disabled -> the template's
// enable_thinking (absent: the server's default); `stop_sequences`, `max_tokens`, `temperature`,
// `top_p`, `top_k`; `metadata` is accepted and unused.
//
// Refused with a 400 naming the field: content blocks other than text, thinking,
// redacted_thinking, tool_use and tool_result (images, documents, server tool results), tools that
// are not custom tools (Anthropic's server tools), a tool schema the constraint cannot enforce
// (when it is strict or a call is forced), a tool_result whose tool_use_id no earlier assistant turn
// issued, tool_use input that is not an object.
//
// Tested in tests/server/anthropic_messages_test.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace qwick {

// A /v1/messages body as a chat CompletionRequest.
CompletionRequest parse_messages_request(const nlohmann::ordered_json& body, const RequestDefaults& defaults);

// A /v1/messages/count_tokens body: only the conversation (system, messages, tools, thinking).
ChatTemplateInput parse_count_tokens_request(const nlohmann::ordered_json& body,
                                             const RequestDefaults& defaults);

}  // namespace qwick
