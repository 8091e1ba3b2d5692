// The decode GEMV kernels (matmul_cuda/matmul_cuda.h: gemv, gemv_stream) against the CPU products
// (matmul_rows_reference through the SIMD matmul) and the CPU norms.
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

// With 4-bit weights, gemv again with int16 activations (GemvArgs::i16): near `ref`, and not bit-equal to
// the f32 result `f32`, so the int16 path ran. The bound is int16's rounding, each value within about
// 1/65534 of its chunk's largest: by estimate ~1e-5 of the terms' size for a row of 64 heavy-tailed
// (normed) inputs, a few times that for an unlucky single row.
void expect_i16_matches(cuda::GemvArgs a, DeviceArray<float>& dy, const std::vector<float>& f32,
                        const std::vector<float>& ref, const WeightMatrix& w, const std::vector<float>& x) {
  if (a.format != WeightFormat::kAffine4) return;
  a.i16 = true;
  dy.poison();
  cuda::gemv(a, nullptr);
  const auto got = dy.download();
  EXPECT_LT(dot_err(got, ref, w, x), 1e-4) << "i16";
  EXPECT_NE(got, f32) << "i16: the same bits as f32";
}

TEST(Gemv, MatchesCpuOverFormatsAndShapes) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  for (const MatrixCase& c : matrix_cases()) {
    SCOPED_TRACE(describe(c));
    HostMatrix h = random_matrix(c.format, c.rows, c.cols, c.group, rng);
    auto up = cuda::upload_matrix(h.w, nullptr);
    const auto x = randn(static_cast<size_t>(c.cols), rng);
    const auto ref = cpu_matmul(h.w, x, 1);
    DeviceArray<float> dx(x), dy(static_cast<size_t>(c.rows));
    cuda::GemvArgs a;
    a.single = up.m;
    a.format = up.m.format;
    a.max_rows = c.rows;
    a.max_cols = c.cols;
    a.x = dx.data();
    a.y = dy.data();
    cuda::gemv(a, nullptr);
    const auto f32 = dy.download();
    EXPECT_LT(dot_err(f32, ref, h.w, x), 2e-5);
    expect_i16_matches(a, dy, f32, ref, h.w, x);
    // accumulate: y += W·x on top of what is there.
    const auto base = randn(static_cast<size_t>(c.rows), rng);
    dy.upload(base);
    a.accumulate = true;
    cuda::gemv(a, nullptr);
    // Measured against the size of the two parts: their sum can cancel (a 1-row case once
    // gave |want| far below |ref| + |base|, turning f32 rounding into a large relative error).
    const std::vector<float> got = dy.download();
    double err = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double d = static_cast<double>(got[i]) - (static_cast<double>(ref[i]) + base[i]);
      err += d * d;
      scale += (std::fabs(static_cast<double>(ref[i])) + std::fabs(static_cast<double>(base[i]))) *
               (std::fabs(static_cast<double>(ref[i])) + std::fabs(static_cast<double>(base[i])));
    }
    EXPECT_LT(std::sqrt(err / scale), 2e-5);
  }
}

