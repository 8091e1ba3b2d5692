// The CompletionEngine over the CPU backend on the tiny reference model (exact numerics): prompt
// reuse (from the live sequence and from snapshots) gives the same greedy tokens as a fresh start
// and reports the reused tokens; cancellation between prefill chunks and decode steps; the context limit;
// log-probabilities against a softmax of the backend's own logits.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "model/model.h"
#include "runtime/backend_engine.h"

namespace qwick {
namespace {

const Model& tiny() {
  static const std::unique_ptr<Model> model =
      load_model(std::filesystem::path(QWICK_FIXTURES) / "reference" / "tiny" / "mlx4");
  return *model;
}

std::unique_ptr<Backend> backend(int64_t max_context = 0) {
  BackendOptions o;
  o.threads = 1;
  // f32 in every product: each row is then computed the same way whatever rows share its chunk
  // and whether it was prefilled or decoded, so reuse is bitwise invisible. (The fast products
  // choose int8 or bf16 activations by how many rows a product has, so there reuse changes
  // results by rounding, as recomputing with other chunk sizes does.)
  o.exact = true;
  o.max_context = max_context;
  return make_cpu_backend(tiny(), o);
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 500);
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Recorder : CompletionObserver {
  std::vector<int32_t> tokens;
  std::vector<GeneratedToken> generated;
  std::vector<std::pair<int64_t, int64_t>> prefill;
  size_t cancel_after_tokens = SIZE_MAX;
  size_t cancel_after_chunks = SIZE_MAX;
  bool cancel = false;
  bool cancelled() const override { return cancel; }
  void on_prefill(int64_t done, int64_t total) override {
    prefill.emplace_back(done, total);
    if (prefill.size() > cancel_after_chunks) cancel = true;
  }
  TokenAction on_token(const GeneratedToken& t) override {
    tokens.push_back(t.id);
    generated.push_back(t);
    return tokens.size() >= cancel_after_tokens ? TokenAction::kCancel : TokenAction::kContinue;
  }
};

CompletionJob greedy(std::vector<int32_t> prompt, int64_t max_tokens, std::vector<int64_t> snapshot_at = {}) {
  CompletionJob job;
  job.prompt = std::move(prompt);
  job.max_tokens = max_tokens;
  job.snapshot_at = std::move(snapshot_at);
  return job;
}

// The same job from an empty sequence, on its own backend.
std::vector<int32_t> fresh(const CompletionJob& job) {
  auto b = backend();
  BackendEngine engine(*b, tiny().config.vocab_size, {});
  CompletionJob j = job;
  j.reuse = false;
  Recorder r;
  const CompletionStats s = engine.run(j, r);
  EXPECT_EQ(s.cached_tokens, 0);
  return r.tokens;
}

TEST(BackendEngine, ReuseGivesTheSameTokensAsAFreshStart) {
  auto b = backend();
  BackendEngineOptions options;
  options.prefill_chunk = 16;  // several chunks per prompt
  BackendEngine engine(*b, tiny().config.vocab_size, options);

  // Turn 1: a snapshot at the end of the "history" (32 tokens).
  const std::vector<int32_t> a = random_tokens(48, 1);
  Recorder r1;
  CompletionStats s = engine.run(greedy(a, 8, {32}), r1);
  EXPECT_EQ(s.cached_tokens, 0);
  EXPECT_EQ(s.generated_tokens, 8);
  EXPECT_EQ(s.finish_reason, "length");
  EXPECT_EQ(r1.tokens, fresh(greedy(a, 8)));

  // Turn 2 extends the history, not turn 1's prompt: restored from the snapshot at 32.
  const std::vector<int32_t> b2 =
      concat(std::vector<int32_t>(a.begin(), a.begin() + 32), random_tokens(20, 2));
  Recorder r2;
  s = engine.run(greedy(b2, 8), r2);
  EXPECT_EQ(s.cached_tokens, 32);
  EXPECT_EQ(r2.prefill.front(), std::make_pair(int64_t{32}, int64_t{52}));
  EXPECT_EQ(r2.tokens, fresh(greedy(b2, 8)));

  // Turn 3 extends turn 2's prompt and reply: the live sequence holds the prompt and the seven
  // replied tokens that were decoded (the eighth was sampled, never fed back).
  const std::vector<int32_t> c = concat(concat(b2, r2.tokens), random_tokens(10, 3));
  Recorder r3;
  s = engine.run(greedy(c, 6), r3);
  EXPECT_EQ(s.cached_tokens, 52 + 7);
  EXPECT_EQ(r3.tokens, fresh(greedy(c, 6)));

  // Another conversation in between replaces the live sequence; the snapshots remain.
  Recorder other;
  engine.run(greedy(random_tokens(30, 4), 4), other);
  const std::vector<int32_t> d = concat(c, random_tokens(5, 5));
  Recorder r4;
  s = engine.run(greedy(d, 6), r4);
  EXPECT_EQ(s.cached_tokens, static_cast<int64_t>(c.size()));  // the end-of-prompt snapshot of turn 3
  EXPECT_EQ(r4.tokens, fresh(greedy(d, 6)));
  EXPECT_GT(engine.cache_stats().entries, 3);

  // The same prompt again: the saved state covering the whole prompt cannot be used (the last
  // prompt token's logits choose the first reply token), so the next shorter one is.
  Recorder r5;
  s = engine.run(greedy(d, 6), r5);
  EXPECT_EQ(s.cached_tokens, static_cast<int64_t>(c.size()));
  EXPECT_EQ(r5.tokens, r4.tokens);

  // reuse = false starts from scratch.
  CompletionJob no_reuse = greedy(d, 6);
  no_reuse.reuse = false;
  Recorder r6;
  s = engine.run(no_reuse, r6);
  EXPECT_EQ(s.cached_tokens, 0);
  EXPECT_EQ(r6.tokens, r4.tokens);
}

TEST(BackendEngine, SampledOutputWithASeedDoesNotDependOnReuse) {
  auto b = backend();
  BackendEngine engine(*b, tiny().config.vocab_size, {});
  CompletionJob job = greedy(random_tokens(40, 7), 12, {20});
  job.sampling.temperature = 1.0f;
  job.sampling.top_k = 50;
  job.sampling.seed = 1234;
  job.sampling.presence_penalty = 0.5f;
  Recorder first, again;
  engine.run(job, first);
  const CompletionStats s = engine.run(job, again);
  EXPECT_EQ(s.cached_tokens, 20);
  EXPECT_EQ(first.tokens, again.tokens);
  EXPECT_EQ(first.tokens, fresh(job));
}

TEST(BackendEngine, BudgetTooSmallKeepsNoSnapshotsButStillWorks) {
  auto b = backend();
  BackendEngineOptions options;
  options.cache_bytes = 1;
  BackendEngine engine(*b, tiny().config.vocab_size, options);
  const std::vector<int32_t> a = random_tokens(30, 8);
  Recorder r1, r2;
  engine.run(greedy(a, 4, {20}), r1);
  EXPECT_EQ(engine.cache_stats().entries, 0);
  // A prompt off the live sequence but sharing the first 20 tokens: nothing saved to restore.
  const std::vector<int32_t> other =
      concat(std::vector<int32_t>(a.begin(), a.begin() + 20), random_tokens(5, 9));
  const CompletionStats s = engine.run(greedy(other, 4), r2);
  EXPECT_EQ(s.cached_tokens, 0);
  EXPECT_EQ(r2.tokens, fresh(greedy(other, 4)));
}

TEST(BackendEngine, CancelsBetweenPrefillChunksAndDecodeSteps) {
  auto b = backend();
  BackendEngineOptions options;
  options.prefill_chunk = 8;
  BackendEngine engine(*b, tiny().config.vocab_size, options);
  const std::vector<int32_t> a = random_tokens(64, 10);

  Recorder during_prefill;
  during_prefill.cancel_after_chunks = 1;  // after the initial report and one chunk
  CompletionStats s = engine.run(greedy(a, 8), during_prefill);
  EXPECT_EQ(s.finish_reason, "cancelled");
  EXPECT_TRUE(during_prefill.tokens.empty());
  EXPECT_EQ(during_prefill.prefill.back().first, 8);

  Recorder during_decode;
  during_decode.cancel_after_tokens = 3;
  s = engine.run(greedy(a, 8), during_decode);
  EXPECT_EQ(s.finish_reason, "cancelled");
  EXPECT_EQ(during_decode.tokens.size(), 3u);

  // Still usable, and still right.
  Recorder after;
  engine.run(greedy(a, 8), after);
  EXPECT_EQ(after.tokens, fresh(greedy(a, 8)));
}

// Snapshots are memory: none for a job that was cancelled (its client left), none for prefixes
// shorter than the minimum.
TEST(BackendEngine, CancelledJobsAndShortPrefixesSaveNoSnapshots) {
  auto b = backend();
  BackendEngineOptions options;
  options.min_snapshot_tokens = 40;
  BackendEngine engine(*b, tiny().config.vocab_size, options);
  Recorder cancelled;
  cancelled.cancel_after_tokens = 2;
  EXPECT_EQ(engine.run(greedy(random_tokens(64, 20), 8, {50}), cancelled).finish_reason, "cancelled");
  EXPECT_EQ(engine.cache_stats().entries, 0);
  Recorder in_prefill;
  in_prefill.cancel_after_chunks = 1;
  engine.run(greedy(random_tokens(600, 21), 8, {50}), in_prefill);
  EXPECT_EQ(engine.cache_stats().entries, 0);
  Recorder short_prompt;
  engine.run(greedy(random_tokens(30, 22), 4, {20}), short_prompt);
  EXPECT_EQ(engine.cache_stats().entries, 0);
  // A finished job with a long enough prompt is saved.
  Recorder long_prompt;
  engine.run(greedy(random_tokens(64, 23), 4, {20}), long_prompt);
  EXPECT_GE(engine.cache_stats().entries, 1);
}

TEST(BackendEngine, StopsAtStopTokensAndAtTheContextLimit) {
  auto b = backend(64);
  BackendEngine engine(*b, tiny().config.vocab_size, {});
  const std::vector<int32_t> a = random_tokens(60, 11);
  Recorder full;
  CompletionStats s = engine.run(greedy(a, -1), full);
  // Positions 60..63 take the first four generated tokens; the fifth is sampled from the last
  // position's logits and ends the generation.
  EXPECT_EQ(s.finish_reason, "length");
  EXPECT_EQ(s.generated_tokens, 5);

  Recorder first;
  engine.run(greedy(random_tokens(20, 12), 3), first);
  CompletionJob stop = greedy(random_tokens(20, 12), 3);
  stop.stop_ids = {first.tokens[1]};
  Recorder stopped;
  s = engine.run(stop, stopped);
  EXPECT_EQ(s.finish_reason, "stop");
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>{first.tokens[0]});

