// Speculative decoding in the CompletionEngine (runtime/speculation.h) on the tiny reference model
// with a random MTP head, exact numerics: greedy output identical to plain greedy at every depth,
// prefill chunking and after a prompt-cache restore, with drafts that are right at a chosen rate
// (an oracle override, since a random head's drafts are almost never right); sampled output with
// the same distribution as plain sampling (chi-square tests against the exact probabilities, on the
// model and on a backend with fixed, far-apart draft and target distributions).
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <random>

#include "model/model.h"
#include "model/synthetic_model.h"
#include "runtime/backend_engine.h"

namespace qwick {
namespace {

namespace fs = std::filesystem;

const Model& tiny_with_head() {
  static const std::unique_ptr<Model> model = [] {
    const fs::path dir = fs::temp_directory_path() / ("qwick-spec-test-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    add_synthetic_mtp(SyntheticModelSpec{}, (fs::path(QWICK_FIXTURES) / "reference" / "tiny" / "hf").string(),
                      dir.string());
    auto m = load_model(dir);
    return m;
  }();
  return *model;
}

std::unique_ptr<Backend> backend(bool head) {
  BackendOptions o;
  o.threads = 1;
  o.exact = true;
  o.kv_dtype = KvDtype::kF32;
  o.mtp = head;
  return make_cpu_backend(tiny_with_head(), o);
}

struct Recorder : CompletionObserver {
  std::vector<int32_t> tokens;
  bool cancelled() const override { return false; }
  void on_prefill(int64_t, int64_t) override {}
  TokenAction on_token(const GeneratedToken& t) override {
    tokens.push_back(t.id);
    return TokenAction::kContinue;
  }
};

std::vector<int32_t> random_tokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 500);
  return t;
}

CompletionJob job(std::vector<int32_t> prompt, int64_t max_tokens) {
  CompletionJob j;
  j.prompt = std::move(prompt);
  j.max_tokens = max_tokens;
  return j;
}

// An oracle that knows the true continuation `truth` of a prompt of `prompt_n` tokens: each draft
// is the true token with probability `p`, else a wrong one.
DraftOverride oracle(const std::vector<int32_t>& truth, int64_t prompt_n, double p, uint64_t seed) {
  auto rng = std::make_shared<std::mt19937_64>(seed);
  return [=](int64_t position, int32_t) {
    const int64_t i = position - prompt_n;
    const int32_t right =
        i >= 0 && i < static_cast<int64_t>(truth.size()) ? truth[static_cast<size_t>(i)] : 0;
    return std::uniform_real_distribution<double>(0, 1)(*rng) < p ? right : (right + 1) % 500;
  };
}

TEST(Speculation, GreedyOutputIsPlainGreedyAtEveryDepthAndChunking) {
  const std::vector<int32_t> prompt = random_tokens(37, 5);
  auto plain_backend = backend(false);
  Recorder plain;
  BackendEngine(*plain_backend, tiny_with_head().config.vocab_size, {}).run(job(prompt, 30), plain);
  ASSERT_EQ(plain.tokens.size(), 30u);

  for (int depth = 0; depth <= 7; ++depth)
    for (int64_t chunk : {5, 512})
      for (double p : {0.0, 0.6, 1.0}) {
        auto b = backend(true);
        BackendEngineOptions o;
        o.prefill_chunk = chunk;
        o.draft_max = depth;
        o.draft_adaptive = false;
        o.draft_override = oracle(plain.tokens, static_cast<int64_t>(prompt.size()), p, 7);
        BackendEngine engine(*b, tiny_with_head().config.vocab_size, o);
        Recorder r;
        const CompletionStats s = engine.run(job(prompt, 30), r);
        EXPECT_EQ(r.tokens, plain.tokens) << "depth " << depth << " chunk " << chunk << " p " << p;
        if (depth > 0 && p == 1.0) {
          EXPECT_GT(s.draft_n_accepted, 0);
          EXPECT_EQ(s.draft_n_accepted, s.draft_n) << "the oracle is always right";
        }
        if (p == 0.0) {
          EXPECT_EQ(s.draft_n_accepted, 0);
        }
      }
}

