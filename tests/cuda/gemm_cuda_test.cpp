// The prefill GEMM kernels (matmul_cuda/matmul_cuda.h: the simple and wgmma kernels, gemm_tma,
// decode_bf16) against the CPU products on bf16-rounded inputs.
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

// Both GEMM kernels, the wgmma one with 64-, 128-, 144- and 256-slot tiles (whose last tile of 300 rows takes
// its 64-wide product, of 65 rows its 128-wide one; 300 rows are two full 144-wide products and a 64-wide
// one). Beyond the shared cases: an odd number of groups per row (the group words then start at odd elements
// on every other row) and groups of 96 (a 64-wide slice then spans two groups at either parity).
TEST(Gemm, MatchesCpuOverFormatsShapesAndRowCounts) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  std::vector<MatrixCase> cases = matrix_cases();
  cases.push_back({WeightFormat::kAffine4, 129, 320, 64});
  cases.push_back({WeightFormat::kAffine4, 100, 960, 96});
  cases.push_back({WeightFormat::kAffine8, 200, 960, 96});
  for (const MatrixCase& c : cases) {
    if (c.rows > 20000) continue;  // the lm_head is covered by the gemv test and the backend
    for (int64_t n : {1, 7, 64, 65, 300}) {
      HostMatrix h = random_matrix(c.format, c.rows, c.cols, c.group, rng);
      auto up = cuda::upload_matrix(h.w, nullptr);
      const auto x = round_bf16(randn(static_cast<size_t>(n * c.cols), rng));
      const auto ref = cpu_matmul(h.w, x, n), terms = term_sizes(h.w, x, n);
      const auto base = randn(static_cast<size_t>(n * c.rows), rng);
      DeviceArray<uint16_t> dx(to_bf16(x));
      DeviceArray<float> dy(static_cast<size_t>(n * c.rows));
      for (const GemmVariant& v : kGemmVariants) {
        {
          SCOPED_TRACE(describe(c) + fmt::format(", {} rows, {}", n, v.name));
          cuda::GemmArgs a = cuda::gemm_args(up.m, dx.data(), c.cols, n, dy.data(), c.rows);
          a.tile_rows = v.tile_rows;
          dy.upload(std::vector<float>(static_cast<size_t>(n * c.rows), NAN));
          v.run(a, nullptr);
          // Only W's rounding to bf16 separates the two (x is bf16 on both sides): at most 2^-9 of
          // each term, so of the terms' sum in every output.
          constexpr double kBound = 2.5e-3;
          EXPECT_LT(term_err(dy.download(), ref, terms), kBound);
          // accumulate: y += W·x on top of what is there.
          dy.upload(base);
          a.accumulate = true;
          v.run(a, nullptr);
          std::vector<float> want(base);
          for (size_t i = 0; i < want.size(); ++i) want[i] += ref[i];
          EXPECT_LT(term_err(dy.download(), want, terms), kBound);
        }
      }
    }
  }
}

// bf16 weights at 128 slots: a launch of one wave (at most one block an SM) takes one block an SM
// with more stages, a larger one two blocks an SM (gemm_wgmma_cuda.cu). On the H200's 132 SMs: 17 column
// blocks × 7 row tiles = 119 blocks, × 8 = 136; 7 slices, more than the 6 stages.
TEST(Gemm, Bf16LaunchesOfOneWaveAndMore) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  const MatrixCase c{WeightFormat::kBF16, 2050, 448};
  HostMatrix h = random_matrix(c.format, c.rows, c.cols, c.group, rng);
  auto up = cuda::upload_matrix(h.w, nullptr);
  for (int64_t n : {896, 900}) {
    SCOPED_TRACE(fmt::format("{} rows", n));
    const auto x = round_bf16(randn(static_cast<size_t>(n * c.cols), rng));
    const auto ref = cpu_matmul(h.w, x, n), terms = term_sizes(h.w, x, n);
    DeviceArray<uint16_t> dx(to_bf16(x));
    DeviceArray<float> dy(std::vector<float>(static_cast<size_t>(n * c.rows), NAN));
    cuda::GemmArgs a = cuda::gemm_args(up.m, dx.data(), c.cols, n, dy.data(), c.rows);
    a.tile_rows = 128;
    cuda::gemm(a, nullptr);
    EXPECT_LT(term_err(dy.download(), ref, terms), 2.5e-3);
  }
}

