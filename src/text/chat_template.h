// The Qwen3.6 chat template (chat_template.jinja of Qwen/Qwen3.6-35B-A3B) as C++: no Jinja engine
// at run time, output byte-identical to the template rendered by Python Jinja the way
// transformers does it.
//
// Inputs are what the template sees: `messages` (OpenAI-style: role, content as a string, null or
// a list of parts, reasoning_content, tool_calls), `tools` (a list, or null), the keyword
// arguments (`enable_thinking`, `preserve_thinking`, `add_vision_id`; they work as in the template:
// only a JSON false disables thinking, only a JSON true preserves history reasoning) and
// add_generation_prompt. Rendering follows the template line by line; see chat_template.cpp.
//
// One deliberate difference: tool-call `arguments` given as a JSON string (the OpenAI wire form)
// are parsed into an object first. The template itself would fail on them (its |items needs a
// mapping), so clients would otherwise have to do it.
//
// What the template rejects raises ChatTemplateError with the template's own message ("No user
// query found in messages.", "System message must be at the beginning.", ...); input the template
// would fail on by a type error gets a message that says what is wrong.
//
// The Qwen3.5 template differs in two lines (no preserve_thinking; non-string scalar tool
// arguments rendered with Python's str(): True, None, ...) and is available as a kind.
//
// Tested in tests/text/chat_template_test.cpp (every golden of shared/reference/chat, byte for
// byte, errors included) and tests/node/chat_template.mjs (generated conversations rendered by
// @huggingface/jinja from the real template files).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"

namespace qwick {

enum class ChatTemplateKind { kQwen36, kQwen35 };

// A conversation the template refuses; the message is the template's.
class ChatTemplateError : public Error {
 public:
  using Error::Error;
};

struct ChatTemplateInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;                                      // null or a list
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
  bool add_generation_prompt = true;
};

std::string render_chat_template(const ChatTemplateInput& input,
                                 ChatTemplateKind kind = ChatTemplateKind::kQwen36);

// Which known template `text` (a chat_template.jinja) is; nullopt for any other. A single trailing
// newline is ignored (Jinja drops it when rendering).
std::optional<ChatTemplateKind> recognise_chat_template(std::string_view text);

}  // namespace qwick