// The inputs gemv transforms as it stages them: RMSNorm (every shape) and the gated per-head norm,
// against the CPU norm followed by the CPU matmul.
TEST(Gemv, FusedNormsMatchCpu) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  for (const MatrixCase& c : matrix_cases()) {
    if (c.rows > 20000) continue;
    SCOPED_TRACE(describe(c));
    HostMatrix h = random_matrix(c.format, c.rows, c.cols, c.group, rng);
    auto up = cuda::upload_matrix(h.w, nullptr);
    const auto x = randn(static_cast<size_t>(c.cols), rng, 3.0f), w = randn(static_cast<size_t>(c.cols), rng);
    std::vector<float> normed(x.size());
    rms_norm(x.data(), w.data(), 1e-6f, c.cols, normed.data());
    DeviceArray<float> dx(x), dw(w), dy(static_cast<size_t>(c.rows));
    cuda::GemvArgs a;
    a.single = up.m;
    a.format = up.m.format;
    a.max_rows = c.rows;
    a.max_cols = c.cols;
    a.x = dx.data();
    a.y = dy.data();
    a.norm_weight = dw.data();
    a.eps = 1e-6f;
    cuda::gemv(a, nullptr);
    const auto f32 = dy.download(), ref = cpu_matmul(h.w, normed, 1);
    EXPECT_LT(dot_err(f32, ref, h.w, normed), 2e-5);
    expect_i16_matches(a, dy, f32, ref, h.w, normed);
  }
  struct GatedCase {
    MatrixCase m;
    int head_dim;
  };
  for (const GatedCase& g :
       {GatedCase{{WeightFormat::kAffine4, 2048, 4096}, 128},
        GatedCase{{WeightFormat::kAffine8, 33, 192}, 64}, GatedCase{{WeightFormat::kBF16, 77, 320}, 40},
        GatedCase{{WeightFormat::kAffine4, 40, 256, 32}, 64}}) {
    SCOPED_TRACE(describe(g.m) + fmt::format(", heads of {}", g.head_dim));
    HostMatrix h = random_matrix(g.m.format, g.m.rows, g.m.cols, g.m.group, rng);
    auto up = cuda::upload_matrix(h.w, nullptr);
    const auto x = randn(static_cast<size_t>(g.m.cols), rng), z = randn(static_cast<size_t>(g.m.cols), rng);
    const auto w = randn(static_cast<size_t>(g.head_dim), rng);
    std::vector<float> normed(x.size());
    for (int64_t i = 0; i < g.m.cols; i += g.head_dim)
      gated_rms_norm(x.data() + i, z.data() + i, w.data(), 1e-6f, g.head_dim, normed.data() + i);
    DeviceArray<float> dx(x), dz(z), dw(w), dy(static_cast<size_t>(g.m.rows));
    cuda::GemvArgs a;
    a.single = up.m;
    a.format = up.m.format;
    a.max_rows = g.m.rows;
    a.max_cols = g.m.cols;
    a.x = dx.data();
    a.gate_z = dz.data();
    a.head_dim = g.head_dim;
    a.norm_weight = dw.data();
    a.eps = 1e-6f;
    a.y = dy.data();
    cuda::gemv(a, nullptr);
    const auto f32 = dy.download(), ref = cpu_matmul(h.w, normed, 1);
    EXPECT_LT(dot_err(f32, ref, h.w, normed), 2e-5);
    expect_i16_matches(a, dy, f32, ref, h.w, normed);  // heads of 128 and 64: int16 staged per head
  }
}

