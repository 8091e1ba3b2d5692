// One completion as the runtime runs it: prompt tokens in, generated tokens out, one at a time.
//
// A CompletionEngine runs jobs one after another on the calling thread (the request queue's
// worker). The job says where sequence state is worth keeping for later requests (snapshot_at,
// snapshot_end); the observer sees progress and every generated token, and can stop or cancel the
// job between prefill chunks and decode steps. The server builds jobs and observers from HTTP
// requests; tests plug in engines that emit scripted tokens.
//
// The real engine is BackendEngine (backend_engine.h), tested in tests/server/backend_engine_test.cpp;
// the scripted one lives in tests/server.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "constrain/token_constraint.h"
#include "runtime/sampler.h"

namespace qwick {

struct CompletionJob {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = -1;        // < 0: until a stop token or the context is full
  std::vector<int32_t> stop_ids;  // tokens that end generation (not reported as generated)
  int top_logprobs = -1;  // < 0: no log-probabilities; else alternatives per token (0 = only the chosen)
  // Start from saved state when the prompt extends it, and save state at the points below.
  bool reuse = true;
  std::vector<int64_t> snapshot_at;  // prompt lengths worth keeping (e.g. the end of the history)
  bool snapshot_end = true;          // keep the state after the generated turn too
  int draft_max = -1;                // speculative drafts a step at most; < 0: the engine's setting, 0: off
  // The grammar the output must follow (null: free). Its mask is applied before sampling, so
  // tokens are then chosen on the host; generation ends where the grammar is complete.
  std::shared_ptr<TokenConstraint> constraint;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

struct GeneratedToken {
  int32_t id = 0;
  float logprob = 0;              // when the job asked for log-probabilities
  std::vector<TokenLogprob> top;  // the most likely tokens, best first (job.top_logprobs of them)
};

enum class TokenAction {
  kContinue,
  kStop,    // the caller found the end (a stop string, ...): finish_reason "stop"
  kCancel,  // the caller gave up (client gone): finish_reason "cancelled"
};

struct CompletionStats {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens restored from saved state rather than prefilled
  double prompt_ms = 0;       // restoring + prefill
  int64_t generated_tokens = 0;
  double generation_ms = 0;  // from the end of the prefill to the last token
  // Of generated_tokens, those written inside the reasoning (filled by the server's response
  // layer, which parses the output; 0 from the engine).
  int64_t reasoning_tokens = 0;
  std::string finish_reason;     // "stop", "length" or "cancelled"
  int64_t draft_n = 0;           // speculative drafts verified
  int64_t draft_n_accepted = 0;  // of which accepted
};

// Called on the worker thread.
class CompletionObserver {
 public:
  virtual ~CompletionObserver() = default;
  // Polled between prefill chunks and decode steps; true ends the job as "cancelled".
  virtual bool cancelled() const = 0;
  // `done` of `total` prompt tokens are in the sequence (restored ones included); once before the
  // first chunk and after each.
  virtual void on_prefill(int64_t done, int64_t total) = 0;
  virtual TokenAction on_token(const GeneratedToken& token) = 0;
};

// An observer for a caller that never cancels: each token goes to a function.
class TokenCallback final : public CompletionObserver {
 public:
  explicit TokenCallback(std::function<TokenAction(const GeneratedToken&)> fn) : fn_(std::move(fn)) {}
  bool cancelled() const override { return false; }
  void on_prefill(int64_t, int64_t) override {}
  TokenAction on_token(const GeneratedToken& token) override { return fn_(token); }

 private:
  std::function<TokenAction(const GeneratedToken&)> fn_;
};

struct PromptCacheStats {
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t budget = 0;
};

class CompletionEngine {
 public:
  virtual ~CompletionEngine() = default;
  virtual int64_t context_size() const = 0;
  virtual int64_t vocab_size() const = 0;
  // Runs `job` to its end. Throws Error when it cannot run (an invalid token id, the context
  // overflowing); the engine is usable again afterwards.
  virtual CompletionStats run(const CompletionJob& job, CompletionObserver& observer) = 0;
  virtual PromptCacheStats cache_stats() const { return {}; }
};

}  // namespace qwick
