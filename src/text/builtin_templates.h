// The chat templates the engine knows, as shipped by Qwen (src/text/resources, embedded into the
// binary at build time by cmake/embed_text.cmake). make-model writes the Qwen3.6 one into model
// directories; the chat formatter recognises a model's template by comparing against them.
#pragma once

#include <string_view>

namespace qwick {

std::string_view qwen36_chat_template();  // Qwen/Qwen3.6-35B-A3B chat_template.jinja
std::string_view qwen35_chat_template();  // Qwen/Qwen3.5-35B-A3B chat_template.jinja

}  // namespace qwick
