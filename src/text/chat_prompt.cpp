#include "text/chat_prompt.h"

#include <algorithm>
#include <functional>

#include "text/message_literals.h"

namespace qwick {
namespace {

// Where the history ends in `prompt` (the tokens of `text`): the conversation rendered without the
// generation prompt must be a prefix of `text`, and the rest must start with a special token, so
// the history tokenizes alone to the same tokens (added tokens are cut out before anything else).
// 0 when not.
using Render = std::function<std::string(const ChatTemplateInput&)>;

int64_t history_boundary(ChatTemplateInput conversation, const std::string& text,
                         const std::vector<int32_t>& prompt, const Render& render,
                         const Tokenizer& tokenizer) {
  conversation.add_generation_prompt = false;
  std::string history;
  try {
    history = render(conversation);
  } catch (const ChatTemplateError&) {
    return 0;
  }
  if (history.empty() || history.size() >= text.size() || text.compare(0, history.size(), history) != 0)
    return 0;
  const std::vector<int32_t> tail = tokenizer.encode(std::string_view(text).substr(history.size()), true);
  if (tail.empty() || tail.size() >= prompt.size() || !tokenizer.is_special(tail.front()) ||
      !std::equal(tail.rbegin(), tail.rend(), prompt.rbegin()))
    return 0;
  return static_cast<int64_t>(prompt.size() - tail.size());
}

}  // namespace

ChatPrompt build_chat_prompt(const ChatTemplateInput& conversation, ChatTemplateKind kind,
                             const Tokenizer& tokenizer, bool find_history, bool special_in_messages,
                             size_t token_limit) {
  ChatPrompt p;
  if (special_in_messages) {
    p.text = render_chat_template(conversation, kind);
    tokenizer.encode(p.text, true, p.tokens, token_limit);
    const Render render = [&](const ChatTemplateInput& in) { return render_chat_template(in, kind); };
    if (find_history && p.tokens.size() <= token_limit)
      p.history_tokens = history_boundary(conversation, p.text, p.tokens, render, tokenizer);
    return p;
  }
  MessageLiterals literals(tokenizer);
  ChatTemplateInput marked = conversation;
  marked.messages = literals.protect(conversation.messages);
  marked.tools = literals.protect(conversation.tools);
  MessageLiterals::Restored r = literals.restore(render_chat_template(marked, kind));
  p.text = std::move(r.text);
  p.tokens = tokenizer.encode_with_plain_ranges(p.text, r.plain, token_limit);
  const Render render = [&](const ChatTemplateInput& in) {
    return literals.restore(render_chat_template(in, kind)).text;
  };
  if (find_history && p.tokens.size() <= token_limit)
    p.history_tokens = history_boundary(marked, p.text, p.tokens, render, tokenizer);
  return p;
}

}  // namespace qwick
