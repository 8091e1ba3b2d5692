// The CPU backend's KV cache in every type: what write stores is what head() shows (rounded to the
// type: bf16, or kv_q8.h's bytes and row scale), growing keeps the rows, save / load round-trip
// into a cache of another capacity (how a prompt-cache snapshot is restored), and gather shows runs
// of rows as one view. The block pool over it: lowest blocks first, all or none, runs of a table.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_kv_pool.h"
#include "backend/cpu/cpu_state.h"
#include "core/error.h"
#include "core/numeric.h"
#include "kernels/attention/kv_q8.h"
#include "test_util.h"

namespace qwick {
namespace {

constexpr int kHeads = 3, kHeadDim = 40;

// What head `h` holds for positions [0, n), keys (or values), as f32.
std::vector<float> stored(const KvCache& cache, int h, int64_t n, bool values) {
  const KvHeadView kv = cache.head(h);
  const void* rows = values ? kv.v : kv.k;
  const float* scales = values ? kv.v_scale : kv.k_scale;
  std::vector<float> out(static_cast<size_t>(n * kHeadDim));
  for (size_t i = 0; i < out.size(); ++i) {
    if (kv.dtype == KvDtype::kF32)
      out[i] = static_cast<const float*>(rows)[i];
    else if (kv.dtype == KvDtype::kBF16)
      out[i] = bf16_to_f32(static_cast<const uint16_t*>(rows)[i]);
    else
      out[i] = kv_q8_value(static_cast<const uint8_t*>(rows)[i], scales[i / kHeadDim]);
  }
  return out;
}

// Position p's keys (or values), [kHeads, kHeadDim]: a spread growing with p and the head, and
// position 3 all zeros.
std::vector<float> row(int64_t p, bool values) {
  auto x = test::random_floats(kHeads * kHeadDim, static_cast<uint64_t>(2 * p + values),
                               1.0f + static_cast<float>(p % 5));
  for (size_t i = 0; i < x.size(); ++i) x[i] *= p == 3 ? 0.0f : 1.0f + static_cast<float>(i / kHeadDim);
  return x;
}

void write_rows(KvCache& cache, int64_t from, int64_t to) {
  for (int64_t p = from; p < to; ++p) cache.write(p, row(p, false).data(), row(p, true).data());
}

TEST(KvCache, Q8WriteStoresEachRowsCodesAndScale) {
  KvCache cache(KvDtype::kQ8, kHeads, kHeadDim);
  const int64_t n = 6;
  cache.reserve(n, 1000);
  write_rows(cache, 0, n);
  for (int h = 0; h < kHeads; ++h) {
    const KvHeadView kv = cache.head(h);
    for (bool values : {false, true}) {
      const auto* codes = static_cast<const uint8_t*>(values ? kv.v : kv.k);
      const float* scales = values ? kv.v_scale : kv.k_scale;
      for (int64_t p = 0; p < n; ++p) {
        const std::vector<float> written = row(p, values);
        const float* x = written.data() + h * kHeadDim;
        float amax = 0.0f;
        for (int d = 0; d < kHeadDim; ++d) amax = std::fmax(amax, std::fabs(x[d]));
        ASSERT_EQ(scales[p], kv_q8_scale(amax)) << h << " " << values << " " << p;
        for (int d = 0; d < kHeadDim; ++d)
          EXPECT_EQ(codes[p * kHeadDim + d], kv_q8_code(x[d], scales[p]))
              << h << " " << values << " " << p << " " << d;
      }
    }
  }
}

TEST(KvCache, GrowingKeepsTheRows) {
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kF32, KvDtype::kQ8}) {
    KvCache cache(dtype, kHeads, kHeadDim);
    cache.reserve(5, 5);
    ASSERT_EQ(cache.capacity(), 5);
    write_rows(cache, 0, 5);
    std::vector<std::vector<float>> before;
    for (int h = 0; h < kHeads; ++h)
      for (bool values : {false, true}) before.push_back(stored(cache, h, 5, values));
    cache.reserve(6, 1000);
    ASSERT_GT(cache.capacity(), 5);
    write_rows(cache, 5, 6);
    for (int h = 0, i = 0; h < kHeads; ++h)
      for (bool values : {false, true})
        EXPECT_EQ(stored(cache, h, 5, values), before[static_cast<size_t>(i++)]) << h;
  }
}