  EXPECT_THROW(engine.run(greedy(random_tokens(64, 13), 1), stopped), Error);
  CompletionJob bad = greedy({1, 2, 600}, 1);
  EXPECT_THROW(engine.run(bad, stopped), Error);
  Recorder after;
  engine.run(greedy(a, 2), after);
  EXPECT_EQ(after.tokens.size(), 2u);
}

TEST(BackendEngine, LogprobsAreTheSoftmaxOfTheLogits) {
  auto b = backend();
  BackendEngine engine(*b, tiny().config.vocab_size, {});
  const std::vector<int32_t> a = random_tokens(12, 14);
  CompletionJob job = greedy(a, 3);
  job.top_logprobs = 4;
  Recorder r;
  engine.run(job, r);
  ASSERT_EQ(r.generated.size(), 3u);

  // The first token's distribution, computed here from the backend's logits.
  auto reference = backend();
  std::vector<float> logits(static_cast<size_t>(tiny().config.vocab_size));
  reference->prefill(a, logits, {});
  double max = *std::max_element(logits.begin(), logits.end()), sum = 0;
  for (float l : logits) sum += std::exp(l - max);
  auto logprob = [&](int32_t id) { return logits[static_cast<size_t>(id)] - max - std::log(sum); };
  const GeneratedToken& g = r.generated[0];
  EXPECT_NEAR(g.logprob, logprob(g.id), 1e-4);
  ASSERT_EQ(g.top.size(), 4u);
  EXPECT_EQ(g.top[0].id, g.id);  // greedy: the chosen token is the most likely
  for (size_t i = 0; i < g.top.size(); ++i) {
    EXPECT_NEAR(g.top[i].logprob, logprob(g.top[i].id), 1e-4);
    if (i > 0) {
      EXPECT_LE(g.top[i].logprob, g.top[i - 1].logprob);
    }
  }
  // Nothing outside the list is more likely than its last entry.
  for (size_t id = 0; id < logits.size(); ++id) {
    const bool listed = std::any_of(g.top.begin(), g.top.end(),
                                    [&](const TokenLogprob& t) { return t.id == static_cast<int32_t>(id); });
    if (!listed) {
      EXPECT_LE(logprob(static_cast<int32_t>(id)), g.top.back().logprob + 1e-6);
    }
  }
}

}  // namespace
}  // namespace qwick
