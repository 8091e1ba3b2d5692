#include "server/messages_endpoint.h"

#include "server/anthropic_format.h"
#include "server/anthropic_request.h"
#include "text/chat_prompt.h"

namespace qwick {

bool is_messages_path(const std::string& path) {
  return path.starts_with("/v1/messages");
}

void MessagesEndpoint::create(const httplib::Request& req, httplib::Response& res) {
  const CompletionRequest r = parse_messages_request(parse_body(req.body), ctx_.model.defaults);
  ChatSubmission s = submit_chat(ctx_, r, "messages");
  auto writer = std::make_shared<MessagesWriter>(ctx_.model.id, s.prompt_tokens);
  if (r.stream)
    send_stream(ctx_, std::move(s.task), std::move(writer), res);
  else
    send_whole(ctx_, std::move(s.task), std::move(writer), res);
}

void MessagesEndpoint::count_tokens(const httplib::Request& req, httplib::Response& res) {
  const ChatTemplateInput in = parse_count_tokens_request(parse_body(req.body), ctx_.model.defaults);
  const ChatPrompt prompt = build_chat_prompt(in, ctx_.model.template_kind, *ctx_.model.tokenizer, false);
  res.set_content(wire_json({{"input_tokens", prompt.tokens.size()}}), "application/json");
}

}  // namespace qwick