TEST(KvCache, SaveThenLoadIntoAnotherCapacity) {
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kF32, KvDtype::kQ8}) {
    const int64_t n = 7;
    KvCache saved(dtype, kHeads, kHeadDim);
    saved.reserve(n, 1000);
    write_rows(saved, 0, n);
    const std::vector<uint8_t> bytes = saved.save(n);
    // Keys and values, plus kQ8's f32 scale a row.
    const size_t per_value = dtype == KvDtype::kF32 ? 4 : dtype == KvDtype::kBF16 ? 2 : 1;
    const size_t per_row = kHeadDim * per_value + (dtype == KvDtype::kQ8 ? sizeof(float) : 0);
    EXPECT_EQ(bytes.size(), 2 * kHeads * n * per_row);

    KvCache loaded(dtype, kHeads, kHeadDim);
    loaded.load(bytes, n, n);
    ASSERT_EQ(loaded.capacity(), n);  // not `saved`'s, so each head's rows start elsewhere
    for (int h = 0; h < kHeads; ++h)
      for (bool values : {false, true})
        EXPECT_EQ(stored(loaded, h, n, values), stored(saved, h, n, values)) << h;
    EXPECT_EQ(loaded.save(n), bytes);
  }
}

TEST(KvCache, GatherShowsRunsOfRowsAsOneView) {
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kF32, KvDtype::kQ8}) {
    KvCache cache(dtype, kHeads, kHeadDim);
    cache.reserve(6, 6);
    write_rows(cache, 0, 6);
    const std::vector<KvRowRun> runs = {{4, 2}, {0, 3}};  // rows 4, 5, 0, 1, 2
    std::vector<uint8_t> storage(cache.gather_bytes(5) + 64);
    auto* dst = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) / 64 * 64);
    for (int h = 0; h < kHeads; ++h) {
      const KvHeadView view = cache.gather(h, runs, dst);
      for (bool values : {false, true}) {
        const std::vector<float> all = stored(cache, h, 6, values);
        std::vector<float> want;
        for (int64_t r : {4, 5, 0, 1, 2})
          want.insert(want.end(), all.begin() + r * kHeadDim, all.begin() + (r + 1) * kHeadDim);
        const void* rows = values ? view.v : view.k;
        const float* scales = values ? view.v_scale : view.k_scale;
        for (size_t i = 0; i < want.size(); ++i) {
          const float got = dtype == KvDtype::kF32 ? static_cast<const float*>(rows)[i]
                            : dtype == KvDtype::kBF16
                                ? bf16_to_f32(static_cast<const uint16_t*>(rows)[i])
                                : kv_q8_value(static_cast<const uint8_t*>(rows)[i], scales[i / kHeadDim]);
          ASSERT_EQ(got, want[i]) << h << " " << values << " " << i;
        }
      }
    }
  }
}

TEST(KvBlockPool, LowestBlocksFirstAllOrNone) {
  ModelConfig cfg;
  cfg.layers = {LayerKind::kDeltaNet, LayerKind::kAttention};
  cfg.n_kv_heads = 1;
  cfg.head_dim = 8;
  KvBlockPool pool(cfg, KvDtype::kBF16, 200, 2);  // 4 blocks for 200 positions, 1 for the second sequence
  ASSERT_EQ(pool.blocks(), 5);
  std::vector<int32_t> a, b, c;
  pool.grow(a, 100);
  pool.grow(b, 10);
  pool.grow(a, 130);
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(b, (std::vector<int32_t>{2}));
  const std::vector<KvRowRun> runs = kv_row_runs(a, 130);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].row, 0);
  EXPECT_EQ(runs[0].count, 128);
  EXPECT_EQ(runs[1].row, 3 * kKvBlockRows);
  EXPECT_EQ(runs[1].count, 2);
  EXPECT_EQ(KvRows({nullptr, a}).row(129), 3 * kKvBlockRows + 1);
  pool.shrink(b, 0);
  EXPECT_EQ(pool.free_blocks(), 2);
  EXPECT_THROW(pool.grow(c, 3 * kKvBlockRows), Error);  // 3 needed, 2 free: none taken
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(pool.free_blocks(), 2);
  pool.grow(c, 2 * kKvBlockRows);
  EXPECT_EQ(c, (std::vector<int32_t>{2, 4}));
  pool.shrink(a, 64);
  EXPECT_EQ(a, (std::vector<int32_t>{0}));
  EXPECT_EQ(pool.free_blocks(), 2);
}

}  // namespace
}  // namespace qwick
