// POST /v1/chat/completions and /v1/completions: request -> prompt tokens -> a ResponseTask in
// the queue -> the answer, streamed (SSE) or whole (chat_generation.h does the queueing and the
// writing; this endpoint the OpenAI shapes of openai_format.h).
//
// Chat prompts come from the chat template (text/chat_prompt.h). With prompt reuse on, the job also
// asks for a snapshot at the end of the conversation history, which the next turn extends.
//
// Part of ApiServer (api_server.h), tested with it.
#pragma once

#include <httplib.h>

#include "server/chat_generation.h"

namespace qwick {

class CompletionEndpoint {
 public:
  explicit CompletionEndpoint(ServerContext ctx) : ctx_(ctx) {}

  // Answers the request; throws ApiError for what is wrong with it (before anything is queued).
  void handle(const httplib::Request& req, httplib::Response& res, bool chat);

 private:
  ServerContext ctx_;
};

}  // namespace qwick
