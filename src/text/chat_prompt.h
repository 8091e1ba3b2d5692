// A conversation as the model sees it: the chat template's text, its tokens, and where the
// conversation history ends among them.
//
// The history boundary is the prefix worth a sequence snapshot: the same conversation rendered
// without the generation prompt. The next turn's prompt always extends it, because the Qwen3.6
// template changes earlier turns only before the last user query. Used by `qwick serve` and
// `qwick chat`; tested through both (tests/server, tests/text/text_cli_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace qwick {

struct ChatPrompt {
  std::string text;
  std::vector<int32_t> tokens;
  int64_t history_tokens = 0;  // tokens of the history part; 0 when not found or not asked for
};

// Renders and tokenizes `conversation`: the template's control tokens become their ids, while
// control-token strings written in the messages and tools are plain text (message_literals.h)
// unless `special_in_messages` (they become control tokens too: the behaviour of a template
// rendered as one string). Tokenizing stops once there are more than `token_limit` tokens (no
// history boundary then). Throws ChatTemplateError for a conversation the template refuses.
ChatPrompt build_chat_prompt(const ChatTemplateInput& conversation, ChatTemplateKind kind,
                             const Tokenizer& tokenizer, bool find_history, bool special_in_messages = false,
                             size_t token_limit = SIZE_MAX);

}  // namespace qwick
