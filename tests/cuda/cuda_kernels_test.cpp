// Every CUDA kernel against its CPU reference, over a table of shapes (the real model's and odd
// ones), on fresh random inputs (the seed is printed), outputs poisoned with NaN before each run so
// an element a kernel fails to write fails the comparison. Skipped without a GPU.
//
// Tolerances: f32 paths (gemv, norms, DeltaNet, decode attention) ~1e-5 relative; paths with bf16
// operands (gemm, prefill attention) 1e-2, as their inputs are rounded to 8 mantissa bits.
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
using cuda::DeviceMatrix;

ThreadPool& pool() {
  static ThreadPool p(0);
  return p;
}

// y[t] = W·x[t] on the CPU (the SIMD matmul, itself checked against matmul_rows_reference).
std::vector<float> cpu_matmul(const WeightMatrix& w, const std::vector<float>& x, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n * w.rows));
  matmul(MatmulProblem{&w, x.data(), static_cast<size_t>(w.cols), static_cast<size_t>(n), y.data(),
                       static_cast<size_t>(w.rows)},
         pool());
  return y;
}

// The size of each output's terms, Σ_i |w_ri·x_si| for n input rows x_s ([n, rows]): the CPU matmul of
// |W| (dequantized to f32, 4096 rows at a time) and |x|.
std::vector<float> term_sizes(const WeightMatrix& w, const std::vector<float>& x, int64_t n) {
  std::vector<float> abs_x(x.size()), terms(static_cast<size_t>(n * w.rows));
  for (size_t i = 0; i < x.size(); ++i) abs_x[i] = std::fabs(x[i]);
  constexpr int64_t kRows = 4096;
  std::vector<float> abs_w(static_cast<size_t>(std::min(w.rows, kRows) * w.cols));
  for (int64_t r0 = 0; r0 < w.rows; r0 += kRows) {
    const int64_t rows = std::min(kRows, w.rows - r0);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = abs_w.data() + r * w.cols;
      dequantize_row(w, r0 + r, row);
      for (int64_t i = 0; i < w.cols; ++i) row[i] = std::fabs(row[i]);
    }
    WeightMatrix m;  // f32 rows
    m.rows = rows;
    m.cols = w.cols;
    m.data = reinterpret_cast<const uint8_t*>(abs_w.data());
    m.row_stride = static_cast<size_t>(w.cols) * sizeof(float);
    const auto part = cpu_matmul(m, abs_x, n);
    for (int64_t s = 0; s < n; ++s)
      std::copy_n(part.begin() + s * rows, rows, terms.begin() + s * w.rows + r0);
  }
  return terms;
}

// ‖y − ref‖ over the size of the products' terms, sqrt(Σ terms²): a row whose terms cancel (a 1-row
// case with fresh inputs once summed to a tiny value) would turn rounding into a large relative error.
double term_err(const std::vector<float>& y, const std::vector<float>& ref, const std::vector<float>& terms) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double d = static_cast<double>(y[i]) - ref[i];
    if (!std::isfinite(d)) return INFINITY;
    err += d * d, scale += static_cast<double>(terms[i]) * terms[i];
  }
  return std::sqrt(err / scale);
}
double dot_err(const std::vector<float>& y, const std::vector<float>& ref, const WeightMatrix& w,
               const std::vector<float>& x) {
  return term_err(y, ref, term_sizes(w, x, 1));
}

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

struct MatrixCase {
  WeightFormat format;
  int64_t rows, cols;
  int group = 64;
};

const std::vector<MatrixCase>& matrix_cases() {
  static const std::vector<MatrixCase> cases = {
      // The real model: DeltaNet in_proj_qkv, out_proj, attention q/o, experts, router (8-bit), lm_head.
      {WeightFormat::kAffine4, 8192, 2048},
      {WeightFormat::kAffine4, 2048, 4096},
      {WeightFormat::kAffine4, 512, 2048},
      {WeightFormat::kAffine4, 2048, 512},
      {WeightFormat::kAffine8, 256, 2048},
      {WeightFormat::kAffine8, 1, 2048},
      {WeightFormat::kAffine4, 32, 2048},
      {WeightFormat::kAffine4, 248320, 2048},
      // Odd sizes, other groups, bf16 and f32 (converted to bf16 at upload).
      {WeightFormat::kAffine4, 1, 64},
      {WeightFormat::kAffine4, 3, 128, 32},
      {WeightFormat::kAffine8, 33, 192},
      {WeightFormat::kAffine4, 100, 640, 128},
      {WeightFormat::kBF16, 77, 320},
      {WeightFormat::kBF16, 1000, 2048},
      {WeightFormat::kF32, 65, 128},
      {WeightFormat::kAffine8, 130, 64, 32},
  };
  return cases;
}

std::string describe(const MatrixCase& c) {
  return fmt::format("{} [{} x {}] group {}", weight_format_name(c.format), c.rows, c.cols, c.group);
}

TEST(Gemv, MatchesCpuOverFormatsAndShapes) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
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
  std::mt19937_64 rng(fresh_seed());
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
  std::mt19937_64 rng(fresh_seed());
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
  std::mt19937_64 rng(fresh_seed());
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

// Median of `reps` timed calls of fn, in microseconds, after one untimed call (module load, caches).
template <typename Fn>
double median_us(Fn&& fn, int reps = 7) {
  cudaEvent_t start, stop;
  cuda::check(cudaEventCreate(&start), "event");
  cuda::check(cudaEventCreate(&stop), "event");
  fn();
  std::vector<float> times;
  for (int rep = 0; rep < reps; ++rep) {
    cuda::check(cudaEventRecord(start), "event");
    fn();
    cuda::check(cudaEventRecord(stop), "event");
    cuda::check(cudaEventSynchronize(stop), "event");
    float ms = 0.0f;
    cuda::check(cudaEventElapsedTime(&ms, start, stop), "event");
    times.push_back(ms);
  }
  cuda::check(cudaEventDestroy(start), "event");
  cuda::check(cudaEventDestroy(stop), "event");
  std::sort(times.begin(), times.end());
  return 1e3 * times[times.size() / 2];
}

// Every GEMM kernel and tile shape: the simple kernel, or gemm() (the wgmma kernel wherever its parts
// are multiples of 128 rows), and the slots per tile.
struct GemmVariant {
  void (*run)(const cuda::GemmArgs&, cudaStream_t);
  bool wgmma;
  int tile_rows;
  const char* name;
};
constexpr GemmVariant kGemmVariants[] = {{cuda::gemm_simple, false, 64, "simple 64x64"},
                                         {cuda::gemm, true, 64, "wgmma 64x128"},
                                         {cuda::gemm, true, 128, "wgmma 128x128"},
                                         {cuda::gemm, true, 144, "wgmma 144x128"},
                                         {cuda::gemm, true, 256, "wgmma 256x128"}};

// Both GEMM kernels, the wgmma one with 64-, 128-, 144- and 256-slot tiles (whose last tile of 300 rows takes
// its 64-wide product, of 65 rows its 128-wide one; 300 rows are two full 144-wide products and a 64-wide
// one). Beyond the shared cases: an odd number of groups per row (the group words then start at odd elements
// on every other row) and groups of 96 (a 64-wide slice then spans two groups at either parity).
TEST(Gemm, MatchesCpuOverFormatsShapesAndRowCounts) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
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
  std::mt19937_64 rng(fresh_seed());
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

// The bf16 matrix [rows, cols] whose rows lie back to back in `values` (a decode_bf16 copy).
DeviceMatrix bf16_rows(const DeviceArray<uint16_t>& values, int64_t rows, int64_t cols) {
  DeviceMatrix m;
  m.rows = rows, m.cols = cols, m.row_bytes = 2 * cols;
  m.data = reinterpret_cast<const uint8_t*>(values.data());
  return m;
}

// The bf16 copy of a matrix holds the values the wgmma kernel decodes: a GEMM over it through that
// kernel (128-slot tiles, the same products in the same order) gives the same bits as one over the
// codes. Against the CPU's dequantize_row rounded to bf16, at most one bf16 step apart (the kernels
// round scale · code + bias once, the CPU rounds it to f32 first).
TEST(Gemm, DecodeBf16MatchesTheKernelsValues) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
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
  std::mt19937_64 rng(fresh_seed());
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

// The device arrays of a grouping of n·k pairs; the counts start at zero, as the grouping needs.
struct GroupingArrays {
  GroupingArrays(int64_t n, int k, int E)
      : offsets(static_cast<size_t>(E) + 1),
        counts(std::vector<int32_t>(static_cast<size_t>(E) + 1, 0)),
        slot_row(static_cast<size_t>(std::max<int64_t>(n * k, 1))),
        slot_of(slot_row.size()),
        tiles(static_cast<size_t>(cuda::moe_max_tiles(n * k, E))),
        tile_count(1) {}
  cuda::MoeGrouping grouping(int tile_rows) const {
    return {offsets.data(), counts.data(),     slot_row.data(), slot_of.data(),
            tiles.data(),   tile_count.data(), tile_rows};
  }
  DeviceArray<int32_t> offsets, counts, slot_row, slot_of;
  DeviceArray<cuda::GemmTile> tiles;
  DeviceArray<int32_t> tile_count;
};

// Router logits [n, E] under which token t picks ids[t·k + j] as its j-th expert.
std::vector<float> logits_routing_to(const std::vector<int32_t>& ids, int64_t n, int k, int E) {
  std::vector<float> logits(static_cast<size_t>(n * E), -100.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j)
      logits[static_cast<size_t>(t * E + ids[static_cast<size_t>(t * k + j)])] = static_cast<float>(k - j);
  return logits;
}

