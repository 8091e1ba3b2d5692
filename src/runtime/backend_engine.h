// The CompletionEngine over a Backend: prompt reuse, chunked prefill, sampling, log-probabilities.
//
// Before prefilling, a job starts from the longest saved state its prompt extends: the backend's
// live sequence (what the previous job left) or a snapshot in the prompt cache, keeping at least
// one prompt token to prefill (its logits choose the first generated token). Otherwise the
// sequence starts empty. Restored or not, a job computes the same function of its prompt, bit for
// bit, so greedy output with reuse equals output without it: a backend's prefill does not depend
// on the chunking, and a state reached by decoding is reused only where decoding computes exactly
// what prefilling would (Backend::decode_matches_prefill).
//
// While prefilling it saves snapshots at the job's snapshot_at points and at the end of the
// prompt; after generating, at the end of the turn (the last sampled token is not in the
// sequence: it is a stop token, or it was never decoded), where decode matches prefill. A snapshot
// is skipped when the cache already holds those tokens. `qwick run` and `qwick chat` run on it too.
//
// With a draft head in the backend, generation speculates (runtime/speculation.h): the same tokens
// greedily, the same distribution sampling; requests asking for log-probabilities decode plainly.
//
// Tested in tests/server/backend_engine_test.cpp on a tiny model: identical tokens with and without
// reuse, cached token counts, cancellation, log-probabilities against a softmax of the logits.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "runtime/completion.h"
#include "runtime/prompt_cache.h"
#include "runtime/speculation.h"

namespace qwick {

struct BackendEngineOptions {
  int64_t prefill_chunk = 512;
  size_t cache_bytes = size_t{4} << 30;  // prompt-cache budget; 0 = keep no snapshots
  // Speculative decoding: drafts a step at most (runtime/speculation.h), where the backend runs an
  // MTP head; a job's draft_max overrides it. 0 = off.
  int draft_max = 0;
  bool draft_adaptive = true;    // lower the depth per request when drafts stop paying
  DraftOverride draft_override;  // replaces the head's drafts (the bench's oracle, tests)
  // Prefixes shorter than this are not saved: prefilling them again costs less than the memory
  // their snapshot holds (the recurrent state is the same size however short the prefix).
  int64_t min_snapshot_tokens = 0;
};

class BackendEngine : public CompletionEngine {
 public:
  BackendEngine(Backend& backend, int64_t vocab_size, BackendEngineOptions options);

  int64_t context_size() const override { return backend_.max_context(); }
  int64_t vocab_size() const override { return vocab_; }
  CompletionStats run(const CompletionJob& job, CompletionObserver& observer) override;
  PromptCacheStats cache_stats() const override;

 private:
  // Puts the backend at the longest reusable prefix of `prompt`; returns its length.
  int64_t resume(const CompletionJob& job);
  // Takes a snapshot of the sequence (now `tokens`) for the cache; it is kept only when the job
  // ends other than cancelled (a client that left is unlikely to continue).
  void save(std::span<const int32_t> tokens);
  void keep_saved(bool keep);
  std::vector<std::pair<std::vector<int32_t>, std::unique_ptr<SequenceSnapshot>>> unsaved_;
  void append(std::span<const int32_t> tokens);

  Backend& backend_;
  int64_t vocab_;
  BackendEngineOptions options_;
  PromptCache cache_;
  std::vector<int32_t> live_;  // the tokens in the backend's sequence
  // live_ holds decoded tokens, which a backend whose decode differs numerically from its prefill
  // (Backend::decode_matches_prefill) must not reuse as if they had been prefilled.
  bool live_decoded_ = false;
  std::vector<float> logits_, logits_copy_;
  std::vector<std::pair<float, int32_t>> ranked_;
};

// log-softmax of `logits` at `chosen`, and the `top_n` most likely tokens (best first, ties to
// the lower id). NaN counts as -inf.
void token_logprobs(std::span<const float> logits, int32_t chosen, int top_n, GeneratedToken& out,
                    std::vector<std::pair<float, int32_t>>& scratch);

}  // namespace qwick
