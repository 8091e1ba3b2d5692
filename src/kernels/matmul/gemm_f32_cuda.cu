// The f32 GEMM for the prefill router (matmul_cuda.h: gemm_f32): Y[t, o] = Σ_k X[t, k] · W[o, k] with
// f32 activations and W dequantized exactly to f32, accumulated in f32: the numerics of the decode
// GEMV, for all rows of a chunk at once. The router's outputs pick experts, a discrete choice, so
// they must not see bf16 rounding (see cuda_backend.cpp).
//
// A block computes 64 rows × 64 outputs with 256 threads, 4 × 4 each (rows ty + 16i, outputs
// tx + 16j), over 32-wide k slices in shared memory, both tiles stored [row][k] with rows of 36
// floats: the 16-byte reads of a quarter warp then fall on distinct banks (W) or one address (X).
// Double-buffered through registers: while a slice is multiplied, the next one's X (two float4s) and
// W codes (one 8-value piece of one row, with its group's scale and bias) are loaded; after the
// products they are stored (W dequantized to f32) into the other buffer; one barrier per slice.
// Plain FFMA, each output's terms summed in k order. Matrices of fewer than 8 rows take a warp per
// output instead (dot_rows_kernel).
//
// Test: tests/cuda/cuda_kernels_test.cpp (GemmF32.*) against the CPU matmul at the GEMV's bound.
#include "kernels/cuda_launch.h"
#include "kernels/matmul/dequant.cuh"

namespace qwick::cuda {
namespace {

constexpr int kRows = 64, kTile = 64, kK = 32, kLd = kK + 4, kThreads = 256;  // kTile: outputs
constexpr int kDotRowsBelow = 8;  // matrices with fewer rows take dot_rows_kernel

// 8 consecutive codes of a row (raw bits: 4/8-bit codes or bf16 values) and their group's scale and
// bias; zero for rows past the matrix.
template <WeightFormat F>
struct Codes8 {
  uint32_t w[F == WeightFormat::kAffine4 ? 1 : F == WeightFormat::kAffine8 ? 2 : 4] = {};
  float scale = 0.0f, bias = 0.0f;

  __device__ __forceinline__ void load(const DeviceMatrix& m, int64_t row, int64_t col) {
    if (row >= m.rows) return;
    const uint8_t* p = m.data + row * m.row_bytes + col_byte<F>(col);
    if constexpr (F == WeightFormat::kAffine4) w[0] = *reinterpret_cast<const uint32_t*>(p);
    if constexpr (F == WeightFormat::kAffine8) {
      const uint2 v = *reinterpret_cast<const uint2*>(p);
      w[0] = v.x, w[1] = v.y;
    }
    if constexpr (F == WeightFormat::kBF16) {
      const uint4 v = *reinterpret_cast<const uint4*>(p);
      w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    }
    if constexpr (F != WeightFormat::kBF16) group_params(m, row, col, &scale, &bias);
  }
  __device__ __forceinline__ float value(int j) const {
    if constexpr (F == WeightFormat::kAffine4)
      return static_cast<float>((w[0] >> (4 * j)) & 0xfu) * scale + bias;
    if constexpr (F == WeightFormat::kAffine8)
      return static_cast<float>((w[j >> 2] >> (8 * (j & 3))) & 0xffu) * scale + bias;
    return __uint_as_float((w[j >> 1] >> (16 * (j & 1))) << 16);
  }
};

template <WeightFormat F>
__global__ void __launch_bounds__(kThreads)
    gemm_f32_kernel(DeviceMatrix m, const float* x, int64_t n, float* y) {
  __shared__ __align__(16) float xs[2][kRows * kLd];
  __shared__ __align__(16) float ws[2][kTile * kLd];
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kRows, o0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  // This thread's copies: X chunks i = threadIdx.x + 256j (row i / 8, columns 4 (i % 8) ..), and W
  // row threadIdx.x / 4, columns 8 (threadIdx.x % 4) .. of each slice.
  const float* x_src[2];
  bool x_valid[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int i = threadIdx.x + j * kThreads;
    x_valid[j] = t0 + (i >> 3) < n;
    x_src[j] = x + (x_valid[j] ? (t0 + (i >> 3)) * m.cols : 0) + (i & 7) * 4;
  }
  const int w_r = threadIdx.x >> 2, w_c = (threadIdx.x & 3) * 8;
  float4 xv[2];
  Codes8<F> wv;
  auto fetch = [&](int64_t k0) {
#pragma unroll
    for (int j = 0; j < 2; ++j)
      xv[j] = x_valid[j] ? *reinterpret_cast<const float4*>(x_src[j] + k0) : make_float4(0, 0, 0, 0);
    wv = Codes8<F>{};
    wv.load(m, o0 + w_r, k0 + w_c);
  };
  auto stage = [&](int buf) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int i = threadIdx.x + j * kThreads;
      *reinterpret_cast<float4*>(&xs[buf][(i >> 3) * kLd + (i & 7) * 4]) = xv[j];
    }
    float* dst = &ws[buf][w_r * kLd + w_c];
    *reinterpret_cast<float4*>(dst) = make_float4(wv.value(0), wv.value(1), wv.value(2), wv.value(3));
    *reinterpret_cast<float4*>(dst + 4) = make_float4(wv.value(4), wv.value(5), wv.value(6), wv.value(7));
  };