// A grouping of the pairs `ids` (token i / k, rank i % k): offsets are the exclusive scan of the
// histogram, slot_of is a permutation that puts every pair inside its expert's group, slot_row inverts
// it, the tiles cover each group exactly, and the counts are left zero for the next grouping.
void expect_grouping(const std::vector<int32_t>& ids, int k, int E, const GroupingArrays& a, int tile_rows) {
  const int64_t pairs = static_cast<int64_t>(ids.size());
  const auto off = a.offsets.download(), so = a.slot_of.download(), sr = a.slot_row.download();
  std::vector<int32_t> hist(static_cast<size_t>(E), 0);
  for (int32_t e : ids) ++hist[static_cast<size_t>(e)];
  int32_t running = 0;
  for (int e = 0; e <= E; ++e) {
    ASSERT_EQ(off[static_cast<size_t>(e)], running) << "expert " << e;
    if (e < E) running += hist[static_cast<size_t>(e)];
  }
  std::set<int32_t> seen(so.begin(), so.begin() + pairs);
  ASSERT_EQ(static_cast<int64_t>(seen.size()), pairs);
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t e = ids[static_cast<size_t>(i)], s = so[static_cast<size_t>(i)];
    ASSERT_GE(s, off[static_cast<size_t>(e)]);
    ASSERT_LT(s, off[static_cast<size_t>(e) + 1]);
    ASSERT_EQ(sr[static_cast<size_t>(s)], i / k);
  }
  const int32_t nt = a.tile_count.download()[0];
  const auto tl = a.tiles.download();
  std::vector<int32_t> covered(static_cast<size_t>(pairs), 0);
  for (int32_t i = 0; i < nt; ++i) {
    const cuda::GemmTile tt = tl[static_cast<size_t>(i)];
    ASSERT_LE(tt.end - tt.begin, tile_rows);
    ASSERT_GE(tt.begin, off[static_cast<size_t>(tt.group)]);
    ASSERT_LE(tt.end, off[static_cast<size_t>(tt.group) + 1]);
    for (int32_t s = tt.begin; s < tt.end; ++s) ++covered[static_cast<size_t>(s)];
  }
  for (int32_t c : covered) ASSERT_EQ(c, 1);
  EXPECT_EQ(a.counts.download(), std::vector<int32_t>(static_cast<size_t>(E) + 1, 0));
}

// Routing and grouping in one pass (moe_route_group) against route_token and the grouping's invariants:
// a chunk of 4096 tokens (512 blocks report to the counts' last block), small chunks, one token and
// none; each twice on the same arrays, the second time as programmatic launches, so the counts are
// seen to be left zero. The logits lie at a stride, as the backend's router writes them.
TEST(Moe, RouteMatchesRouteToken) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  for (auto [E, k, n] :
       {std::tuple{256, 8, int64_t{4096}}, std::tuple{8, 2, int64_t{333}}, std::tuple{16, 8, int64_t{333}},
        std::tuple{512, 10, int64_t{333}}, std::tuple{512, 10, int64_t{1}}, std::tuple{256, 8, int64_t{0}}}) {
    SCOPED_TRACE(fmt::format("{} experts, top {}, {} tokens", E, k, n));
    const int64_t ld = E + 3;
    const size_t pairs = static_cast<size_t>(n * k), room = std::max<size_t>(pairs, 1);
    auto logits = randn(static_cast<size_t>(std::max<int64_t>(n, 1) * ld), rng, 2.0f);
    logits[5] = logits[7];  // a tie: the lower id must win
    DeviceArray<float> dl(logits), dw(room);
    DeviceArray<int32_t> di(room);
    GroupingArrays arrays(n, k, E);
    for (bool overlap : {false, true}) {
      SCOPED_TRACE(overlap ? "programmatic launches" : "plain launches");
      cuda::moe_route_group(dl.data(), ld, n, E, k, di.data(), dw.data(), arrays.grouping(144), nullptr,
                            overlap);
      std::vector<int32_t> ids = di.download();
      const std::vector<float> w = dw.download();
      ids.resize(pairs);
      for (int64_t t = 0; t < n; ++t) {
        std::vector<int32_t> rid(static_cast<size_t>(k));
        std::vector<float> rw(static_cast<size_t>(k));
        route_token(logits.data() + t * ld, E, k, rid.data(), rw.data());
        for (int j = 0; j < k; ++j) {
          ASSERT_EQ(ids[static_cast<size_t>(t * k + j)], rid[static_cast<size_t>(j)])
              << "token " << t << " rank " << j;
          ASSERT_NEAR(w[static_cast<size_t>(t * k + j)], rw[static_cast<size_t>(j)], 1e-5f);
        }
      }
      expect_grouping(ids, k, E, arrays, 144);
      if (HasFatalFailure()) return;
    }
  }
  // The decode variant and its gemv index lists.
  const int E = 256, k = 8;
  const auto logits = randn(E, rng);
  DeviceArray<float> dl(logits), dw(k);
  DeviceArray<int32_t> di(k), gu(2 * k + 2), dn(k + 1);
  cuda::moe_route_decode(dl.data(), E, k, di.data(), dw.data(), gu.data(), dn.data(), nullptr);
  std::vector<int32_t> rid(k);
  std::vector<float> rw(k);
  route_token(logits.data(), E, k, rid.data(), rw.data());
  const auto g = gu.download(), d = dn.download();
  EXPECT_EQ(di.download(), rid);
  for (int j = 0; j < k; ++j) {
    EXPECT_EQ(g[static_cast<size_t>(j)], 3 * rid[static_cast<size_t>(j)]);
    EXPECT_EQ(g[static_cast<size_t>(k + j)], 3 * rid[static_cast<size_t>(j)] + 1);
    EXPECT_EQ(d[static_cast<size_t>(j)], 3 * rid[static_cast<size_t>(j)] + 2);
  }
  EXPECT_EQ(g[2 * k], 3 * E);
  EXPECT_EQ(g[2 * k + 1], 3 * E + 1);
  EXPECT_EQ(d[k], 3 * E + 2);
}

// The routed experts' grouped GEMMs as the backend sets them up (table entries gate, up, down per
// expert; tiles from moe_route_group): gate|up of the slot rows of x [*, H] into gate_up [slots, 2I], and
// down of act [slots, I] into down [slots, H].
struct ExpertGemms {
  cuda::GemmArgs gate_up, down;
};
ExpertGemms expert_gemms(const void* table, const cuda::MoeGrouping& g, int64_t max_tiles, int64_t H,
                         int64_t I, const uint16_t* x, float* gate_up, const uint16_t* act, float* down) {
  cuda::GemmArgs a;
  a.table = static_cast<const DeviceMatrix*>(table);
  a.table_stride = 3;
  a.part_rows = I;
  a.format = WeightFormat::kAffine4;
  a.K = H;
  a.N = 2 * I;
  a.x = x;
  a.ldx = H;
  a.x_rows = g.slot_row;
  a.y = gate_up;
  a.ldy = 2 * I;
  a.tiles = g.tiles;
  a.tile_count = g.tile_count;
  a.max_tiles = max_tiles;
  a.tile_rows = g.tile_rows;
  cuda::GemmArgs b = a;
  b.table_base = 2;
  b.part_rows = 0;
  b.K = I;
  b.N = H;
  b.x = act;
  b.ldx = I;
  b.x_rows = nullptr;
  b.y = down;
  b.ldy = H;
  return {a, b};
}

