// The device sampler (sample/sample_cuda.h) against the distribution the host Sampler
// (runtime/sampler.h) draws from: greedy, the cuts and the temperature.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "backend/cuda/cuda_weights.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "cuda_test_util.h"
#include "kernel_test_util.h"
#include "kernels/activation.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/kv_q8.h"
#include "kernels/deltanet/deltanet.h"
#include "kernels/deltanet/deltanet_chunked_cuda.h"
#include "kernels/deltanet/deltanet_cuda.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/matmul_parallel.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/router.h"
#include "kernels/norm/norm_cuda.h"
#include "kernels/norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "kernels/sample/sample_cuda.h"
#include "kernels/vector/vector_ops.h"
#include "test_util.h"

namespace qwick {
namespace {

using namespace test;

struct SampleRun {
  std::vector<int32_t> tokens;
  int32_t position = 0;
  uint64_t draws = 0;
};

// `candidates`: with the per-block top-k candidates (the decode's configuration), else the sampler's
// whole-vocabulary path only.
SampleRun sample_many(const std::vector<float>& logits, const cuda::SamplingState& st, int draws,
                      bool candidates = true) {
  DeviceArray<float> dl(logits);
  DeviceArray<cuda::SamplingState> state(std::vector<cuda::SamplingState>{st});
  DeviceArray<int32_t> token(1), pos(std::vector<int32_t>{0}), counter(std::vector<int32_t>{0});
  DeviceArray<cuda::SamplePartial> partials(cuda::kSampleMaxBlocks);
  DeviceArray<cuda::SampleCandidate> cands(size_t{cuda::kSampleMaxBlocks} * cuda::kSampleBlockCandidates);
  DeviceArray<int32_t> cand_counts(cuda::kSampleMaxBlocks);
  SampleRun r;
  for (int i = 0; i < draws; ++i) {
    token.poison();
    cuda::sample_token({dl.data(), static_cast<int64_t>(logits.size()), state.data(), token.data(),
                        pos.data(), partials.data(), counter.data(), candidates ? cands.data() : nullptr,
                        candidates ? cand_counts.data() : nullptr},
                       nullptr);
    r.tokens.push_back(token.download()[0]);
  }
  EXPECT_EQ(counter.download()[0], 0) << "the last block resets the count";
  r.position = pos.download()[0];
  r.draws = state.download()[0].draws;
  return r;
}

// Empirical frequencies of `r.tokens` against the probabilities exp((l - max) / T) over `allowed`
// (0 elsewhere): within five standard deviations.
void expect_frequencies(const std::vector<float>& logits, const std::vector<int>& allowed, float temperature,
                        const SampleRun& r) {
  std::map<int, double> want;
  double total = 0, top = -INFINITY;
  for (int id : allowed) top = std::max<double>(top, logits[static_cast<size_t>(id)]);
  for (int id : allowed) total += want[id] = std::exp((logits[static_cast<size_t>(id)] - top) / temperature);
  std::map<int, int> count;
  for (int32_t t : r.tokens) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, static_cast<int32_t>(logits.size()));
    ASSERT_TRUE(want.count(t)) << "id " << t << " is cut";
    ++count[t];
  }
  const double n = static_cast<double>(r.tokens.size());
  for (const auto& [id, w] : want) {
    const double p = w / total, f = count[id] / n;
    EXPECT_NEAR(f, p, 5 * std::sqrt(p * (1 - p) / n) + 1e-3) << "id " << id;
  }
}