TEST(Speculation, GreedyAfterAPromptCacheRestore) {
  const std::vector<int32_t> history = random_tokens(40, 9);
  std::vector<int32_t> second = history;
  for (int32_t t : random_tokens(12, 10)) second.push_back(t);
  auto plain_backend = backend(false);
  Recorder plain;
  BackendEngine(*plain_backend, tiny_with_head().config.vocab_size, {}).run(job(second, 20), plain);

  auto b = backend(true);
  BackendEngineOptions o;
  o.draft_max = 3;
  o.draft_override = oracle(plain.tokens, static_cast<int64_t>(second.size()), 0.8, 3);
  BackendEngine engine(*b, tiny_with_head().config.vocab_size, o);
  CompletionJob first = job(history, 10);
  first.snapshot_at = {32};
  Recorder r1;
  engine.run(first, r1);
  // Another conversation replaces the live sequence, so the next job restores a snapshot.
  Recorder other;
  engine.run(job(random_tokens(20, 11), 5), other);
  CompletionJob again = job(second, 20);
  Recorder r2;
  const CompletionStats s = engine.run(again, r2);
  EXPECT_EQ(s.cached_tokens, 40);  // the end of the first prompt, saved with the head's cache
  EXPECT_EQ(r2.tokens, plain.tokens);
  EXPECT_GT(s.draft_n_accepted, 0);
}

// Sampled at a high temperature (so the random head's drafts are often accepted): the second
// generated token, the first that speculation chooses, must follow its exact marginal
// distribution, computed from the plain model's logits (chi-square at p = 1e-4).
TEST(Speculation, SamplingKeepsTheDistribution) {
  const std::vector<int32_t> prompt = random_tokens(20, 21);
  const auto V = static_cast<size_t>(tiny_with_head().config.vocab_size);
  SamplingParams sp;
  sp.temperature = 2.0f;

  // Exact P(t1) = sum over t0 of P(t0) P(t1 | t0).
  std::map<std::vector<int32_t>, double> exact;
  {
    auto b = backend(false);
    std::vector<float> logits(V);
    b->prefill(prompt, logits, {});
    const auto root = b->snapshot();
    Sampler sampler(sp, static_cast<int64_t>(V));
    Sampler::Distribution d0, d1;
    sampler.distribution(logits, d0);
    for (const auto& [t0, p0] : d0) {
      b->restore(*root);
      b->decode(t0, logits);
      sampler.distribution(logits, d1);
      for (const auto& [t1, p1] : d1) exact[{t1}] += p0 * p1;
    }
  }

  auto b = backend(true);
  BackendEngineOptions o;
  o.draft_max = 2;
  BackendEngine engine(*b, static_cast<int64_t>(V), o);
  constexpr int kSamples = 3000;
  std::map<std::vector<int32_t>, int> seen;
  int64_t drafted = 0, accepted = 0;
  for (int i = 0; i < kSamples; ++i) {
    CompletionJob j = job(prompt, 3);
    j.sampling = sp;
    j.sampling.seed = static_cast<uint64_t>(i) + 1;
    Recorder r;
    const CompletionStats s = engine.run(j, r);
    ASSERT_EQ(r.tokens.size(), 3u);
    ++seen[{r.tokens[1]}];
    drafted += s.draft_n;
    accepted += s.draft_n_accepted;
  }
  EXPECT_GT(accepted, kSamples / 20) << "too few accepted drafts to test the acceptance rule (" << accepted
                                     << " of " << drafted << ")";
  EXPECT_LT(accepted, drafted) << "too few rejections to test the residual draw";

  // Chi-square over outcomes expected at least 5 times, the rest pooled.
  double chi2 = 0, pooled_expected = 0, pooled_seen = 0;
  int cells = 0;
  for (const auto& [outcome, p] : exact) {
    const double e = p * kSamples;
    const double n = seen.count(outcome) ? seen[outcome] : 0;
    if (e >= 5) {
      chi2 += (n - e) * (n - e) / e;
      ++cells;
    } else {
      pooled_expected += e;
      pooled_seen += n;
    }
  }
  for (const auto& [outcome, n] : seen) EXPECT_TRUE(exact.count(outcome)) << "impossible outcome";
  if (pooled_expected > 0) {
    chi2 += (pooled_seen - pooled_expected) * (pooled_seen - pooled_expected) / pooled_expected;
    ++cells;
  }
  const double df = cells - 1, z = 3.719;  // upper 1e-4 quantile of the normal
  const double critical =
      df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);  // Wilson-Hilferty
  EXPECT_LT(chi2, critical) << cells << " cells";
}