  float acc[4][4] = {};
  fetch(0);
  stage(0);
  __syncthreads();
  int buf = 0;
  for (int64_t k0 = 0; k0 < m.cols; k0 += kK) {
    const bool more = k0 + kK < m.cols;
    if (more) fetch(k0 + kK);
#pragma unroll
    for (int k = 0; k < kK; k += 4) {
      float4 a[4], w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const float4*>(&xs[buf][(ty + 16 * i) * kLd + k]);
#pragma unroll
      for (int j = 0; j < 4; ++j) w[j] = *reinterpret_cast<const float4*>(&ws[buf][(tx + 16 * j) * kLd + k]);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[i][j] = fmaf(a[i].x, w[j].x, acc[i][j]);
          acc[i][j] = fmaf(a[i].y, w[j].y, acc[i][j]);
          acc[i][j] = fmaf(a[i].z, w[j].z, acc[i][j]);
          acc[i][j] = fmaf(a[i].w, w[j].w, acc[i][j]);
        }
    }
    if (more) stage(buf ^ 1);  // its last readers finished before the previous barrier
    __syncthreads();
    buf ^= 1;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t t = t0 + ty + 16 * i;
    if (t >= n) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t o = o0 + tx + 16 * j;
      if (o < m.rows) y[t * m.rows + o] = acc[i][j];
    }
  }
}

// Matrices of a few rows (the shared expert's gate has one), where a 64-output tile would be mostly
// empty: a warp per (row t, output o) walks k in pieces of 8 per lane, then sums across the warp.
template <WeightFormat F>
__global__ void __launch_bounds__(kThreads)
    dot_rows_kernel(DeviceMatrix m, const float* x, int64_t n, float* y) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (p >= n * m.rows) return;
  const int64_t t = p / m.rows, o = p % m.rows;
  const int lane = threadIdx.x & 31;
  const float* xr = x + t * m.cols;
  float sum = 0.0f;
  for (int64_t k = 8 * lane; k < m.cols; k += 8 * 32) {
    Codes8<F> w;
    w.load(m, o, k);
    const float4 a = *reinterpret_cast<const float4*>(xr + k),
                 b = *reinterpret_cast<const float4*>(xr + k + 4);
    const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) sum = fmaf(xv[j], w.value(j), sum);
  }
  sum = warp_sum(sum);
  if (lane == 0) y[t * m.rows + o] = sum;
}

template <WeightFormat F>
void launch(const DeviceMatrix& m, const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (m.rows < kDotRowsBelow) {
    dot_rows_kernel<F><<<blocks_for(n * m.rows, kThreads / 32), kThreads, 0, stream>>>(m, x, n, y);
    return;
  }
  const dim3 grid(blocks_for(m.rows, kTile), blocks_for(n, kRows));
  gemm_f32_kernel<F><<<grid, kThreads, 0, stream>>>(m, x, n, y);
}

}  // namespace

void gemm_f32(const DeviceMatrix& m, const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (n == 0) return;
  switch (m.format) {
    case WeightFormat::kAffine4:
      launch<WeightFormat::kAffine4>(m, x, n, y, stream);
      break;
    case WeightFormat::kAffine8:
      launch<WeightFormat::kAffine8>(m, x, n, y, stream);
      break;
    case WeightFormat::kBF16:
      launch<WeightFormat::kBF16>(m, x, n, y, stream);
      break;
    default:
      check(cudaErrorInvalidValue, "gemm_f32: weights must be affine 4/8-bit or bf16 on the GPU");
  }
  check_launch("gemm_f32");
}

}  // namespace qwick::cuda