// The bf16 copy of a matrix holds the values the wgmma kernel decodes: a GEMM over it through that
// kernel (128-slot tiles, the same products in the same order) gives the same bits as one over the
// codes. Against the CPU's dequantize_row rounded to bf16, at most one bf16 step apart (the kernels
// round scale · code + bias once, the CPU rounds it to f32 first).
TEST(Gemm, DecodeBf16MatchesTheKernelsValues) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  for (const MatrixCase& c :
       {MatrixCase{WeightFormat::kAffine4, 300, 2048}, MatrixCase{WeightFormat::kAffine4, 129, 320, 32},
        MatrixCase{WeightFormat::kAffine4, 100, 960, 96}, MatrixCase{WeightFormat::kAffine8, 200, 960, 96},
        MatrixCase{WeightFormat::kAffine8, 33, 192}, MatrixCase{WeightFormat::kBF16, 77, 320}}) {
    SCOPED_TRACE(describe(c));
    HostMatrix h = random_matrix(c.format, c.rows, c.cols, c.group, rng);
    auto up = cuda::upload_matrix(h.w, nullptr);
    DeviceArray<uint16_t> copy(static_cast<size_t>(c.rows * c.cols));
    cuda::decode_bf16(up.m, copy.data(), nullptr);
    const std::vector<uint16_t> got = copy.download();
    std::vector<float> row(static_cast<size_t>(c.cols));
    int64_t off_by_one = 0;
    for (int64_t r = 0; r < c.rows; ++r) {
      dequantize_row(h.w, r, row.data());
      for (int64_t i = 0; i < c.cols; ++i) {
        const int diff = std::abs(static_cast<int>(got[static_cast<size_t>(r * c.cols + i)]) -
                                  static_cast<int>(f32_to_bf16(row[static_cast<size_t>(i)])));
        ASSERT_LE(diff, 1) << "row " << r << " column " << i;
        off_by_one += diff;
      }
    }
    EXPECT_LE(off_by_one, c.rows * c.cols / 100);

    const int64_t n = 200;
    const auto x = round_bf16(randn(static_cast<size_t>(n * c.cols), rng));
    DeviceArray<uint16_t> dx(to_bf16(x));
    DeviceArray<float> from_codes(static_cast<size_t>(n * c.rows)),
        from_copy(static_cast<size_t>(n * c.rows));
    const DeviceMatrix m16 = bf16_rows(copy, c.rows, c.cols);
    for (auto [m, y] : {std::pair{up.m, &from_codes}, std::pair{m16, &from_copy}}) {
      cuda::GemmArgs a = cuda::gemm_args(m, dx.data(), c.cols, n, y->data(), c.rows);
      a.tile_rows = 128;
      cuda::gemm(a, nullptr);
    }
    EXPECT_EQ(from_codes.download(), from_copy.download());
  }
}