// Grouping (ranks, scan, tiles, slots), the grouped GEMM over an expert table, SwiGLU and the
// combine, against a direct CPU computation; balanced, all-to-the-same-experts and sparse routings.
TEST(Moe, GroupingGroupedGemmAndCombine) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  const int E = 32, k = 4;
  const int64_t H = 256, I = 128, n = 150, pairs = n * k;
  // Experts: gate, up, down per expert, 4-bit.
  std::vector<HostMatrix> host;
  std::vector<cuda::UploadedMatrix> dev;
  std::vector<DeviceMatrix> table;
  for (int e = 0; e < E; ++e)
    for (auto [rows, cols] : {std::pair{I, H}, std::pair{I, H}, std::pair{H, I}}) {
      host.push_back(random_matrix(WeightFormat::kAffine4, rows, cols, 64, rng));
      dev.push_back(cuda::upload_matrix(host.back().w, nullptr));
      table.push_back(dev.back().m);
    }
  cuda::DeviceBuffer table_dev(table.size() * sizeof(DeviceMatrix));
  cuda::check(
      cudaMemcpy(table_dev.data(), table.data(), table.size() * sizeof(DeviceMatrix), cudaMemcpyHostToDevice),
      "");

  for (const char* routing : {"balanced", "all to experts 0..k-1", "three experts only"}) {
    SCOPED_TRACE(routing);
    std::vector<int32_t> ids(static_cast<size_t>(pairs));
    for (int64_t t = 0; t < n; ++t) {
      std::vector<int32_t> pick(E);
      std::iota(pick.begin(), pick.end(), 0);
      if (routing[0] == 'b') std::shuffle(pick.begin(), pick.end(), rng);
      if (routing[0] == 't') pick = {3, 17, 30, static_cast<int32_t>(t % 2 ? 0 : 1)};
      for (int j = 0; j < k; ++j) ids[static_cast<size_t>(t * k + j)] = pick[static_cast<size_t>(j)];
    }
    const auto weights = randn(static_cast<size_t>(pairs), rng);
    const auto x = round_bf16(randn(static_cast<size_t>(n * H), rng));
    DeviceArray<float> d_logits(logits_routing_to(ids, n, k, E)), d_route_w(static_cast<size_t>(pairs));
    DeviceArray<int32_t> d_ids(static_cast<size_t>(pairs));
    GroupingArrays arrays(n, k, E);
    const int64_t max_tiles = cuda::moe_max_tiles(pairs, E);
    for (int tile_rows : {64, 128, 144}) {
      SCOPED_TRACE(fmt::format("tiles of {} rows", tile_rows));
      const cuda::MoeGrouping g = arrays.grouping(tile_rows);
      cuda::moe_route_group(d_logits.data(), E, n, E, k, d_ids.data(), d_route_w.data(), g, nullptr);
      ASSERT_EQ(d_ids.download(), ids);
      expect_grouping(ids, k, E, arrays, tile_rows);
      if (HasFatalFailure()) return;

      for (const GemmVariant& v : kGemmVariants) {
        // The wgmma kernel also runs SwiGLU in its epilogue (GemmArgs::act).
        for (bool fused : {false, true}) {
          if (v.tile_rows != tile_rows || (fused && !v.wgmma)) continue;
          SCOPED_TRACE(fmt::format("{}{}", v.name, fused ? ", SwiGLU in the epilogue" : ""));
          // gate|up grouped GEMM, SwiGLU, down grouped GEMM, combine.
          DeviceArray<uint16_t> dx(to_bf16(x)), act(static_cast<size_t>(pairs * I));
          DeviceArray<float> gu(static_cast<size_t>(pairs * 2 * I)), down(static_cast<size_t>(pairs * H));
          auto [a, b] = expert_gemms(table_dev.data(), g, max_tiles, H, I, dx.data(), gu.data(), act.data(),
                                     down.data());
          if (fused) {
            a.act = act.data();
            a.ld_act = I;
            v.run(a, nullptr);
          } else {
            v.run(a, nullptr);
            cuda::swiglu(gu.data(), gu.data() + I, 2 * I, pairs, I, act.data(), I, true, nullptr);
          }
          // The down projection's rows in f32, or in bf16 (GemmArgs::y16) as the combine then reads them.
          for (const bool bf16_down : {false, true}) {
            SCOPED_TRACE(bf16_down ? "bf16 down rows" : "f32 down rows");
            uint16_t* const down16 = bf16_down ? reinterpret_cast<uint16_t*>(down.data()) : nullptr;
            if (down16) b.y = nullptr, b.y16 = down16;
            v.run(b, nullptr);
            const auto shared = randn(static_cast<size_t>(n * H), rng);
            const auto shared_logit = randn(static_cast<size_t>(n), rng);
            const auto hidden0 = randn(static_cast<size_t>(n * H), rng);
            DeviceArray<float> dshared(shared), dsl(shared_logit), dhidden(hidden0), dweights(weights);
            cuda::MoeCombine combine{
                dhidden.data(), n, H,          k, dweights.data(), arrays.slot_of.data(), down.data(), H,
                dshared.data(), H, dsl.data(), 1};
            combine.down16 = down16;
            cuda::moe_combine(combine, nullptr);

            // CPU: the same chain, with the activation rounded to bf16 as the GPU feeds it to the GEMM.
            std::vector<float> want(hidden0);
            for (int64_t t = 0; t < n; ++t) {
              const std::vector<float> xt(x.begin() + t * H, x.begin() + (t + 1) * H);
              float* wt = want.data() + t * H;
              for (int64_t h = 0; h < H; ++h)
                wt[h] +=
                    sigmoid(shared_logit[static_cast<size_t>(t)]) * shared[static_cast<size_t>(t * H + h)];
              for (int j = 0; j < k; ++j) {
                const int e = ids[static_cast<size_t>(t * k + j)];
                const auto g_ = cpu_matmul(host[static_cast<size_t>(3 * e)].w, xt, 1);
                const auto u_ = cpu_matmul(host[static_cast<size_t>(3 * e + 1)].w, xt, 1);
                std::vector<float> h_(static_cast<size_t>(I));
                for (int64_t i = 0; i < I; ++i)
                  h_[static_cast<size_t>(i)] =
                      round_to_bf16(silu(g_[static_cast<size_t>(i)]) * u_[static_cast<size_t>(i)]);
                const auto d_ = cpu_matmul(host[static_cast<size_t>(3 * e + 2)].w, h_, 1);
                for (int64_t h = 0; h < H; ++h)
                  wt[h] +=
                      weights[static_cast<size_t>(t * k + j)] *
                      (bf16_down ? round_to_bf16(d_[static_cast<size_t>(h)]) : d_[static_cast<size_t>(h)]);
              }
            }
            const auto combined = dhidden.download();
            EXPECT_LT(rel_err(combined, want), 1e-2);

            // With the next layer's input norm: the same rows, and their RMSNorm in bf16.
            const auto norm_w = randn(static_cast<size_t>(H), rng);
            DeviceArray<float> dhidden_n(hidden0), dnorm_w(norm_w);
            DeviceArray<uint16_t> dnormed(static_cast<size_t>(n * H));
            combine.hidden = dhidden_n.data();
            combine.norm_weight = dnorm_w.data();
            combine.eps = 1e-6f;
            combine.normed = dnormed.data();
            cuda::moe_combine(combine, nullptr);
            EXPECT_EQ(dhidden_n.download(), combined);
            std::vector<float> normed_ref(combined.size());
            for (int64_t t = 0; t < n; ++t)
              rms_norm(combined.data() + t * H, norm_w.data(), 1e-6f, H, normed_ref.data() + t * H);
            EXPECT_LT(rel_err(from_bf16(dnormed.download()), normed_ref), 4e-3) << "combine's norm";
          }
        }
      }
    }
  }
}

// Prefill GEMM speed at the real model's shapes for a 4096-row chunk, every kernel (prints; asserts
// nothing): the plain projections, and the routed experts' grouped gate|up and down over 256 experts
// with 8 per row (16 distinct expert matrices behind the 256 table entries keep the setup short; the
// weights are a small part of the traffic either way).
TEST(Gemm, Timing) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  const int64_t n = 4096, H = 2048, I = 512;
  const int E = 256, k = 8, kDistinct = 16;
  const auto x = to_bf16(randn(static_cast<size_t>(n * 8192), rng));
  DeviceArray<uint16_t> dx(x);
  DeviceArray<float> dy(static_cast<size_t>(n * k * H));
  fmt::print("{:<32} {:>10} {:>10}   (us per call, TFLOP/s)\n", "shape", "simple", "wgmma");
  auto report = [&](const std::string& what, double flop, cuda::GemmArgs a) {
    fmt::print("{:<32}", what);
    for (const bool wgmma : {false, true}) {
      // The simple kernel takes tile lists of 64 rows.
      if (!wgmma && a.tiles && a.tile_rows > 64) {
        fmt::print(" {:>10}", "-");
        continue;
      }
      const double us = median_us([&] { wgmma ? cuda::gemm(a, nullptr) : cuda::gemm_simple(a, nullptr); });
      fmt::print(" {:>6.0f} {:>3.0f}", us, flop / us * 1e-6);
    }
    fmt::print("\n");
  };
  for (auto [rows, cols, what] : {std::tuple{int64_t{12352}, H, "DeltaNet qkv|z|b|a 12352x2048"},
                                  std::tuple{int64_t{8192}, H, "DeltaNet qkv 8192x2048"},
                                  std::tuple{int64_t{9216}, H, "attention q|k|v 9216x2048"},
                                  std::tuple{H, int64_t{4096}, "DeltaNet out 2048x4096"},
                                  std::tuple{int64_t{512}, H, "shared gate 512x2048"}}) {
    HostMatrix h = random_matrix(WeightFormat::kAffine4, rows, cols, 64, rng);
    auto up = cuda::upload_matrix(h.w, nullptr);
    cuda::GemmArgs a = cuda::gemm_args(up.m, dx.data(), cols, n, dy.data(), rows);
    report(what, 2.0 * n * rows * cols, a);
    a.tile_rows = 128;  // the wgmma kernel's 256-slot tiles (its default here) against 128
    report("  128-slot tiles", 2.0 * n * rows * cols, a);
    // Its bf16 copy through gemm_tma (the prefill's dense matrices, add_prefill_copies).
    DeviceArray<uint16_t> copy(static_cast<size_t>(rows * cols));
    cuda::decode_bf16(up.m, copy.data(), nullptr);
    const DeviceMatrix m16 = bf16_rows(copy, rows, cols);
    const cuda::GemmArgs a16 = cuda::gemm_args(m16, dx.data(), cols, n, dy.data(), rows);
    const double us = median_us([&] { cuda::gemm_tma(a16, nullptr); });
    fmt::print("{:<32} {:>10} {:>6.0f} {:>3.0f}\n", "  bf16 copy, gemm_tma", "", us,
               2.0 * n * rows * cols / us * 1e-6);
  }
  {  // the router's bf16 rows with the shared gate's (cuda_weights.h: route16), 64-slot tiles by default
    const int64_t rows = E + 1, ld = E + 4;
    HostMatrix h = random_matrix(WeightFormat::kBF16, rows, H, 0, rng);
    auto up = cuda::upload_matrix(h.w, nullptr);
    cuda::GemmArgs a = cuda::gemm_args(up.m, dx.data(), H, n, dy.data(), ld);
    report("router 257x2048 bf16", 2.0 * n * rows * H, a);
    a.tile_rows = 128;
    report("  128-slot tiles", 2.0 * n * rows * H, a);
  }

  std::vector<HostMatrix> host;
  std::vector<cuda::UploadedMatrix> dev;
  for (int e = 0; e < kDistinct; ++e)
    for (auto [rows, cols] : {std::pair{I, H}, std::pair{I, H}, std::pair{H, I}}) {
      host.push_back(random_matrix(WeightFormat::kAffine4, rows, cols, 64, rng));
      dev.push_back(cuda::upload_matrix(host.back().w, nullptr));
    }
  std::vector<DeviceMatrix> table;
  for (int e = 0; e < E; ++e)
    for (int j = 0; j < 3; ++j) table.push_back(dev[static_cast<size_t>(3 * (e % kDistinct) + j)].m);
  cuda::DeviceBuffer table_dev(table.size() * sizeof(DeviceMatrix));
  cuda::check(
      cudaMemcpy(table_dev.data(), table.data(), table.size() * sizeof(DeviceMatrix), cudaMemcpyHostToDevice),
      "");
  const int64_t pairs = n * k;
  std::vector<int32_t> ids(static_cast<size_t>(pairs));
  std::vector<int32_t> pick(E);
  std::iota(pick.begin(), pick.end(), 0);
  for (int64_t t = 0; t < n; ++t) {
    std::shuffle(pick.begin(), pick.end(), rng);
    std::copy(pick.begin(), pick.begin() + k, ids.begin() + t * k);
  }
  DeviceArray<float> d_logits(logits_routing_to(ids, n, k, E)), d_route_w(static_cast<size_t>(pairs));
  DeviceArray<int32_t> d_ids(static_cast<size_t>(pairs));
  GroupingArrays arrays(n, k, E);
  const int64_t max_tiles = cuda::moe_max_tiles(pairs, E);
  DeviceArray<uint16_t> act(to_bf16(randn(static_cast<size_t>(pairs * I), rng)));
  for (int tile_rows : {64, 128, 144}) {
    const cuda::MoeGrouping g = arrays.grouping(tile_rows);
    cuda::moe_route_group(d_logits.data(), E, n, E, k, d_ids.data(), d_route_w.data(), g, nullptr);
    const auto [gate_up, down] =
        expert_gemms(table_dev.data(), g, max_tiles, H, I, dx.data(), dy.data(), act.data(), dy.data());
    report(fmt::format("experts gate|up, {}-row tiles", tile_rows), 2.0 * pairs * 2 * I * H, gate_up);
    cuda::GemmArgs fused = gate_up;  // SwiGLU in the epilogue: the wgmma kernel only
    fused.act = act.data();
    fused.ld_act = I;
    const double us = median_us([&] { cuda::gemm(fused, nullptr); });
    fmt::print("{:<32} {:>10} {:>6.0f} {:>3.0f}\n", fmt::format("  + SwiGLU epilogue, {}-row", tile_rows),
               "-", us, 2.0 * pairs * 2 * I * H / us * 1e-6);
    report(fmt::format("experts down, {}-row tiles", tile_rows), 2.0 * pairs * H * I, down);
  }
}

