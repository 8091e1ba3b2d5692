// The f32 GEMM for the prefill router with the `router-bf16` lever off (matmul_cuda.h: gemm_f32):
// Y[t, o] = Σ_k X[t, k] · W[o, k] with f32 activations and W dequantized exactly to f32, the reference
// numerics for a discrete choice (by default the router runs from bf16 inputs, as the CPU's prefill).
//
// A block computes 64 rows × 64 outputs with 8 warps (16 rows × 32 outputs each) over 64-wide k
// slices in shared memory, on the tensor cores with the operands split three ways (tf32_mma.cuh:
// about f32 accuracy). Both tiles are stored [row][k] with rows of 68 floats, so the fragment reads
// of a warp fall on distinct banks; W is stored split (its hi and lo parts), since all four row warps
// read it. Double-buffered through registers: while a slice is multiplied, the next one's X (four
// float4s) and W codes (two 8-value pieces of one row, with their groups' scales and biases) are
// loaded; after the products they are stored (W dequantized to f32 and split) into the other buffer;
// one barrier per slice. (With FFMA, 27 TFLOP/s, the router stage of a 4K prompt took 6.8 ms on the
// H200; with the tensor cores and 32-wide slices 6.4 ms, the loop then waiting on its loads, one
// slice ahead: hence slices of 64; 4.9 ms once the fragments came by ldmatrix and the tf32 rounding by
// one integer add, tf32_mma.cuh.) Matrices of fewer than 8 rows take a warp per output instead
// (dot_rows_kernel).
//
// Test: tests/cuda/cuda_kernels_test.cpp (GemmF32.*) against the CPU matmul at the GEMV's bound.
#include "kernels/cuda_launch.h"
#include "kernels/matmul/dequant.cuh"
#include "kernels/tf32_mma.cuh"

namespace qwick::cuda {
namespace {

constexpr int kRows = 64, kTile = 64, kK = 64, kLd = kK + 4, kThreads = 256;  // kTile: outputs
// Per slice and thread: float4 pieces of X, 8-code pieces of W.
constexpr int kXPerThread = kRows * kK / 4 / kThreads, kWPerThread = kTile * kK / 8 / kThreads;
constexpr int kDotRowsBelow = 8;  // matrices with fewer rows take dot_rows_kernel

// 8 consecutive codes of a row (raw bits: 4/8-bit codes or bf16 values, in the first 1, 2 or 4 words
// of a chunk) and their group's scale and bias; zero for rows past the matrix.
template <WeightFormat F>
struct Codes8 {
  uint4 w{0, 0, 0, 0};
  float scale = 0.0f, bias = 0.0f;

