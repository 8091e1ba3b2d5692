// POST /v1/chat/completions and /v1/completions: request -> prompt tokens -> a ResponseTask in
// the queue -> the answer, streamed (SSE) or whole.
//
// Chat prompts come from the chat template (text/chat_prompt.h). With prompt reuse on, the job also
// asks for a snapshot at the end of the conversation history, which the next turn extends.
//
// Part of ApiServer (api_server.h), tested with it.
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>

#include "runtime/request_queue.h"
#include "server/api_server.h"
#include "server/constraint_request.h"
#include "server/metrics.h"
#include "server/response_task.h"

namespace qwick {

class CompletionEndpoint {
 public:
  CompletionEndpoint(const ServedModel& model, RequestQueue& queue, ServerMetrics& metrics,
                     const ServerOptions& options, std::atomic<int>& open_responses);

  // Answers the request; throws ApiError for what is wrong with it (before anything is queued).
  void handle(const httplib::Request& req, httplib::Response& res, bool chat);

 private:
  struct Pending;  // a queued response and what the HTTP side keeps for it

  void stream(const std::shared_ptr<Pending>& p, httplib::Response& res);
  void whole(const std::shared_ptr<Pending>& p, httplib::Response& res);
  // Turns events into SSE text; true once the stream is complete.
  bool stream_events(Pending& p, std::vector<ResponseEvent>& events, std::string& out);
  // Collects events for a whole response; true once it is complete.
  bool collect(Pending& p, std::vector<ResponseEvent>& events);
  void log(const Pending& p, const CompletionStats& stats, const std::string& finish_reason) const;

  const ServedModel& model_;
  RequestQueue& queue_;
  ServerMetrics& metrics_;
  const ServerOptions& options_;
  std::atomic<int>& open_responses_;
  ConstraintCompiler constraints_;
};

}  // namespace qwick
