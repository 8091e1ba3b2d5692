// The OpenAI-compatible HTTP server (cpp-httplib): routes, errors, streaming, shutdown.
//
//   POST /v1/chat/completions  POST /v1/completions  GET /v1/models  GET /v1/models/{id}
//   GET /health  GET /metrics  POST /tokenize  POST /detokenize  POST /apply-template  GET /props
// (also without the /v1 prefix, as llama-server accepts them), and the APIs coding agents speak:
//   POST /v1/messages  POST /v1/messages/count_tokens  (Anthropic; messages_endpoint.h)
//   POST /v1/responses  GET /v1/responses/{id}  DELETE /v1/responses/{id}  (responses_endpoint.h)
//
// Every request first passes the access rules (access_policy.h: Host, API keys, CORS).
//
// The server starts before the model is loaded (GET /health answers 503 "Loading model" until
// attach()). Completions go through one RequestQueue (one engine worker, a bounded FIFO: 503 when
// full). Streams are Server-Sent Events written from the HTTP thread as the worker posts events;
// while nothing comes (queued, or a long prefill) the stream gets SSE comments, so a client that
// went away is noticed (a disconnect only shows on a write) and its request cancelled. A whole
// (non-streamed) response that is not ready within the same interval is sent chunked, padded with
// leading spaces (valid JSON whitespace) for the same reason.
//
// cpp-httplib 0.11.4 (Debian's, a compiled library): each open connection holds a pool thread,
// so the pool is sized from the queue (queue + 16 by default), keep-alive is bounded, and a
// client has a bounded total time to send each request (bounded_http_server.h).
//
// Tested in tests/server/server_stream_test.cpp (in-process, a scripted engine, exact SSE bytes)
// and tests/node/server_*.mjs (the qwick serve binary driven by the openai client).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/completion.h"
#include "server/openai_request.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace qwick {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;            // 0: any free port (bind() says which)
  std::string api_key;        // keys, comma-separated (access_policy.h)
  std::string api_key_file;   // more keys, one a line
  std::string cors_origins;   // comma-separated; "*" for any
  std::string allowed_hosts;  // comma-separated Host names accepted besides the loopback ones
  int http_threads = 0;       // 0: queue_size + 16
  int64_t queue_size = 32;
  int64_t max_body_bytes = int64_t{16} << 20;
  double ping_interval_s = 5;     // keep-alive comments while a response waits
  int64_t timeout_s = 600;        // socket read / write timeout
  double receive_timeout_s = 30;  // the total time to send a request's head and body
  int64_t keep_alive_s = 5;
  std::string reasoning_field = "reasoning_content";  // or vLLM's "reasoning"
  bool log_requests = true;                           // one line per completion on stderr
  bool special = false;  // control tokens the model writes (<|box_end|>, ...) appear in the text
  // Control-token strings typed in messages become control tokens (else plain text).
  bool special_in_messages = false;
  int64_t responses_store_size = 1000;   // stored Responses API responses, at most
  int64_t responses_store_age_s = 3600;  // and for at most this long
};

// What the server needs from a loaded model.
struct ServedModel {
  std::string id;    // what /v1/models and responses call it
  std::string path;  // the model directory
  const Tokenizer* tokenizer = nullptr;
  ChatTemplateKind template_kind = ChatTemplateKind::kQwen36;
  std::string chat_template;  // the template text, for /props
  CompletionEngine* engine = nullptr;
  std::vector<int32_t> stop_ids;
  RequestDefaults defaults;
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();  // /v1/models "meta"
};

class ApiServer {
 public:
  explicit ApiServer(ServerOptions options);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds the address; returns the port. Throws Error when it cannot.
  int bind();
  // Serves on the calling thread until shutdown().
  void listen();
  // The model is loaded: from now on requests are served.
  void attach(ServedModel model);
  // Refuses new requests, fails the waiting ones, cancels the running one, lets open streams
  // write their last event (a few seconds at most), then stops listening.
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qwick
