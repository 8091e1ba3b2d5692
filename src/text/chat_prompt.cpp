#include "text/chat_prompt.h"

#include <algorithm>

namespace qwick {
namespace {

// Where the history ends in `prompt` (the tokens of `text`): the conversation rendered without the
// generation prompt must be a prefix of `text`, and the rest must start with a special token, so
// the history tokenizes alone to the same tokens (added tokens are cut out before anything else).
// 0 when not.
int64_t history_boundary(ChatTemplateInput conversation, const std::string& text, const std::vector<int32_t>& prompt,
                         ChatTemplateKind kind, const Tokenizer& tokenizer) {
  conversation.add_generation_prompt = false;
  std::string history;
  try {
    history = render_chat_template(conversation, kind);
  } catch (const ChatTemplateError&) {
    return 0;
  }
  if (history.empty() || history.size() >= text.size() || text.compare(0, history.size(), history) != 0) return 0;
  const std::vector<int32_t> tail = tokenizer.encode(std::string_view(text).substr(history.size()), true);
  if (tail.empty() || tail.size() >= prompt.size() || !tokenizer.is_special(tail.front()) ||
      !std::equal(tail.rbegin(), tail.rend(), prompt.rbegin()))
    return 0;
  return static_cast<int64_t>(prompt.size() - tail.size());
}

}  // namespace

ChatPrompt build_chat_prompt(const ChatTemplateInput& conversation, ChatTemplateKind kind, const Tokenizer& tokenizer,
                             bool find_history) {
  ChatPrompt p;
  p.text = render_chat_template(conversation, kind);
  p.tokens = tokenizer.encode(p.text, true);
  if (find_history) p.history_tokens = history_boundary(conversation, p.text, p.tokens, kind, tokenizer);
  return p;
}

}  // namespace qwick