// The decode MoE's three fused kernels (norm, router + routing, gate|up + SwiGLU, down + weighted
// combine + residual) against the CPU chain, over expert formats, with f32 and (4-bit) int16
// activations; each twice (the second time as programmatic dependent launches) so the router's block
// counter is seen to reset. Each run is made again with gate|up and down in one launch
// (MoeDecodeArgs::sync): the same bits, and its counter and routing words carried from one call to the
// next.
TEST(Moe, DecodeMatchesCpu) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  for (auto [format, E, k, H, I] : {std::tuple{WeightFormat::kAffine4, 64, 8, int64_t{512}, int64_t{128}},
                                    std::tuple{WeightFormat::kAffine4, 16, 8, int64_t{256}, int64_t{64}},
                                    std::tuple{WeightFormat::kAffine8, 16, 4, int64_t{256}, int64_t{64}},
                                    std::tuple{WeightFormat::kBF16, 8, 2, int64_t{128}, int64_t{192}}}) {
    SCOPED_TRACE(fmt::format("{} E={} k={} H={} I={}", weight_format_name(format), E, k, H, I));
    std::vector<HostMatrix> host;
    std::vector<cuda::UploadedMatrix> dev;
    std::vector<DeviceMatrix> experts, route;
    for (int e = 0; e <= E; ++e)  // entry E: the shared expert
      for (auto [rows, cols] : {std::pair{I, H}, std::pair{I, H}, std::pair{H, I}}) {
        host.push_back(random_matrix(format, rows, cols, 32, rng));
        dev.push_back(cuda::upload_matrix(host.back().w, nullptr));
        experts.push_back(dev.back().m);
      }
    HostMatrix router = random_matrix(WeightFormat::kAffine8, E, H, 64, rng);
    HostMatrix shared_gate = random_matrix(WeightFormat::kAffine8, 1, H, 64, rng);
    auto d_router = cuda::upload_matrix(router.w, nullptr),
         d_sg = cuda::upload_matrix(shared_gate.w, nullptr);
    route = {d_router.m, d_sg.m};
    DeviceArray<DeviceMatrix> d_experts(experts), d_route(route);
    DeviceArray<float> logits(static_cast<size_t>(E + 1)), weights(static_cast<size_t>(k)),
        act(static_cast<size_t>((k + 1) * I));
    DeviceArray<int32_t> ids(static_cast<size_t>(k)), counter(std::vector<int32_t>{0});
    DeviceArray<unsigned long long> sync(std::vector<unsigned long long>(cuda::kMoeSyncWords, 0));
    unsigned long long one_pass_calls = 0;
    for (int round = 0; round < 4; ++round) {
      const bool i16 = round >= 2 && format == WeightFormat::kAffine4;  // rounds 2, 3 (4-bit experts only)
      if (round >= 2 && !i16) break;
      SCOPED_TRACE(round);
      const auto x = randn(static_cast<size_t>(H), rng, 2.0f), w = randn(static_cast<size_t>(H), rng);
      DeviceArray<float> dx(x), dw(w);
      cuda::MoeDecodeArgs a;
      a.x = dx.data();
      a.norm_weight = dw.data();
      a.eps = 1e-6f;
      a.H = H;
      a.I = I;
      a.E = E;
      a.k = k;
      a.route_table = d_route.data();
      a.route_format = WeightFormat::kAffine8;
      a.experts = d_experts.data();
      a.expert_format = format;
      a.logits = logits.data();
      a.ids = ids.data();
      a.weights = weights.data();
      a.counter = counter.data();
      a.act = act.data();
      a.overlap = round % 2 == 1;
      a.i16 = i16;
      cuda::moe_decode(a, nullptr);

      std::vector<float> normed(static_cast<size_t>(H));
      rms_norm(x.data(), w.data(), 1e-6f, H, normed.data());
      const auto rl = cpu_matmul(router.w, normed, 1);
      const float sg = cpu_matmul(shared_gate.w, normed, 1)[0];
      std::vector<int32_t> rid(static_cast<size_t>(k));
      std::vector<float> rw(static_cast<size_t>(k));
      route_token(rl.data(), E, k, rid.data(), rw.data());
      std::vector<float> want(x);
      auto add_expert = [&](int e, float coef) {
        const auto g_ = cpu_matmul(host[static_cast<size_t>(3 * e)].w, normed, 1);
        const auto u_ = cpu_matmul(host[static_cast<size_t>(3 * e + 1)].w, normed, 1);
        std::vector<float> h_(static_cast<size_t>(I));
        for (int64_t i = 0; i < I; ++i)
          h_[static_cast<size_t>(i)] = silu(g_[static_cast<size_t>(i)]) * u_[static_cast<size_t>(i)];
        const auto d_ = cpu_matmul(host[static_cast<size_t>(3 * e + 2)].w, h_, 1);
        for (int64_t h = 0; h < H; ++h) want[static_cast<size_t>(h)] += coef * d_[static_cast<size_t>(h)];
      };
      for (int j = 0; j < k; ++j) add_expert(rid[static_cast<size_t>(j)], rw[static_cast<size_t>(j)]);
      add_expert(E, sigmoid(sg));
      ASSERT_EQ(ids.download(), rid);
      EXPECT_EQ(counter.download()[0], 0);
      // The block's contribution (x_out - x) against the CPU's.
      const auto got = dx.download();
      std::vector<float> d_got(x.size()), d_want(x.size());
      for (size_t i = 0; i < x.size(); ++i) d_got[i] = got[i] - x[i], d_want[i] = want[i] - x[i];
      // int16: two quantized products in a row, each value within 1/65534 of its chunk's largest.
      const double bound = i16 ? 1e-3 : 1e-4;
      if (i16) std::printf("moe decode, int16 activations: rel_err %.3g\n", rel_err(d_got, d_want));
      EXPECT_LT(rel_err(d_got, d_want), bound);
      DeviceArray<float> dx_one_pass(x);
      a.x = dx_one_pass.data();
      a.sync = sync.data();
      for (int call = 0; call < 2; ++call) {  // the second from the first's output, so the counters move on
        ids.poison();  // (the one-pass launch's first block writes the routing it took)
        cuda::moe_decode(a, nullptr);
        ++one_pass_calls;
        if (call != 0) continue;
        EXPECT_EQ(ids.download(), rid);
        // The same products in the same order as the two launches; the compiler may still fuse a
        // multiply-add differently in the two kernels (2.5e-5 after 290 decode steps of small/mlx4).
        const auto one = dx_one_pass.download();
        std::vector<float> d_one(x.size());
        for (size_t i = 0; i < x.size(); ++i) d_one[i] = one[i] - x[i];
        // (int16: such a last bit may move a code)
        EXPECT_LT(rel_err(d_one, d_got), i16 ? 1e-4 : 1e-5);
        EXPECT_LT(rel_err(d_one, d_want), bound);
      }
      // Every one-pass block counted itself once a call (the one-pass launch ran), and so did every
      // block of the router's launch that writes logits.
      const auto counts = sync.download();
      EXPECT_GT(counts[0], 0u);
      EXPECT_EQ(counts[0] % one_pass_calls, 0u);
      EXPECT_GT(counts[1], 0u);
      EXPECT_EQ(counts[1] % one_pass_calls, 0u);
    }
  }
}

TEST(Norm, RmsNormGatedNormAndEmbedding) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  for (int64_t H : {64, 128, 2048, 4096}) {
    SCOPED_TRACE(H);
    const int64_t n = 37;
    const auto x = randn(static_cast<size_t>(n * H), rng, 3.0f);
    const auto w = randn(static_cast<size_t>(H), rng);
    std::vector<float> ref(x.size());
    for (int64_t t = 0; t < n; ++t) rms_norm(x.data() + t * H, w.data(), 1e-6f, H, ref.data() + t * H);
    DeviceArray<float> dx(x), dw(w), out(x.size());
    DeviceArray<uint16_t> out16(x.size());
    cuda::rms_norm_rows(dx.data(), n, H, dw.data(), 1e-6f, out.data(), nullptr, nullptr);
    cuda::rms_norm_rows(dx.data(), n, H, dw.data(), 1e-6f, nullptr, out16.data(), nullptr);
    EXPECT_LT(rel_err(out.download(), ref), 1e-6);
    EXPECT_LT(rel_err(from_bf16(out16.download()), ref), 4e-3);
  }
  for (auto [heads, D] : {std::pair{32, 128}, std::pair{4, 32}, std::pair{2, 256}}) {
    const int64_t n = 9, ld = heads * D;
    const auto x = randn(static_cast<size_t>(n * ld), rng), z = randn(static_cast<size_t>(n * ld), rng);
    const auto w = randn(static_cast<size_t>(D), rng);
    std::vector<float> ref(x.size());
    for (int64_t i = 0; i < n * heads; ++i)
      gated_rms_norm(x.data() + i * D, z.data() + i * D, w.data(), 1e-6f, D, ref.data() + i * D);
    DeviceArray<float> dx(x), dz(z), dw(w), out(x.size());
    cuda::gated_rms_norm_rows(
        {dx.data(), ld, dz.data(), ld, n, heads, D, dw.data(), 1e-6f, out.data(), nullptr, ld}, nullptr);
    EXPECT_LT(rel_err(out.download(), ref), 1e-5);
    // z in bf16 (as the prefill DeltaNet projection writes it): the same against z rounded.
    const auto z16 = round_bf16(z);
    for (int64_t i = 0; i < n * heads; ++i)
      gated_rms_norm(x.data() + i * D, z16.data() + i * D, w.data(), 1e-6f, D, ref.data() + i * D);
    DeviceArray<uint16_t> dz16(to_bf16(z16));
    cuda::GatedNormArgs a{dx.data(), ld, nullptr, ld, n, heads, D, dw.data(), 1e-6f, out.data(), nullptr, ld};
    a.z_bf16 = dz16.data();
    cuda::gated_rms_norm_rows(a, nullptr);
    EXPECT_LT(rel_err(out.download(), ref), 1e-5) << "bf16 z";
  }
  for (WeightFormat f : {WeightFormat::kAffine4, WeightFormat::kAffine8, WeightFormat::kBF16}) {
    HostMatrix h = random_matrix(f, 1000, 256, 64, rng);
    auto up = cuda::upload_matrix(h.w, nullptr);
    const std::vector<int32_t> tokens = {0, 999, 5, 5, 512};
    DeviceArray<int32_t> dt(tokens);
    DeviceArray<float> out(tokens.size() * 256);
    cuda::embed_rows(up.m, dt.data(), static_cast<int64_t>(tokens.size()), out.data(), nullptr);
    std::vector<float> ref(out.size());
    for (size_t i = 0; i < tokens.size(); ++i) dequantize_row(h.w, tokens[i], ref.data() + i * 256);
    EXPECT_EQ(out.download(), ref) << weight_format_name(f);
  }
}