// The TMA GEMM for bf16 weights (gemm_tma_cuda.cu) on its own, over k slices fewer and more than its
// 4 stages, ragged W and slot tiles, slot tiles past one group of 16 (4357 rows: 18 tiles, a last
// group of 2), X rows further apart than K, f32 output stored or added, bf16 output, SwiGLU; and
// through gemm() where its tiles fill the GPU, which hands it the launch.
TEST(Gemm, TmaMatchesCpu) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  struct Case {
    int64_t rows, cols, n, ldx;
  };
  for (const Case& c : {Case{2050, 448, 300, 448}, Case{300, 4096, 513, 4096}, Case{130, 128, 4357, 192},
                        Case{8192, 2048, 256, 2048}, Case{64, 192, 1, 256}}) {
    SCOPED_TRACE(fmt::format("[{} x {}], {} rows of {}", c.rows, c.cols, c.n, c.ldx));
    HostMatrix h = random_matrix(WeightFormat::kBF16, c.rows, c.cols, 64, rng);
    auto up = cuda::upload_matrix(h.w, nullptr);
    auto xs = round_bf16(randn(static_cast<size_t>(c.n * c.ldx), rng));
    std::vector<float> x(static_cast<size_t>(c.n * c.cols));
    for (int64_t s = 0; s < c.n; ++s) std::copy_n(xs.begin() + s * c.ldx, c.cols, x.begin() + s * c.cols);
    const auto ref = cpu_matmul(h.w, x, c.n), terms = term_sizes(h.w, x, c.n);
    DeviceArray<uint16_t> dx(to_bf16(xs));
    DeviceArray<float> dy(static_cast<size_t>(c.n * c.rows));
    cuda::GemmArgs a = cuda::gemm_args(up.m, dx.data(), c.ldx, c.n, dy.data(), c.rows);
    cuda::gemm_tma(a, nullptr);
    EXPECT_LT(term_err(dy.download(), ref, terms), 2.5e-3);
    const auto base = randn(ref.size(), rng);
    dy.upload(base);
    a.accumulate = true;
    cuda::gemm_tma(a, nullptr);
    std::vector<float> want(base);
    for (size_t i = 0; i < want.size(); ++i) want[i] += ref[i];
    EXPECT_LT(term_err(dy.download(), want, terms), 2.5e-3);
    DeviceArray<uint16_t> dy16(ref.size());
    a.accumulate = false;
    a.y = nullptr;
    a.y16 = dy16.data();
    cuda::gemm_tma(a, nullptr);
    const std::vector<uint16_t> y16 = dy16.download();
    std::vector<float> y(y16.size());
    for (size_t i = 0; i < y.size(); ++i) y[i] = bf16_to_f32(y16[i]);
    EXPECT_LT(term_err(y, ref, terms), 5e-3);
  }
  // SwiGLU over a gate|up pair stacked in 8-row runs by decode_bf16 (the shared expert's copy): 4-bit
  // gate and up of 256 rows, act = bf16(silu(gate · x) · (up · x)).
  {
    const int64_t I = 256, K = 512, n = 300;
    HostMatrix hg = random_matrix(WeightFormat::kAffine4, I, K, 64, rng),
               hu = random_matrix(WeightFormat::kAffine4, I, K, 64, rng);
    auto ug = cuda::upload_matrix(hg.w, nullptr), uu = cuda::upload_matrix(hu.w, nullptr);
    DeviceArray<uint16_t> stacked(static_cast<size_t>(2 * I * K));
    cuda::decode_bf16(ug.m, stacked.data(), nullptr, 0);
    cuda::decode_bf16(uu.m, stacked.data(), nullptr, 1);
    const DeviceMatrix m16 = bf16_rows(stacked, 2 * I, K);
    const auto x = round_bf16(randn(static_cast<size_t>(n * K), rng));
    const auto gate = cpu_matmul(hg.w, x, n), up = cpu_matmul(hu.w, x, n);
    std::vector<float> want(gate.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = silu(gate[i]) * up[i];
    DeviceArray<uint16_t> dx(to_bf16(x)), act(want.size());
    cuda::GemmArgs a = cuda::gemm_args(m16, dx.data(), K, n, nullptr, 0);
    a.act = act.data();
    a.ld_act = I;
    cuda::gemm_tma(a, nullptr);
    const std::vector<uint16_t> got16 = act.download();
    std::vector<float> got(got16.size());
    for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_f32(got16[i]);
    EXPECT_LT(rel_err(got, want), 1e-2);
  }
  // 1000 outputs × 4500 rows: 8 × 18 = 144 blocks, more than the H200's 132 SMs.
  HostMatrix h = random_matrix(WeightFormat::kBF16, 1000, 512, 64, rng);
  auto up = cuda::upload_matrix(h.w, nullptr);
  const int64_t n = 4500;
  ASSERT_TRUE(cuda::gemm_tma_fills(1000, n));
  const auto x = round_bf16(randn(static_cast<size_t>(n * 512), rng));
  const auto ref = cpu_matmul(h.w, x, n), terms = term_sizes(h.w, x, n);
  DeviceArray<uint16_t> dx(to_bf16(x));
  DeviceArray<float> dy(static_cast<size_t>(n * 1000));
  cuda::gemm(cuda::gemm_args(up.m, dx.data(), 512, n, dy.data(), 1000), nullptr);
  EXPECT_LT(term_err(dy.download(), ref, terms), 2.5e-3);
}

}  // namespace
}  // namespace qwick