  __device__ __forceinline__ void load(const DeviceMatrix& m, int64_t row, int64_t col) {
    if (row >= m.rows) return;
    const uint8_t* p = m.data + row * m.row_bytes + col_byte<F>(col);
    if constexpr (F == WeightFormat::kAffine4) w.x = *reinterpret_cast<const uint32_t*>(p);
    if constexpr (F == WeightFormat::kAffine8) {
      const uint2 v = *reinterpret_cast<const uint2*>(p);
      w.x = v.x, w.y = v.y;
    }
    if constexpr (F == WeightFormat::kBF16) w = *reinterpret_cast<const uint4*>(p);
    if constexpr (F != WeightFormat::kBF16) group_params(m, row, col, &scale, &bias);
  }
  __device__ __forceinline__ float value(int j) const { return chunk_value<F>(w, j, scale, bias); }
};

// Shared memory of gemm_f32_kernel, in floats: two buffers of X [kRows][kLd], then two of W's hi
// and lo parts [kTile][kLd] each.
constexpr int kXFloats = kRows * kLd, kWFloats = kTile * kLd;
constexpr size_t kF32Smem = sizeof(float) * 2 * (kXFloats + 2 * kWFloats);

template <WeightFormat F>
__global__ void __launch_bounds__(kThreads)
    gemm_f32_kernel(DeviceMatrix m, const float* x, int64_t n, float* y) {
  extern __shared__ float4 smem4[];
  float* const xs = reinterpret_cast<float*>(smem4);  // [2][kXFloats]
  float* const ws = xs + 2 * kXFloats;                // [2][hi, lo][kWFloats]
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kRows, o0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int warp = threadIdx.x >> 5, wm = (warp & 3) * 16, wn = (warp >> 2) * 32;  // this warp's tile
  // This thread's copies: X pieces i = threadIdx.x + 256j (row i / (kK/4), columns 4 (i % (kK/4)) ..),
  // and W row threadIdx.x / 4, columns kK/4 · (threadIdx.x % 4) .. of each slice, 8 at a time.
  constexpr int kXPieces = kK / 4;  // float4 pieces of an X row
  const float* x_src[kXPerThread];
  bool x_valid[kXPerThread];
#pragma unroll
  for (int j = 0; j < kXPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    x_valid[j] = t0 + i / kXPieces < n;
    x_src[j] = x + (x_valid[j] ? (t0 + i / kXPieces) * m.cols : 0) + i % kXPieces * 4;
  }
  const int w_r = threadIdx.x >> 2, w_c = (threadIdx.x & 3) * (kK / 4);
  float4 xv[kXPerThread];
  Codes8<F> wv[kWPerThread];
  auto fetch = [&](int64_t k0) {
#pragma unroll
    for (int j = 0; j < kXPerThread; ++j)
      xv[j] = x_valid[j] ? *reinterpret_cast<const float4*>(x_src[j] + k0) : make_float4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < kWPerThread; ++j) {
      wv[j] = Codes8<F>{};
      wv[j].load(m, o0 + w_r, k0 + w_c + 8 * j);
    }
  };
  auto stage = [&](int buf) {
#pragma unroll
    for (int j = 0; j < kXPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      *reinterpret_cast<float4*>(xs + buf * kXFloats + i / kXPieces * kLd + i % kXPieces * 4) = xv[j];
    }
    float* dst = ws + buf * 2 * kWFloats + w_r * kLd + w_c;
#pragma unroll
    for (int j = 0; j < 8 * kWPerThread; ++j) store_split<true>(dst + j, kWFloats, wv[j / 8].value(j % 8));
  };

  float acc[1][4][4] = {};
  fetch(0);
  stage(0);
  __syncthreads();
  int buf = 0;
  for (int64_t k0 = 0; k0 < m.cols; k0 += kK) {
    const bool more = k0 + kK < m.cols;
    if (more) fetch(k0 + kK);
    // B's element (k, output) is W[output][k]: n-major.
    warp_mma<1, 4, true>(acc, RowMajorA{xs + buf * kXFloats + wm * kLd, kLd},
                         ws + buf * 2 * kWFloats + wn * kLd, kLd, kWFloats, kK);
    if (more) stage(buf ^ 1);  // its last readers finished before the previous barrier
    __syncthreads();
    buf ^= 1;
  }
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t row = t0 + wm + g + 8 * (e >> 1), o = o0 + wn + nt * 8 + 2 * t + (e & 1);
      if (row < n && o < m.rows) y[row * m.rows + o] = acc[0][nt][e];
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
  static const bool configured = [] {  // above the 48 KB default: once per instantiation
    check(cudaFuncSetAttribute(gemm_f32_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kF32Smem)),
          "gemm_f32: shared memory");
    return true;
  }();
  (void)configured;
  const dim3 grid(blocks_for(m.rows, kTile), blocks_for(n, kRows));
  gemm_f32_kernel<F><<<grid, kThreads, kF32Smem, stream>>>(m, x, n, y);
}

}  // namespace

void gemm_f32(const DeviceMatrix& m, const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (n == 0) return;
  with_device_format(m.format, "gemm_f32: weights must be affine 4/8-bit or bf16 on the GPU",
                     [&](auto f) { launch<f.value>(m, x, n, y, stream); });
  check_launch("gemm_f32");
}

}  // namespace qwick::cuda