// Conv, prepare and scan over several chunks (including 1-row decode steps) against the CPU
// functions run over the same chunks, with the states carried on both sides; with the conv that
// walks the rows and with the row-parallel one (prefill), and in the row-parallel pass the 1-row
// steps go through the decode's fused deltanet_decode_step. The 1-row steps write their states into
// a second pair of buffers, as decode does, and leave the first as it was. A third pass gives the
// row-parallel conv (its staged loads, and for one shape its own) and the gates bf16 inputs (the prefill
// projection's output), the CPU the same values rounded.
TEST(DeltaNet, ChunkedPipelineMatchesCpu) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  struct Shape {
    int Hk, Hv, Dk, Dv;
  };
  // fused: q and k normalised in the conv, and a decode step as one launch; otherwise the norms in the
  // prepare kernel and a decode step as conv, prepare and scan (the reference decode chain).
  for (auto [fused, bf16_in] : {std::pair{false, false}, std::pair{true, false}, std::pair{true, true}})
    for (const Shape s : {Shape{16, 32, 128, 128}, Shape{2, 4, 32, 32}, Shape{4, 8, 64, 64}}) {
      SCOPED_TRACE(fmt::format("Hk {} Hv {} Dk {} Dv {}, {}{}", s.Hk, s.Hv, s.Dk, s.Dv,
                               fused ? "fused" : "reference chain", bf16_in ? ", bf16 inputs" : ""));
      const int K = 4;
      const int64_t key_dim = int64_t{s.Hk} * s.Dk, C = 2 * key_dim + int64_t{s.Hv} * s.Dv,
                    Vt = int64_t{s.Hv} * s.Dv;
      const auto conv_w = randn(static_cast<size_t>(C * K), rng, 0.5f);
      std::vector<float> a_neg(static_cast<size_t>(s.Hv)), dt_bias = randn(static_cast<size_t>(s.Hv), rng);
      std::uniform_real_distribution<float> ua(1.0f, 16.0f);
      for (float& v : a_neg) v = -ua(rng);
      std::vector<float> conv_state(static_cast<size_t>((K - 1) * C), 0.0f),
          rec(static_cast<size_t>(Vt * s.Dk), 0.0f);
      DeviceArray<float> d_conv_w(conv_w), d_a_neg(a_neg), d_dt(dt_bias), d_conv_state(conv_state),
          d_rec(rec);
      DeviceArray<float> d_conv_next(conv_state.size()), d_rec_next(rec.size());
      int decode_steps = 0;  // the second of the three carries the z rows with int16 activations
      for (int64_t n : {5, 1, 1, 130, 1, 64}) {
        SCOPED_TRACE(fmt::format("chunk of {}", n));
        const auto round_if = [&](std::vector<float> v) { return bf16_in ? round_bf16(v) : v; };
        const auto qkv = round_if(randn(static_cast<size_t>(n * C), rng));
        const auto b = round_if(randn(static_cast<size_t>(n * s.Hv), rng)),
                   a = round_if(randn(static_cast<size_t>(n * s.Hv), rng));
        // CPU.
        std::vector<float> conv(qkv.size()), beta(b.size()), decay(b.size()), o(static_cast<size_t>(n * Vt));
        causal_conv_silu(qkv.data(), n, C, conv_w.data(), K, conv_state.data(), conv.data(), 0, C);
        for (int64_t t = 0; t < n; ++t) {
          float* row = conv.data() + t * C;
          for (int h = 0; h < s.Hk; ++h) {
            l2_norm(row + h * s.Dk, s.Dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(s.Dk)));
            l2_norm(row + key_dim + h * s.Dk, s.Dk, 1e-6f, 1.0f);
          }
          deltanet_gates(b.data() + t * s.Hv, a.data() + t * s.Hv, a_neg.data(), dt_bias.data(), s.Hv,
                         beta.data() + t * s.Hv, decay.data() + t * s.Hv);
        }
        for (int h = 0; h < s.Hv; ++h) {
          const int64_t kh = h / (s.Hv / s.Hk);
          DeltaNetHeadScan scan{conv.data() + kh * s.Dk,
                                conv.data() + key_dim + kh * s.Dk,
                                C,
                                conv.data() + 2 * key_dim + int64_t{h} * s.Dv,
                                C,
                                decay.data() + h,
                                beta.data() + h,
                                s.Hv,
                                o.data() + int64_t{h} * s.Dv,
                                Vt};
          deltanet_scan_head(scan, n, s.Dk, s.Dv, rec.data() + int64_t{h} * s.Dv * s.Dk, kVectorOpsReference);
        }
        // GPU.
        DeviceArray<float> d_qkv(qkv), d_b(b), d_a(a), d_conv(qkv.size()), d_beta(b.size()),
            d_decay(b.size()), d_o(o.size());
        // bf16 rows 4 values longer for one shape: not 16-byte pieces, so the conv's own loads, not the
        // staged ones, read them.
        const int64_t ld16 = s.Dk == 32 ? C + 4 : C;
        std::vector<float> padded(static_cast<size_t>(n * ld16), 0.0f);
        for (int64_t t = 0; t < n; ++t) std::copy_n(qkv.begin() + t * C, C, padded.begin() + t * ld16);
        DeviceArray<uint16_t> d_qkv16(to_bf16(padded)), d_b16(to_bf16(b)), d_a16(to_bf16(a));
        cuda::DeltaNetConvArgs conv_args{bf16_in ? nullptr : d_qkv.data(),
                                         bf16_in ? ld16 : C,
                                         n,
                                         C,
                                         d_conv_w.data(),
                                         K,
                                         d_conv_state.data(),
                                         d_conv.data(),
                                         C};
        if (bf16_in) conv_args.in_bf16 = d_qkv16.data();
        const bool ping_pong = n == 1;
        const std::vector<float> conv_before = ping_pong ? d_conv_state.download() : std::vector<float>{},
                                 rec_before = ping_pong ? d_rec.download() : std::vector<float>{};
        if (ping_pong) conv_args.state_out = d_conv_next.data();
        float* const rec_out = ping_pong ? d_rec_next.data() : d_rec.data();
        if (fused && n > 1) {  // the conv also does the norms
          conv_args.norm_heads = s.Hk;
          conv_args.norm_dim = s.Dk;
        }
        if (n == 1 && fused && !bf16_in) {  // a decode step: conv, prepare and scan fused
          cuda::DeltaNetDecodeStepArgs step{conv_args,   s.Hk,         s.Dk,       s.Hv,
                                            s.Dv,        d_b.data(),   d_a.data(), d_a_neg.data(),
                                            d_dt.data(), d_rec.data(), rec_out,    d_o.data()};
          // At the model's shapes the launch also carries a z projection (4-bit, 2048 inputs, RMSNorm).
          const int64_t H = 2048;
          const HostMatrix zw = random_matrix(WeightFormat::kAffine4, Vt, H, 64, rng);
          const auto zu = cuda::upload_matrix(zw.w, nullptr);
          const auto x = randn(static_cast<size_t>(H), rng, 3.0f), nw = randn(static_cast<size_t>(H), rng);
          DeviceArray<float> d_x(x), d_nw(nw), d_z(static_cast<size_t>(Vt));
          const bool carry = cuda::deltanet_decode_step_carries_z(s.Dk, K, zu.m);
          if (carry) {
            step.z = zu.m;
            step.z_x = d_x.data();
            step.z_norm = d_nw.data();
            step.z_eps = 1e-6f;
            step.z_out = d_z.data();
            step.z_i16 = decode_steps++ == 1;
          }
          cuda::deltanet_decode_step(step, nullptr);
          EXPECT_EQ(carry, s.Dk == 128);
          if (carry) {
            std::vector<float> normed(static_cast<size_t>(H));
            rms_norm(x.data(), nw.data(), 1e-6f, H, normed.data());
            // int16: each staged value within about 1/65534 of its chunk's largest, which the RMSNorm
            // weight's random sizes make several times the chunk's typical value (~4e-5 by estimate).
            EXPECT_LT(rel_err(d_z.download(), cpu_matmul(zw.w, normed, 1)), step.z_i16 ? 2e-4 : 2e-5) << "z";
          }
        } else {
          cuda::deltanet_conv(conv_args, nullptr);
          cuda::DeltaNetPrepareArgs gates{d_conv.data(),
                                          C,
                                          n,
                                          s.Hk,
                                          s.Dk,
                                          s.Hv,
                                          d_b.data(),
                                          d_a.data(),
                                          s.Hv,
                                          d_a_neg.data(),
                                          d_dt.data(),
                                          d_beta.data(),
                                          d_decay.data(),
                                          conv_args.norm_heads > 0};
          if (bf16_in) gates.b = gates.a = nullptr, gates.b_bf16 = d_b16.data(), gates.a_bf16 = d_a16.data();
          cuda::deltanet_prepare(gates, nullptr);
          cuda::DeltaNetScanArgs scan{d_conv.data(), C,    d_beta.data(), d_decay.data(), n,          s.Hk,
                                      s.Hv,          s.Dk, s.Dv,          d_rec.data(),   d_o.data(), Vt};
          scan.state_out = rec_out;
          cuda::deltanet_scan(scan, nullptr);
          EXPECT_LT(rel_err(d_conv.download(), conv), 1e-5);
          EXPECT_LT(rel_err(d_beta.download(), beta), 1e-6);
          EXPECT_LT(rel_err(d_decay.download(), decay), 1e-5);
        }
        EXPECT_LT(rel_err(d_o.download(), o), 1e-4);
        if (ping_pong) {
          EXPECT_EQ(d_conv_state.download(), conv_before) << "a step wrote the window it read";
          EXPECT_EQ(d_rec.download(), rec_before) << "a step wrote the state it read";
          std::swap(d_conv_state, d_conv_next);
          std::swap(d_rec, d_rec_next);
        }
        EXPECT_LT(rel_err(d_conv_state.download(), conv_state), 1e-6);
        EXPECT_LT(rel_err(d_rec.download(), rec), 1e-4);
      }
    }
}