TEST(Sample, GreedyAndCutsAndDistribution) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  // Greedy over the real vocabulary, with the maximum duplicated (the lower id wins) and NaNs around.
  auto logits = randn(248320, rng, 3.0f);
  const auto top = std::max_element(logits.begin(), logits.end());
  const int32_t best = static_cast<int32_t>(top - logits.begin());
  logits[static_cast<size_t>(best) + 1 < logits.size() ? logits.size() - 1 : static_cast<size_t>(best)] =
      *top;
  logits[best == 17 ? 18 : 17] = NAN;
  const SampleRun g = sample_many(logits, {}, 3);
  EXPECT_EQ(g.tokens, (std::vector<int32_t>{best, best, best}));
  EXPECT_EQ(g.position, 3);
  EXPECT_EQ(g.draws, 3u);
  // Cuts that leave one token: top-k 1, top-p ~0, min-p 1 (on logits without the tied maximum: tokens
  // tied exactly at a cut are all kept, see sample_cuda.h).
  logits[static_cast<size_t>(best) + 1 < logits.size() ? logits.size() - 1 : static_cast<size_t>(best)] =
      0.0f;
  logits[static_cast<size_t>(best)] = *std::max_element(logits.begin(), logits.end()) + 1.0f;
  for (cuda::SamplingState st :
       {cuda::SamplingState{1.0f, 1, 1.0f, 0.0f, 7, 0}, cuda::SamplingState{1.0f, 0, 1e-6f, 0.0f, 7, 0},
        cuda::SamplingState{2.0f, 0, 1.0f, 1.0f, 7, 0}})
    EXPECT_EQ(sample_many(logits, st, 5).tokens, std::vector<int32_t>(5, best));

  // A small vocabulary: empirical frequencies against the probabilities the host Sampler's rules give.
  const std::vector<float> small = {1.0f, 2.5f, 0.3f, 2.0f, -1.0f, 1.7f, 0.0f, 2.2f};
  struct Case {
    cuda::SamplingState st;
    std::vector<int> allowed;  // ids the cuts keep
  };
  const std::vector<Case> cases = {
      {{1.0f, 0, 1.0f, 0.0f, 1, 0}, {0, 1, 2, 3, 4, 5, 6, 7}},
      {{0.7f, 3, 1.0f, 0.0f, 2, 0}, {1, 7, 3}},
      {{1.0f, 0, 0.6f, 0.0f, 3, 0}, {1, 7, 3}},     // p sorted: .29 .21 .18 (.68 >= .6 after three)
      {{1.3f, 0, 1.0f, 0.4f, 4, 0}, {1, 7, 3, 5}},  // p >= 0.4 · p_max
  };
  for (bool candidates : {true, false})
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt::format("T {} top_k {} top_p {} min_p {} candidates {}", c.st.temperature, c.st.top_k,
                               c.st.top_p, c.st.min_p, candidates));
      expect_frequencies(small, c.allowed, c.st.temperature, sample_many(small, c.st, 6000, candidates));
    }
}

// The real vocabulary under top-k (the per-block candidates): the 20 largest logits spread over the
// blocks' ranges, with top-p on top; then ties at the cut, spread (every tied token kept) and crowded
// into one block's range past its room for candidates (the whole-vocabulary path), which must agree.
TEST(Sample, TopKOverTheVocabulary) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  auto logits = randn(248320, rng, 1.0f);
  std::vector<int> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  for (int i = 0; i < 40; ++i) logits[static_cast<size_t>(ids[static_cast<size_t>(i)])] = 8.0f + 0.1f * i;
  const std::vector<int> top20(ids.begin() + 20, ids.begin() + 40);  // the 20 largest
  for (bool candidates : {true, false}) {
    SCOPED_TRACE(candidates);
    expect_frequencies(logits, top20, 1.0f,
                       sample_many(logits, {1.0f, 20, 1.0f, 0.0f, 11, 0}, 3000, candidates));
    // top-p 0.5 over the 20: the largest until half the mass (p ∝ exp(0.1 i)).
    std::vector<double> p;
    for (int i = 39; i >= 20; --i) p.push_back(std::exp(0.1 * (i - 39)));
    double total = std::accumulate(p.begin(), p.end(), 0.0), acc = 0;
    std::vector<int> kept;
    for (int i = 39; acc < 0.5 * total; --i) kept.push_back(ids[static_cast<size_t>(i)]), acc += p[39 - i];
    expect_frequencies(logits, kept, 0.8f,
                       sample_many(logits, {0.8f, 20, 0.5f, 0.0f, 12, 0}, 3000, candidates));
  }
  // 300 tokens tied at the top: spread over the vocabulary, then 200 of them in ids [1000, 1200).
  for (bool crowded : {false, true}) {
    SCOPED_TRACE(crowded);
    auto tied = randn(248320, rng, 1.0f);
    std::vector<int> at(ids.begin(), ids.begin() + 300);
    if (crowded)
      for (int i = 0; i < 200; ++i) at[static_cast<size_t>(i)] = 1000 + i;
    for (int id : at) tied[static_cast<size_t>(id)] = 9.0f;
    std::sort(at.begin(), at.end());
    at.erase(std::unique(at.begin(), at.end()), at.end());
    const SampleRun r = sample_many(tied, {1.0f, 20, 1.0f, 0.0f, 13, 0}, 6000);
    expect_frequencies(tied, at, 1.0f, r);
  }
}

}  // namespace
}  // namespace qwick
