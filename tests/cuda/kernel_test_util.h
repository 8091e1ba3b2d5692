// What the CUDA kernel tests (tests/cuda/*_cuda_test.cpp) and bench/kernels_cuda_bench.cpp share: the
// CPU products they compare against, error measures over a product's terms, the matrix shapes every
// matrix kernel is tried on, the MoE grouping's device arrays, random KV caches and scan inputs.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
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

namespace qwick::test {

using cuda::DeviceMatrix;

inline ThreadPool& pool() {
  static ThreadPool p(0);
  return p;
}

// y[t] = W·x[t] on the CPU (the SIMD matmul, itself checked against matmul_rows_reference).
inline std::vector<float> cpu_matmul(const WeightMatrix& w, const std::vector<float>& x, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n * w.rows));
  matmul(MatmulProblem{&w, x.data(), static_cast<size_t>(w.cols), static_cast<size_t>(n), y.data(),
                       static_cast<size_t>(w.rows)},
         pool());
  return y;
}

// The size of each output's terms, Σ_i |w_ri·x_si| for n input rows x_s ([n, rows]): the CPU matmul of
// |W| (dequantized to f32, 4096 rows at a time) and |x|.
inline std::vector<float> term_sizes(const WeightMatrix& w, const std::vector<float>& x, int64_t n) {
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
inline double term_err(const std::vector<float>& y, const std::vector<float>& ref,
                       const std::vector<float>& terms) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double d = static_cast<double>(y[i]) - ref[i];
    if (!std::isfinite(d)) return INFINITY;
    err += d * d, scale += static_cast<double>(terms[i]) * terms[i];
  }
  return std::sqrt(err / scale);
}
inline double dot_err(const std::vector<float>& y, const std::vector<float>& ref, const WeightMatrix& w,
                      const std::vector<float>& x) {
  return term_err(y, ref, term_sizes(w, x, 1));
}

struct MatrixCase {
  WeightFormat format;
  int64_t rows, cols;
  int group = 64;
};

inline const std::vector<MatrixCase>& matrix_cases() {
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

inline std::string describe(const MatrixCase& c) {
  return fmt::format("{} [{} x {}] group {}", weight_format_name(c.format), c.rows, c.cols, c.group);
}

// Median of `reps` timed calls of fn, in microseconds, after one untimed call (module load, caches).
template <typename Fn>
inline double median_us(Fn&& fn, int reps = 7) {
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

// The bf16 matrix [rows, cols] whose rows lie back to back in `values` (a decode_bf16 copy).
inline DeviceMatrix bf16_rows(const DeviceArray<uint16_t>& values, int64_t rows, int64_t cols) {
  DeviceMatrix m;
  m.rows = rows, m.cols = cols, m.row_bytes = 2 * cols;
  m.data = reinterpret_cast<const uint8_t*>(values.data());
  return m;
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
inline std::vector<float> logits_routing_to(const std::vector<int32_t>& ids, int64_t n, int k, int E) {
  std::vector<float> logits(static_cast<size_t>(n * E), -100.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j)
      logits[static_cast<size_t>(t * E + ids[static_cast<size_t>(t * k + j)])] = static_cast<float>(k - j);
  return logits;
}

// The routed experts' grouped GEMMs as the backend sets them up (table entries gate, up, down per
// expert; tiles from moe_route_group): gate|up of the slot rows of x [*, H] into gate_up [slots, 2I], and
// down of act [slots, I] into down [slots, H].
struct ExpertGemms {
  cuda::GemmArgs gate_up, down;
};
inline ExpertGemms expert_gemms(const void* table, const cuda::MoeGrouping& g, int64_t max_tiles, int64_t H,
                                int64_t I, const uint16_t* x, float* gate_up, const uint16_t* act,
                                float* down) {
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

// Random scan inputs for n rows of one DeltaNet layer as deltanet_prepare leaves them: q, k
// L2-normalised per key head (q scaled), v random, beta and decay from random gates with decay rates
// spread from strong (state forgotten within a few rows) to weak (carried over hundreds).
struct ScanInputs {
  std::vector<float> qkv, beta, decay;
};
inline ScanInputs random_scan_inputs(int64_t n, int Hk, int Hv, int Dk, int Dv, std::mt19937_64& rng) {
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
inline HostCache random_cache(const AttnShape& s, int64_t capacity, std::mt19937_64& rng) {
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
inline HostQ8Cache random_q8_cache(const AttnShape& s, int64_t capacity, std::mt19937_64& rng) {
  const size_t n = static_cast<size_t>(s.nkv) * static_cast<size_t>(capacity) * static_cast<size_t>(s.hd);
  return {test::q8_rows(randn(n, rng), s.hd), test::q8_rows(randn(n, rng), s.hd)};
}

// Every GEMM kernel and tile shape: the simple kernel, or gemm() (the wgmma kernel wherever its parts
// are multiples of 128 rows), and the slots per tile.
struct GemmVariant {
  void (*run)(const cuda::GemmArgs&, cudaStream_t);
  bool wgmma;
  int tile_rows;
  const char* name;
};
inline constexpr GemmVariant kGemmVariants[] = {{cuda::gemm_simple, false, 64, "simple 64x64"},
                                                {cuda::gemm, true, 64, "wgmma 64x128"},
                                                {cuda::gemm, true, 128, "wgmma 128x128"},
                                                {cuda::gemm, true, 144, "wgmma 144x128"},
                                                {cuda::gemm, true, 256, "wgmma 256x128"}};

}  // namespace qwick::test