// The conv's own q and k norms (norm_heads) against the conv followed by deltanet_prepare's norms:
// one row (a run of one), a partial run and runs across blocks, head sizes 32-128, and a layout whose
// first block holds q, k and v channels (one key head of 32).
TEST(DeltaNet, ConvNormsMatchPrepare) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  struct Shape {
    int Hk, Hv, Dk, Dv;
  };
  for (const Shape s : {Shape{16, 32, 128, 128}, Shape{1, 2, 32, 32}, Shape{4, 8, 64, 64}}) {
    const int K = 4;
    const int64_t C = 2 * int64_t{s.Hk} * s.Dk + int64_t{s.Hv} * s.Dv;
    const auto conv_w = randn(static_cast<size_t>(C * K), rng, 0.5f);
    const auto window = randn(static_cast<size_t>((K - 1) * C), rng);
    std::vector<float> a_neg(static_cast<size_t>(s.Hv), -1.0f), dt_bias(static_cast<size_t>(s.Hv), 0.0f);
    for (int64_t n : {1, 5, 37}) {
      SCOPED_TRACE(fmt::format("Hk {} Dk {}, {} rows", s.Hk, s.Dk, n));
      const auto qkv = randn(static_cast<size_t>(n * C), rng), ba = randn(static_cast<size_t>(n * s.Hv), rng);
      DeviceArray<float> d_qkv(qkv), d_w(conv_w), d_ba(ba), d_a_neg(a_neg), d_dt(dt_bias);
      std::vector<float> out[2], state[2];
      for (int fused = 0; fused < 2; ++fused) {
        DeviceArray<float> d_state(window), d_out(qkv.size()), d_beta(ba.size()), d_decay(ba.size());
        cuda::DeltaNetConvArgs conv{d_qkv.data(), C, n, C, d_w.data(), K, d_state.data(), d_out.data(), C};
        if (fused) conv.norm_heads = s.Hk, conv.norm_dim = s.Dk;
        cuda::deltanet_conv(conv, nullptr);
        cuda::deltanet_prepare({d_out.data(), C, n, s.Hk, s.Dk, s.Hv, d_ba.data(), d_ba.data(), s.Hv,
                                d_a_neg.data(), d_dt.data(), d_beta.data(), d_decay.data(), fused == 1},
                               nullptr);
        out[fused] = d_out.download();
        state[fused] = d_state.download();
      }
      EXPECT_LT(rel_err(out[1], out[0]), 1e-6);
      EXPECT_EQ(state[1], state[0]);
    }
  }
}

// Random scan inputs for n rows of one DeltaNet layer as deltanet_prepare leaves them: q, k
// L2-normalised per key head (q scaled), v random, beta and decay from random gates with decay rates
// spread from strong (state forgotten within a few rows) to weak (carried over hundreds).
struct ScanInputs {
  std::vector<float> qkv, beta, decay;
};
ScanInputs random_scan_inputs(int64_t n, int Hk, int Hv, int Dk, int Dv, std::mt19937_64& rng) {
  const int64_t key_dim = int64_t{Hk} * Dk, C = 2 * key_dim + int64_t{Hv} * Dv;
  ScanInputs in{randn(static_cast<size_t>(n * C), rng), std::vector<float>(static_cast<size_t>(n * Hv)),
                std::vector<float>(static_cast<size_t>(n * Hv))};
  std::vector<float> a_neg(static_cast<size_t>(Hv)), dt_bias = randn(static_cast<size_t>(Hv), rng);
  std::uniform_real_distribution<float> log_rate(-5.0f, 2.8f);
  for (float& v : a_neg) v = -std::exp(log_rate(rng));
  const auto b = randn(in.beta.size(), rng), a = randn(in.beta.size(), rng);
  for (int64_t t = 0; t < n; ++t) {
    float* row = in.qkv.data() + t * C;
    for (int h = 0; h < Hk; ++h) {
      l2_norm(row + h * Dk, Dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(Dk)));
      l2_norm(row + key_dim + h * Dk, Dk, 1e-6f, 1.0f);
    }
    deltanet_gates(b.data() + t * Hv, a.data() + t * Hv, a_neg.data(), dt_bias.data(), Hv,
                   in.beta.data() + t * Hv, in.decay.data() + t * Hv);
  }
  return in;
}

// The chunked (WY) scan against deltanet_scan_head over several calls with the state carried,
// starting from a random nonzero state: lengths under, at and across the 64-row chunk; with the
// split (3×tf32) products and with plain tf32.
TEST(DeltaNet, ChunkedScanMatchesCpu) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  struct Shape {
    int Hk, Hv, Dk, Dv;
  };
  for (const Shape s :
       {Shape{16, 32, 128, 128}, Shape{4, 8, 64, 64}, Shape{2, 4, 128, 64}, Shape{2, 6, 64, 96}}) {
    SCOPED_TRACE(fmt::format("Hk {} Hv {} Dk {} Dv {}", s.Hk, s.Hv, s.Dk, s.Dv));
    const int64_t key_dim = int64_t{s.Hk} * s.Dk, C = 2 * key_dim + int64_t{s.Hv} * s.Dv,
                  Vt = int64_t{s.Hv} * s.Dv;
    std::vector<float> rec = randn(static_cast<size_t>(Vt * s.Dk), rng);
    DeviceArray<float> d_rec_split(rec), d_rec_plain(rec);
    for (int64_t n : {5, 64, 130, 1, 300, 63}) {
      SCOPED_TRACE(fmt::format("chunk of {}", n));
      const ScanInputs in = random_scan_inputs(n, s.Hk, s.Hv, s.Dk, s.Dv, rng);
      std::vector<float> o(static_cast<size_t>(n * Vt));
      for (int h = 0; h < s.Hv; ++h) {
        const int64_t kh = h / (s.Hv / s.Hk);
        const DeltaNetHeadScan scan{in.qkv.data() + kh * s.Dk,
                                    in.qkv.data() + key_dim + kh * s.Dk,
                                    C,
                                    in.qkv.data() + 2 * key_dim + int64_t{h} * s.Dv,
                                    C,
                                    in.decay.data() + h,
                                    in.beta.data() + h,
                                    s.Hv,
                                    o.data() + int64_t{h} * s.Dv,
                                    Vt};
        deltanet_scan_head(scan, n, s.Dk, s.Dv, rec.data() + int64_t{h} * s.Dv * s.Dk, kVectorOpsReference);
      }
      DeviceArray<float> d_qkv(in.qkv), d_beta(in.beta), d_decay(in.decay), d_o(o.size()),
          d_work(static_cast<size_t>(cuda::deltanet_chunked_workspace_floats(n, s.Hv)));
      for (bool split : {true, false}) {
        d_o.poison();
        const DeviceArray<float>& d_rec = split ? d_rec_split : d_rec_plain;
        const cuda::DeltaNetScanArgs args{d_qkv.data(), C,    d_beta.data(), d_decay.data(), n,          s.Hk,
                                          s.Hv,         s.Dk, s.Dv,          d_rec.data(),   d_o.data(), Vt};
        ASSERT_TRUE(cuda::deltanet_chunked_supported(args));
        cuda::deltanet_chunked_scan(args, d_work.data(), nullptr, split);
        const double err_o = rel_err(d_o.download(), o), err_s = rel_err(d_rec.download(), rec);
        fmt::print("chunked scan {:5} Hk {:2} Hv {:2} Dk {:3} Dv {:3} n {:3}: out {:.2e} state {:.2e}\n",
                   split ? "3xtf32" : "tf32", s.Hk, s.Hv, s.Dk, s.Dv, n, err_o, err_s);
        // Split keeps the state near f32; the output's P·V' is plain tf32 either way.
        const double bound_o = split ? 2e-3 : 5e-3, bound_s = split ? 1e-4 : 5e-3;
        EXPECT_LT(err_o, bound_o) << (split ? "3xtf32" : "tf32");
        EXPECT_LT(err_s, bound_s) << (split ? "3xtf32" : "tf32");
      }
    }
  }
}