// A backend whose main model always gives `p` and whose head always gives `q` (as logits), to test
// the acceptance rule where both distributions are known and far apart.
class FixedBackend final : public Backend {
 public:
  FixedBackend(std::vector<float> p, std::vector<float> q) : p_(std::move(p)), q_(std::move(q)) {}
  std::string name() const override { return "fixed"; }
  void reset() override { position_ = 0; }
  int64_t position() const override { return position_; }
  int64_t max_context() const override { return 1 << 20; }
  void prefill(std::span<const int32_t> tokens, std::span<float> logits, const PrefillOptions&) override {
    position_ += static_cast<int64_t>(tokens.size());
    std::copy(p_.begin(), p_.end(), logits.begin());
  }
  void decode(int32_t, std::span<float> logits) override {
    ++position_;
    std::copy(p_.begin(), p_.end(), logits.begin());
  }
  std::unique_ptr<SequenceSnapshot> snapshot() const override { return nullptr; }
  void restore(const SequenceSnapshot&) override {}
  bool decode_matches_prefill() const override { return true; }
  int max_step_rows() const override { return 8; }
  void step(std::span<const StepRow> rows, std::span<float> logits) override {
    for (size_t r = 0; r < rows.size(); ++r)
      std::copy(p_.begin(), p_.end(), logits.begin() + static_cast<std::ptrdiff_t>(r * p_.size()));
  }
  void commit(int64_t n) override { position_ += n; }
  bool has_draft_head() const override { return true; }
  void draft_begin(int32_t, std::span<float> logits) override {
    std::copy(q_.begin(), q_.end(), logits.begin());
  }
  void draft_continue(int32_t, std::span<float> logits) override {
    std::copy(q_.begin(), q_.end(), logits.begin());
  }

 private:
  std::vector<float> p_, q_;
  int64_t position_ = 0;
};

TEST(Speculation, AcceptanceRuleGivesTheTargetDistribution) {
  // p = (0.5, 0.3, 0.2), q = (0.1, 0.2, 0.7) over tokens 0..2; tokens 3..7 impossible.
  const float kNever = -std::numeric_limits<float>::infinity();
  std::vector<float> p = {std::log(0.5f), std::log(0.3f), std::log(0.2f), kNever,
                          kNever,         kNever,         kNever,         kNever};
  std::vector<float> q = {std::log(0.1f), std::log(0.2f), std::log(0.7f), kNever,
                          kNever,         kNever,         kNever,         kNever};
  FixedBackend b(p, q);
  SamplingParams sp;
  sp.temperature = 1.0f;
  Sampler sampler(sp, 8);
  Speculator speculator(b, 8, 2, /*adaptive=*/false);
  constexpr int kSamples = 20000;
  std::vector<int> first(8, 0);
  for (int i = 0; i < kSamples; ++i) {
    std::vector<int32_t> drafts;
    const int32_t after = speculator.step(0, sampler, 2, drafts);
    drafts.push_back(after);
    ++first[static_cast<size_t>(drafts[0])];
  }
  EXPECT_GT(speculator.accepted(), 0);
  EXPECT_LT(speculator.accepted(), speculator.drafted());
  // The first token after the verified one follows p exactly (chi-square, 2 degrees of freedom,
  // 1e-4 upper quantile 18.42).
  const double expect[] = {0.5, 0.3, 0.2};
  double chi2 = 0;
  for (int t = 0; t < 3; ++t) {
    const double e = expect[t] * kSamples;
    chi2 += (first[static_cast<size_t>(t)] - e) * (first[static_cast<size_t>(t)] - e) / e;
  }
  EXPECT_LT(chi2, 18.42) << first[0] << " " << first[1] << " " << first[2];
  for (int t = 3; t < 8; ++t) EXPECT_EQ(first[static_cast<size_t>(t)], 0);
}

TEST(Speculation, DepthFallsToZeroWhenDraftsStopPaying) {
  const float kNever = -std::numeric_limits<float>::infinity();
  std::vector<float> p(8, kNever), q(8, kNever);
  p[1] = 0.0f;  // the model always says 1, the head always 2: no draft is ever accepted
  q[2] = 0.0f;
  FixedBackend b(p, q);
  Sampler sampler(SamplingParams{}, 8);
  Speculator speculator(b, 8, 3);
  std::vector<int32_t> drafts;
  for (int i = 0; i < 40 && speculator.depth() > 0; ++i) EXPECT_EQ(speculator.step(0, sampler, 3, drafts), 1);
  EXPECT_EQ(speculator.depth(), 0);
  EXPECT_TRUE(drafts.empty());
  EXPECT_EQ(speculator.accepted(), 0);
  const int64_t drafted = speculator.drafted();
  EXPECT_EQ(speculator.step(0, sampler, 3, drafts), 1);  // plain steps from now on
  EXPECT_EQ(speculator.drafted(), drafted);
}

}  // namespace
}  // namespace qwick
