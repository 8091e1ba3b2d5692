// POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API over the chat
// template, the request queue and the prompt cache (chat_generation.h), answered in Anthropic's
// shapes (anthropic_format.h). Errors on these paths use Anthropic's error shape.
//
// Part of ApiServer (api_server.h), tested with it in tests/server/anthropic_*_test.cpp.
#pragma once

#include <httplib.h>

#include "server/chat_generation.h"

namespace qwick {

class MessagesEndpoint {
 public:
  explicit MessagesEndpoint(ServerContext ctx) : ctx_(ctx) {}

  // Throws ApiError for what is wrong with the request (before anything is queued).
  void create(const httplib::Request& req, httplib::Response& res);
  void count_tokens(const httplib::Request& req, httplib::Response& res);

 private:
  ServerContext ctx_;
};

// Whether errors on `path` take Anthropic's shape.
bool is_messages_path(const std::string& path);

}  // namespace qwick