// Not a check: the token scan against the chunked form at the real model's shape, device time per
// call (median of 7) for the prompt-chunk lengths the backend sees; chooses kChunkedScanMinRows.
TEST(DeltaNet, ChunkedScanTiming) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  const int Hk = 16, Hv = 32, Dk = 128, Dv = 128;
  const int64_t key_dim = int64_t{Hk} * Dk, C = 2 * key_dim + int64_t{Hv} * Dv, Vt = int64_t{Hv} * Dv;
  fmt::print("{:>6} {:>12} {:>14} {:>12}   (us per call, one layer)\n", "rows", "token scan",
             "chunked 3xtf32", "chunked tf32");
  for (int64_t n : {16, 32, 64, 128, 256, 512, 1024, 4096}) {
    const ScanInputs in = random_scan_inputs(n, Hk, Hv, Dk, Dv, rng);
    DeviceArray<float> d_qkv(in.qkv), d_beta(in.beta), d_decay(in.decay), d_o(static_cast<size_t>(n * Vt)),
        d_rec(randn(static_cast<size_t>(Vt * Dk), rng, 0.1f)),
        d_work(static_cast<size_t>(cuda::deltanet_chunked_workspace_floats(n, Hv)));
    const cuda::DeltaNetScanArgs args{d_qkv.data(), C,  d_beta.data(), d_decay.data(), n, Hk, Hv,
                                      Dk,           Dv, d_rec.data(),  d_o.data(),     Vt};
    double us[3];
    for (int variant = 0; variant < 3; ++variant)
      us[variant] = median_us([&] {
        if (variant == 0)
          cuda::deltanet_scan(args, nullptr);
        else
          cuda::deltanet_chunked_scan(args, d_work.data(), nullptr, variant == 1);
      });
    fmt::print("{:>6} {:>12.1f} {:>14.1f} {:>12.1f}\n", n, us[0], us[1], us[2]);
  }
}

struct AttnShape {
  int nq, nkv, hd;
};

// Random bf16 K/V cache [nkv, capacity, hd] for positions < filled.
struct HostCache {
  std::vector<uint16_t> k, v;
  KvHeadView head(int j, int64_t capacity, int hd) const {
    const size_t off = static_cast<size_t>(j) * static_cast<size_t>(capacity) * static_cast<size_t>(hd);
    return {KvDtype::kBF16, k.data() + off, v.data() + off};
  }
};
HostCache random_cache(const AttnShape& s, int64_t capacity, std::mt19937_64& rng) {
  const size_t n = static_cast<size_t>(s.nkv) * static_cast<size_t>(capacity) * static_cast<size_t>(s.hd);
  return {to_bf16(randn(n, rng)), to_bf16(randn(n, rng))};
}

// A random q8 K/V cache [nkv, capacity, hd] (and its scales [nkv, capacity]).
struct HostQ8Cache {
  test::Q8Rows k, v;
  KvHeadView head(int j, int64_t capacity, int hd) const {
    const size_t row = static_cast<size_t>(j) * static_cast<size_t>(capacity);
    return {KvDtype::kQ8, k.codes.data() + row * static_cast<size_t>(hd),
            v.codes.data() + row * static_cast<size_t>(hd), k.scales.data() + row, v.scales.data() + row};
  }
};
HostQ8Cache random_q8_cache(const AttnShape& s, int64_t capacity, std::mt19937_64& rng) {
  const size_t n = static_cast<size_t>(s.nkv) * static_cast<size_t>(capacity) * static_cast<size_t>(s.hd);
  return {test::q8_rows(randn(n, rng), s.hd), test::q8_rows(randn(n, rng), s.hd)};
}

TEST(Attention, PrepNormRopeAndCacheAppend) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  for (const AttnShape s : {AttnShape{16, 2, 256}, AttnShape{4, 2, 32}}) {
    SCOPED_TRACE(fmt::format("{} q heads, {} kv heads, head_dim {}", s.nq, s.nkv, s.hd));
    const int rd = s.hd / 4;
    const int64_t n = 21, pos0 = 100000, cap = pos0 + n, q_stride = 2 * s.hd, q_rows = s.nq * q_stride,
                  kvr = s.nkv * s.hd;
    const auto qg = randn(static_cast<size_t>(n * q_rows), rng), k = randn(static_cast<size_t>(n * kvr), rng),
               v = randn(static_cast<size_t>(n * kvr), rng);
    const auto qn = randn(static_cast<size_t>(s.hd), rng), kn = randn(static_cast<size_t>(s.hd), rng);
    RopeTable rope(1e7, rd);
    std::vector<float> inv(static_cast<size_t>(rd / 2));
    for (int i = 0; i < rd / 2; ++i)
      inv[static_cast<size_t>(i)] = 1.0f / std::pow(1e7f, static_cast<float>(2 * i) / static_cast<float>(rd));
    DeviceArray<float> dqg(qg), dk(k), dv(v), dqn(qn), dkn(kn), dinv(inv),
        dq(static_cast<size_t>(n * s.nq * s.hd));
    DeviceArray<uint16_t> kc(static_cast<size_t>(s.nkv * cap * s.hd)), vc(kc.size());
    cuda::AttentionPrepArgs args{dqg.data(), q_rows,     q_stride,   dk.data(), dv.data(),   kvr,
                                 n,          pos0,       nullptr,    s.nq,      s.nkv,       s.hd,
                                 rd,         dqn.data(), dkn.data(), 1e-6f,     dinv.data(), dq.data(),
                                 nullptr,    kc.data(),  vc.data(),  cap};
    cuda::attention_prep(args, nullptr);
    // The same into a q8 cache.
    DeviceArray<uint8_t> kq(kc.size()), vq(kc.size());
    DeviceArray<float> ks(static_cast<size_t>(s.nkv * cap)), vs(ks.size());
    args.k_cache = kq.data(), args.v_cache = vq.data(), args.k_scale = ks.data(), args.v_scale = vs.data();
    cuda::attention_prep(args, nullptr);
    const auto q_out = dq.download();
    const auto k_out = from_bf16(kc.download()), v_out = from_bf16(vc.download());
    const auto kq_out = kq.download(), vq_out = vq.download();
    const auto ks_out = ks.download(), vs_out = vs.download();
    std::vector<float> q_ref(q_out.size()), q_got(q_out.size()), k_ref, k_got, v_ref, v_got;
    std::vector<float> cs(static_cast<size_t>(rd / 2)), sn(cs.size());
    for (int64_t t = 0; t < n; ++t) {
      rope.angles(pos0 + t, cs.data(), sn.data());
      for (int h = 0; h < s.nq; ++h) {
        float* r = q_ref.data() + (t * s.nq + h) * s.hd;
        rms_norm(qg.data() + t * q_rows + h * q_stride, qn.data(), 1e-6f, s.hd, r);
        apply_rope(r, rd, cs.data(), sn.data());
      }
      for (int j = 0; j < s.nkv; ++j) {
        std::vector<float> r(static_cast<size_t>(s.hd));
        rms_norm(k.data() + t * kvr + j * s.hd, kn.data(), 1e-6f, s.hd, r.data());
        apply_rope(r.data(), rd, cs.data(), sn.data());
        // q8: v's row coded exactly as the CPU codes it (the same f32 values); k's within half a step
        // of the reference (its values differ in the last f32 bits, so a code may round the other way).
        const size_t row = static_cast<size_t>(j * cap + pos0 + t);
        const test::Q8Rows kr = test::q8_rows(r, s.hd),
                           vr = test::q8_rows(std::vector<float>(v.begin() + t * kvr + j * s.hd,
                                                                 v.begin() + t * kvr + (j + 1) * s.hd),
                                              s.hd);
        EXPECT_EQ(vs_out[row], vr.scales[0]);
        EXPECT_NEAR(ks_out[row], kr.scales[0], 1e-5 * kr.scales[0]);
        for (int d = 0; d < s.hd; ++d) {
          const size_t at = row * static_cast<size_t>(s.hd) + static_cast<size_t>(d);
          EXPECT_EQ(vq_out[at], vr.codes[static_cast<size_t>(d)]);
          EXPECT_NEAR(kv_q8_value(kq_out[at], ks_out[row]), r[static_cast<size_t>(d)], 0.51 * kr.scales[0]);
        }
        for (int d = 0; d < s.hd; ++d) {
          const size_t at = static_cast<size_t>((j * cap + pos0 + t) * s.hd + d);
          k_ref.push_back(round_to_bf16(r[static_cast<size_t>(d)]));
          k_got.push_back(k_out[at]);
          v_ref.push_back(round_to_bf16(v[static_cast<size_t>(t * kvr + j * s.hd + d)]));
          v_got.push_back(v_out[at]);
        }
      }
    }
    EXPECT_LT(rel_err(q_out, q_ref), 2e-6);
    EXPECT_LT(rel_err(k_got, k_ref), 5e-3);  // bf16 rounding of values that differ in the last f32 bits
    EXPECT_EQ(v_got, v_ref);
  }
}

TEST(Attention, DecodeMatchesAttend) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  for (const AttnShape s : {AttnShape{16, 2, 256}, AttnShape{4, 2, 32}, AttnShape{8, 2, 128}}) {
    for (int64_t len : {1, 7, 64, 300, 5000}) {
      const int64_t cap = len + 3;
      HostCache cache = random_cache(s, cap, rng);
      HostQ8Cache q8 = random_q8_cache(s, cap, rng);
      // Rows past the context are never read into the result: NaN there must not leak in.
      for (int j = 0; j < s.nkv; ++j)
        for (int64_t p = len; p < cap; ++p) {
          q8.k.scales[static_cast<size_t>(j * cap + p)] = q8.v.scales[static_cast<size_t>(j * cap + p)] = NAN;
          for (int d = 0; d < s.hd; ++d) {
            const size_t at = static_cast<size_t>((j * cap + p) * s.hd + d);
            cache.k[at] = cache.v[at] = 0x7fc0;
          }
        }
      for (const bool kv_q8 : {false, true}) {
        const auto q = randn(static_cast<size_t>(s.nq * s.hd), rng, 2.0f);
        const int64_t q_stride = 2 * s.hd;
        const auto gate = randn(static_cast<size_t>(s.nq * q_stride), rng);
        const float scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
        std::vector<float> ref(static_cast<size_t>(s.nq * s.hd)), scores(static_cast<size_t>(len));
        for (int h = 0; h < s.nq; ++h) {
          float* o = ref.data() + h * s.hd;
          const int j = h / (s.nq / s.nkv);
          attend(q.data() + h * s.hd, kv_q8 ? q8.head(j, cap, s.hd) : cache.head(j, cap, s.hd), len, s.hd,
                 scale, scores.data(), o, kVectorOpsReference);
          for (int d = 0; d < s.hd; ++d) o[d] *= sigmoid(gate[static_cast<size_t>(h * q_stride + s.hd + d)]);
        }
        DeviceArray<uint16_t> kc(cache.k), vc(cache.v);
        DeviceArray<uint8_t> kq(q8.k.codes), vq(q8.v.codes);
        DeviceArray<float> ks(q8.k.scales), vs(q8.v.scales);
        for (const int splits : {1, 7, 66}) {
          SCOPED_TRACE(fmt::format("{}/{} heads x {}, context {}, {} splits, {} cache", s.nq, s.nkv, s.hd,
                                   len, splits, kv_q8 ? "q8" : "bf16"));
          DeviceArray<float> dq(q), dgate(gate), partial(static_cast<size_t>(s.nq * splits * (s.hd + 2))),
              out(ref.size());
          DeviceArray<int32_t> pos(std::vector<int32_t>{static_cast<int32_t>(len - 1)});
          cuda::AttentionDecodeArgs args{
              dq.data(), kc.data(),      vc.data(),           cap,      pos.data(), s.nq, s.nkv, s.hd, scale,
              splits,    partial.data(), dgate.data() + s.hd, q_stride, out.data()};
          if (kv_q8)
            args.k_cache = kq.data(), args.v_cache = vq.data(), args.k_scale = ks.data(),
            args.v_scale = vs.data();
          cuda::attention_decode(args, nullptr);
          // q and p as two bf16 (q8: f16) parts each, about 16 bits.
          EXPECT_LT(rel_err(out.download(), ref), 2e-5);
        }
      }
    }
  }
}