// The lm_head's GEMV (many rows: tiles through shared memory), plain and with RMSNorm, stored and
// accumulated, over its two input widths; rows not a multiple of a tile, and more tiles than blocks;
// a wider input takes the register-streaming GEMV.
TEST(Gemv, StreamMatchesCpu) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  for (auto [rows, cols, group] :
       {std::tuple{int64_t{40001}, int64_t{2048}, 64}, std::tuple{int64_t{33000}, int64_t{1024}, 32},
        std::tuple{int64_t{32768}, int64_t{4096}, 64}}) {
    const bool streams = cols <= 2048;
    SCOPED_TRACE(fmt::format("{} x {} / {}", rows, cols, group));
    HostMatrix h = random_matrix(WeightFormat::kAffine4, rows, cols, group, rng);
    auto up = cuda::upload_matrix(h.w, nullptr);
    const auto x = randn(static_cast<size_t>(cols), rng, 3.0f), w = randn(static_cast<size_t>(cols), rng);
    std::vector<float> normed(x.size());
    rms_norm(x.data(), w.data(), 1e-6f, cols, normed.data());
    DeviceArray<float> dx(x), dw(w), dy(static_cast<size_t>(rows));
    cuda::GemvArgs a;
    a.single = up.m;
    a.format = up.m.format;
    a.max_rows = rows;
    a.max_cols = cols;
    a.x = dx.data();
    a.y = dy.data();
    a.stream = true;
    ASSERT_EQ(cuda::gemv_stream_fits(a), streams);
    cuda::gemv(a, nullptr);
    const auto ref = cpu_matmul(h.w, x, 1);
    const auto f32 = dy.download();
    EXPECT_LT(dot_err(f32, ref, h.w, x), 2e-5);
    expect_i16_matches(a, dy, f32, ref, h.w, x);
    const auto base = randn(static_cast<size_t>(rows), rng);
    dy.upload(base);
    a.accumulate = true;
    cuda::gemv(a, nullptr);
    auto got = dy.download();
    for (size_t i = 0; i < got.size(); ++i) got[i] -= base[i];
    EXPECT_LT(dot_err(got, ref, h.w, x), 1e-4);  // less the base: its rounding on top
    a.accumulate = false;
    a.norm_weight = dw.data();
    a.eps = 1e-6f;
    dy.poison();
    cuda::gemv(a, nullptr);
    const auto f32_norm = dy.download(), ref_norm = cpu_matmul(h.w, normed, 1);
    EXPECT_LT(dot_err(f32_norm, ref_norm, h.w, normed), 2e-5);
    expect_i16_matches(a, dy, f32_norm, ref_norm, h.w, normed);
  }
}

// A stack of matrices of different heights in one launch, each problem covering exactly its rows.
TEST(Gemv, StackOfUnequalMatrices) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  const int64_t cols = 512;
  const std::vector<int64_t> heights = {300, 33, 1, 64};
  std::vector<HostMatrix> host;
  std::vector<cuda::UploadedMatrix> dev;
  std::vector<DeviceMatrix> table;
  for (int64_t r : heights) {
    host.push_back(random_matrix(WeightFormat::kAffine4, r, cols, 64, rng));
    dev.push_back(cuda::upload_matrix(host.back().w, nullptr));
    table.push_back(dev.back().m);
  }
  cuda::DeviceBuffer table_dev(table.size() * sizeof(DeviceMatrix));
  cuda::check(
      cudaMemcpy(table_dev.data(), table.data(), table.size() * sizeof(DeviceMatrix), cudaMemcpyHostToDevice),
      "");
  const auto x = randn(static_cast<size_t>(cols), rng);
  const int64_t stride = 300;
  DeviceArray<float> dx(x), dy(heights.size() * stride);
  cuda::GemvArgs a;
  a.table = reinterpret_cast<const DeviceMatrix*>(table_dev.data());
  a.problems = static_cast<int>(heights.size());
  a.format = WeightFormat::kAffine4;
  a.max_rows = 300;
  a.max_cols = cols;
  for (size_t p = 0; p < heights.size(); ++p) a.stack_rows[p] = heights[p];
  a.x = dx.data();
  a.y = dy.data();
  a.y_stride = stride;
  cuda::gemv(a, nullptr);
  // One error over all problems' outputs: a lone output (the 1-row matrix) can be near zero by
  // chance, and its own relative error is then far above f32 rounding (3.7e-5 seen once); a wrong or
  // missing problem still moves the joint error by orders of magnitude more than the bound.
  const auto y = dy.download();
  std::vector<float> got, want;
  for (size_t p = 0; p < heights.size(); ++p) {
    const auto ref = cpu_matmul(host[p].w, x, 1);
    want.insert(want.end(), ref.begin(), ref.end());
    got.insert(got.end(), y.begin() + static_cast<int64_t>(p) * stride,
               y.begin() + static_cast<int64_t>(p) * stride + heights[p]);
  }
  EXPECT_LT(rel_err(got, want), 2e-5);
}

}  // namespace
}  // namespace qwick
