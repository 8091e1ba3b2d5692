// POST /v1/responses, GET and DELETE /v1/responses/{id}: the OpenAI Responses API over the chat
// template, the request queue and the prompt cache (chat_generation.h), answered in the
// Responses shapes (responses_format.h). Responses with store (the default) are kept in a
// bounded ResponseStore for previous_response_id and GET; an unknown, expired or deleted id is
// a 404 (GET, DELETE) or a 400 naming previous_response_id.
//
// Part of ApiServer (api_server.h), tested with it in tests/server/openai_responses_test.cpp.
#pragma once

#include <httplib.h>

#include "server/chat_generation.h"
#include "server/response_store.h"

namespace qwick {

class ResponsesEndpoint {
 public:
  explicit ResponsesEndpoint(ServerContext ctx);

  // Throw ApiError for what is wrong with the request.
  void create(const httplib::Request& req, httplib::Response& res);
  void get(const httplib::Request& req, httplib::Response& res);
  void remove(const httplib::Request& req, httplib::Response& res);

 private:
  ServerContext ctx_;
  ResponseStore store_;
};

}  // namespace qwick
