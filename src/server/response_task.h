// One HTTP request's completion: the CompletionTask the request queue runs, and the channel
// between the engine worker and the HTTP thread that answers.
//
// On the worker, each generated token goes through the text pipeline
//     StreamDecoder (whole UTF-8) -> StopStrings (held back while a stop string may be starting)
//       -> OutputParser (chat: reasoning / content / tool-call deltas) or plain text (completions)
// and the resulting deltas are posted as events, with the log-probabilities of the tokens that
// produced them. A stop string, or the first complete tool call when parallel_tool_calls is false, stops
// the generation. The HTTP thread waits for events (with a timeout, to write keep-alives that
// reveal a disconnected client) and cancels the task when the client is gone.
//
// Tested through the server tests (tests/server/server_stream_test.cpp: exact SSE bytes from a
// scripted engine) and tests/node.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/request_queue.h"
#include "server/metrics.h"
#include "text/output_parser.h"
#include "text/stop_strings.h"
#include "text/stream_decoder.h"

namespace qwick {

struct ResponseEvent {
  enum class Kind {
    kPrefill,   // done / total prompt tokens are in the sequence
    kOutput,    // deltas (and the tokens that produced them, when log-probabilities were asked for)
    kFinished,  // stats, finish_reason
    kFailed,    // error
  };
  Kind kind = Kind::kOutput;
  int64_t done = 0, total = 0;
  std::vector<OutputDelta> deltas;
  std::vector<GeneratedToken> tokens;
  CompletionStats stats;
  std::string finish_reason;  // "stop", "length", "tool_calls" or "cancelled"
  std::string stop_string;    // the stop string that ended the output, if one did
  std::string error;
  bool shutting_down = false;
};

struct ResponseOptions {
  bool chat = true;  // parse reasoning and tool calls (else plain text)
  OutputParserOptions parser;
  std::vector<std::string> stop;  // stop strings
  bool logprobs = false;
  bool parallel_tool_calls = true;
  bool special = false;  // control tokens the model writes appear in the text (else hidden)
};

class ResponseTask : public CompletionTask {
 public:
  using Clock = std::chrono::steady_clock;
  ResponseTask(const Tokenizer& tokenizer, ResponseOptions options, ServerMetrics& metrics);

  // --- HTTP thread ---
  void cancel() { cancelled_.store(true); }
  // Moves the events posted so far into `out`, waiting up to `timeout` for at least one.
  // False when none came.
  bool wait(std::vector<ResponseEvent>& out, Clock::duration timeout);

  // --- worker thread (CompletionTask) ---
  bool cancelled() const override { return cancelled_.load(); }
  void on_prefill(int64_t done, int64_t total) override;
  TokenAction on_token(const GeneratedToken& token) override;
  void on_finished(const CompletionStats& stats) override;
  void on_failed(const std::string& message, bool shutting_down) override;

 private:
  // Text -> deltas through the stop strings and the parser; true once the output is complete
  // (a stop string, or the first tool call when parallel calls are off).
  bool feed(const std::string& text, std::vector<OutputDelta>& deltas);
  // Text past the stop strings -> deltas.
  bool emit(const std::string& text, std::vector<OutputDelta>& deltas);
  bool truncate_calls(std::vector<OutputDelta>& deltas, size_t from);
  void finish_text(std::vector<OutputDelta>& deltas);
  void post(ResponseEvent event);

  ResponseOptions options_;
  ServerMetrics& metrics_;
  Clock::time_point created_;
  std::atomic<bool> cancelled_{false};

  // Worker side.
  StreamDecoder decoder_;
  StopStrings stops_;
  OutputParser parser_;
  bool text_done_ = false, first_token_ = true, ended_by_text_ = false;
  int64_t reasoning_tokens_ = 0;  // tokens fed while the parser was in the reasoning
  std::vector<GeneratedToken> unsent_tokens_;

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<ResponseEvent> events_;
};

}  // namespace qwick
