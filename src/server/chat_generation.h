// What every completion endpoint (Chat Completions and completions, Anthropic Messages, OpenAI
// Responses) shares between its own request and response formats: a job (a chat turn from the
// chat template) into the request queue, then its events answered as a Server-Sent Events stream
// or as one JSON body.
//
// submit_chat() renders the conversation, checks it fits the context, asks for a snapshot at the
// end of the history (the prompt cache: the next turn restores it) and queues the task.
// send_stream() / send_whole() drive the task's events through an API's ChatWriter. While no event
// comes (queued, a long prefill) they write SSE comments, or leading spaces of a whole body, every
// ping interval, so a client that went away is noticed (a disconnect only shows on a write) and
// its request cancelled.
//
// Tested through tests/server/server_stream_test.cpp, anthropic_messages_test.cpp and
// openai_responses_test.cpp.
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "runtime/request_queue.h"
#include "server/api_error.h"
#include "server/api_server.h"
#include "server/constraint_request.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/response_task.h"

namespace qwick {

// What an endpoint needs of the server.
struct ServerContext {
  const ServedModel& model;
  RequestQueue& queue;
  ServerMetrics& metrics;
  const ServerOptions& options;
  std::atomic<int>& open_responses;
  ConstraintCompiler& constraints;  // output constraints, compiled once per schema or grammar
};

// An API's response format: turns a chat task's events into its wire form.
class ChatWriter {
 public:
  virtual ~ChatWriter() = default;
  // A stream's first bytes, sent before any event.
  virtual std::string stream_start() = 0;
  // Takes output, finished and failed events in order; with `out`, appends their stream text.
  // True once the response is complete (finished or failed).
  virtual bool add(const std::vector<ResponseEvent>& events, std::string* out) = 0;
  // A whole response once complete: its HTTP status and body.
  virtual int status() const = 0;
  virtual std::string body() = 0;
  // For the log line: "messages msg_..." and so on.
  virtual std::string label() const = 0;
};

// A queued chat turn.
struct ChatSubmission {
  std::shared_ptr<ResponseTask> task;
  int64_t prompt_tokens = 0;
};

// Queues `job` (its stop ids are the model's). Throws ApiError: an empty prompt (400 naming
// `prompt_param`), one the context cannot hold (400 exceed_context_size_error, with
// n_prompt_tokens and n_ctx; prompts are tokenized only up to the context size, so a longer one
// counts as "more than n_ctx"), a full queue (503).
ChatSubmission submit_job(ServerContext& ctx, CompletionJob job, ResponseOptions options,
                          const std::string& prompt_param);
// Renders `r` (a chat request) with the chat template and queues it as submit_job() does, with
// its output constraint if it has one (starting after the reasoning block the prompt opened:
// thinking stays free); `messages_param` names the request field the conversation came from.
ChatSubmission submit_chat(ServerContext& ctx, const CompletionRequest& r, const std::string& messages_param);

void send_stream(ServerContext& ctx, std::shared_ptr<ResponseTask> task, std::shared_ptr<ChatWriter> writer,
                 httplib::Response& res);
void send_whole(ServerContext& ctx, std::shared_ptr<ResponseTask> task, std::shared_ptr<ChatWriter> writer,
                httplib::Response& res);

// The error a failed generation is answered with (503 while shutting down, else 500).
ApiError generation_failure(const ResponseEvent& failed);

}  // namespace qwick