// The bf16 copy prefill reads of a q8 cache: each value kv_q8_value rounded to bf16, rows past `rows`
// untouched.
TEST(Attention, Q8CacheToBf16) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  const int nkv = 2, hd = 256;
  const int64_t cap = 300, rows = 257;
  const test::Q8Rows q = test::q8_rows(randn(static_cast<size_t>(nkv * cap * hd), rng, 3.0f), hd);
  DeviceArray<uint8_t> codes(q.codes);
  DeviceArray<float> scales(q.scales);
  DeviceArray<uint16_t> out(q.codes.size());
  cuda::kv_q8_to_bf16(codes.data(), scales.data(), rows, nkv, hd, cap, out.data(), nullptr);
  const auto got = out.download();
  for (int j = 0; j < nkv; ++j)
    for (int64_t p = 0; p < cap; ++p)
      for (int d = 0; d < hd; ++d) {
        const size_t at = static_cast<size_t>((j * cap + p) * hd + d);
        if (p < rows)
          ASSERT_EQ(got[at],
                    to_bf16({kv_q8_value(q.codes[at], q.scales[static_cast<size_t>(j * cap + p)])})[0]);
        else
          ASSERT_EQ(got[at], 0xffff);  // DeviceArray's poison
      }
}

// The combine computing the output gate's rows itself (AttentionDecodeArgs::gate_proj) from a plain
// and an RMSNorm input, for the three weight formats and inputs narrow enough that a row takes less
// than a warp: against the CPU norm and matmul, then `attend`.
TEST(Attention, DecodeGateRowsMatchCpu) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  struct GateCase {
    AttnShape s;
    MatrixCase m;  // rows: n_heads · head_dim
  };
  for (const GateCase& g : {GateCase{{16, 2, 256}, {WeightFormat::kAffine4, 4096, 2048}},
                            GateCase{{4, 2, 32}, {WeightFormat::kAffine8, 128, 64}},
                            GateCase{{8, 2, 128}, {WeightFormat::kBF16, 1024, 320}},
                            GateCase{{4, 1, 64}, {WeightFormat::kAffine4, 256, 128, 32}}}) {
    const AttnShape s = g.s;
    const int64_t len = 300, cap = len + 3, splits = 7;
    const HostCache cache = random_cache(s, cap, rng);
    const auto q = randn(static_cast<size_t>(s.nq * s.hd), rng, 2.0f);
    HostMatrix h = random_matrix(g.m.format, g.m.rows, g.m.cols, g.m.group, rng);
    auto up = cuda::upload_matrix(h.w, nullptr);
    const auto x = randn(static_cast<size_t>(g.m.cols), rng, 3.0f),
               w = randn(static_cast<size_t>(g.m.cols), rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
    std::vector<float> attended(static_cast<size_t>(s.nq * s.hd)), scores(static_cast<size_t>(len));
    for (int hq = 0; hq < s.nq; ++hq)
      attend(q.data() + hq * s.hd, cache.head(hq / (s.nq / s.nkv), cap, s.hd), len, s.hd, scale,
             scores.data(), attended.data() + hq * s.hd, kVectorOpsReference);
    DeviceArray<float> dq(q), dx(x), dw(w), partial(static_cast<size_t>(s.nq * splits * (s.hd + 2))),
        out(attended.size());
    DeviceArray<uint16_t> kc(cache.k), vc(cache.v);
    DeviceArray<int32_t> pos(std::vector<int32_t>{static_cast<int32_t>(len - 1)});
    for (const bool norm : {false, true}) {
      std::vector<float> in = x;
      if (norm) rms_norm(x.data(), w.data(), 1e-6f, g.m.cols, in.data());
      const auto gate = cpu_matmul(h.w, in, 1);
      std::vector<float> ref = attended;
      for (size_t i = 0; i < ref.size(); ++i) ref[i] *= sigmoid(gate[i]);
      SCOPED_TRACE(fmt::format("{}/{} heads x {}, gate {}, {}", s.nq, s.nkv, s.hd, describe(g.m),
                               norm ? "RMSNorm" : "plain"));
      cuda::AttentionDecodeArgs args{
          dq.data(),      kc.data(), vc.data(), cap,       pos.data(),
          s.nq,           s.nkv,     s.hd,      scale,     static_cast<int>(splits),
          partial.data(), nullptr,   0,         out.data()};
      args.gate_proj = up.m;
      args.gate_x = dx.data();
      args.gate_norm = norm ? dw.data() : nullptr;
      args.eps = 1e-6f;
      out.poison();
      cuda::attention_decode(args, nullptr);
      EXPECT_LT(rel_err(out.download(), ref), 2e-5);
    }
  }
}

TEST(Attention, PrefillMatchesAttendPerRow) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  for (const AttnShape s : {AttnShape{16, 2, 256}, AttnShape{4, 2, 32}, AttnShape{8, 2, 128},
                            AttnShape{4, 1, 64}, AttnShape{3, 3, 128}, AttnShape{2, 2, 256}}) {
    for (auto [pos0, n] :
         {std::pair<int64_t, int64_t>{0, 1}, {0, 100}, {37, 64}, {300, 130}, {2000, 3}, {64, 200}}) {
      SCOPED_TRACE(fmt::format("{}/{} heads x {}, rows [{}, {})", s.nq, s.nkv, s.hd, pos0, pos0 + n));
      const int64_t cap = pos0 + n, q_stride = 2 * s.hd, ld_gate = s.nq * q_stride;
      const HostCache cache = random_cache(s, cap, rng);
      const auto q = round_bf16(randn(static_cast<size_t>(n * s.nq * s.hd), rng, 2.0f));
      const auto gate = randn(static_cast<size_t>(n * ld_gate), rng);
      DeviceArray<uint16_t> dq(to_bf16(q)), kc(cache.k), vc(cache.v),
          out(static_cast<size_t>(n * s.nq * s.hd));
      DeviceArray<float> dgate(gate);
      const float scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
      std::vector<float> ref(out.size()), scores(static_cast<size_t>(cap));
      for (int64_t t = 0; t < n; ++t)
        for (int h = 0; h < s.nq; ++h) {
          float* o = ref.data() + (t * s.nq + h) * s.hd;
          attend(q.data() + (t * s.nq + h) * s.hd, cache.head(h / (s.nq / s.nkv), cap, s.hd), pos0 + t + 1,
                 s.hd, scale, scores.data(), o, kVectorOpsReference);
          for (int d = 0; d < s.hd; ++d)
            o[d] *= sigmoid(gate[static_cast<size_t>(t * ld_gate + h * q_stride + s.hd + d)]);
        }
      // head_dim 32 runs on the mma.sync kernel, the others on warpgroup products.
      cuda::AttentionPrefillArgs args{
          dq.data(), kc.data(), vc.data(),           cap,     n,        pos0,      s.nq, s.nkv,
          s.hd,      scale,     dgate.data() + s.hd, ld_gate, q_stride, out.data()};
      out.upload(std::vector<uint16_t>(out.size(), 0x7fc0));  // NaN
      cuda::attention_prefill(args, nullptr);
      EXPECT_LT(rel_err(from_bf16(out.download()), ref), 1.5e-2);
    }
  }
}

// Prefill attention speed at the real shape (16 query heads, 2 kv heads of 256) for a 4096-row chunk
// at three context lengths (prints; asserts nothing).
TEST(Attention, PrefillTiming) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  const AttnShape s{16, 2, 256};
  const int64_t n = 4096, cap = 131072;
  // Values do not change the speed: one random block repeated over the cache.
  const auto block = to_bf16(randn(size_t{1} << 20, rng));
  auto tiled = [&](int64_t size) {
    std::vector<uint16_t> v(static_cast<size_t>(size));
    for (size_t i = 0; i < v.size(); ++i) v[i] = block[i & (block.size() - 1)];
    return v;
  };
  const auto cache = tiled(s.nkv * cap * s.hd);
  DeviceArray<uint16_t> kc(cache), vc(cache), dq(tiled(n * s.nq * s.hd)),
      out(static_cast<size_t>(n * s.nq * s.hd));
  fmt::print("{:>8} {:>16}   (us per call, TFLOP/s; 4096 rows)\n", "context", "wgmma");
  for (const int64_t pos0 : {int64_t{0}, int64_t{28672}, cap - n}) {
    const double flop =
        4.0 * s.nq * s.hd * (static_cast<double>(n) * pos0 + 0.5 * static_cast<double>(n) * (n + 1));
    fmt::print("{:>8}", pos0 + n);
    const cuda::AttentionPrefillArgs args{dq.data(), kc.data(), vc.data(), cap,     n, pos0, s.nq,
                                          s.nkv,     s.hd,      0.0625f,   nullptr, 0, 0,    out.data()};
    const double us = median_us([&] { cuda::attention_prefill(args, nullptr); }, 3);
    fmt::print(" {:>9.0f} {:>6.1f}\n", us, flop / us * 1e-6);
  }
}

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
  std::mt19937_64 rng(fresh_seed());
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
  std::mt19937_64 rng(fresh_seed());
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
