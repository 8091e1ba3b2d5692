// The f32 GEMM for the prefill router (matmul_cuda.h: gemm_f32): Y[t, o] = Σ_k X[t, k] · W[o, k] with
// f32 activations and W dequantized exactly to f32, accumulated in f32: the numerics of the decode
// GEMV, for all rows of a chunk at once. The router's outputs pick experts, a discrete choice, so
// they must not see bf16 rounding (see cuda_backend.cpp).
//
// A block computes 64 rows × 64 outputs with 256 threads, 4 × 4 each, over 32-wide k slices staged
// in shared memory k-major (a thread's 4 rows and 4 outputs are one float4 each). Plain FFMA: the
// router is 1/200 of a layer's matrix work. Measured on a 4096-row chunk: 16.7 ms per 40 layers
// against 37.8 for a GEMV per row, which re-reads W once per row; on 512 rows its 32 blocks leave
// most SMs idle and the GEMV is faster, so the backend uses it only for long chunks.
//
// Test: tests/cuda/cuda_kernels_test.cu (GemmF32.*) against the CPU matmul at the GEMV's bound.
#include "kernels/cuda_launch.h"
#include "kernels/matmul/dequant.cuh"

namespace qwick::cuda {
namespace {

constexpr int kRows = 64, kTile = 64, kK = 32, kLd = kTile + 4, kThreads = 256;  // kTile: outputs

template <WeightFormat F>
__device__ __forceinline__ float weight_code(const uint8_t* row, int64_t k) {
  if constexpr (F == WeightFormat::kAffine4) return static_cast<float>((row[k >> 1] >> (4 * (k & 1))) & 0xf);
  if constexpr (F == WeightFormat::kAffine8) return static_cast<float>(row[k]);
  return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[k]);
}

template <WeightFormat F>
__global__ void __launch_bounds__(kThreads)
    gemm_f32_kernel(DeviceMatrix m, const float* x, int64_t n, float* y) {
  __shared__ __align__(16) float xs[kK * kLd];
  __shared__ __align__(16) float ws[kK * kLd];
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kRows, o0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < m.cols; k0 += kK) {
    // X: kRows rows × 32 columns as float4s, stored transposed.
    for (int i = threadIdx.x; i < kRows * kK / 4; i += kThreads) {
      const int r = i >> 3, c = (i & 7) * 4;
      float4 v = make_float4(0, 0, 0, 0);
      if (t0 + r < n) v = *reinterpret_cast<const float4*>(x + (t0 + r) * m.cols + k0 + c);
      xs[(c + 0) * kLd + r] = v.x, xs[(c + 1) * kLd + r] = v.y;
      xs[(c + 2) * kLd + r] = v.z, xs[(c + 3) * kLd + r] = v.w;
    }
    // W: (output row, 8 consecutive columns) per step, one quantization group.
    for (int i = threadIdx.x; i < kTile * 4; i += kThreads) {
      const int r = i >> 2, c = (i & 3) * 8;
      const int64_t row = o0 + r;
      float s = 1.0f, b = 0.0f;
      if (row < m.rows && F != WeightFormat::kBF16) group_params(m, row, k0 + c, &s, &b);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        ws[(c + j) * kLd + r] =
            row < m.rows ? weight_code<F>(m.data + row * m.row_bytes, k0 + c + j) * s + b : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < kK; ++k) {
      const float4 a = *reinterpret_cast<const float4*>(xs + k * kLd + ty * 4);
      const float4 w = *reinterpret_cast<const float4*>(ws + k * kLd + tx * 4);
      const float av[4] = {a.x, a.y, a.z, a.w}, wv[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], wv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t t = t0 + ty * 4 + i;
    if (t >= n) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t o = o0 + tx * 4 + j;
      if (o < m.rows) y[t * m.rows + o] = acc[i][j];
    }
  }
}

template <WeightFormat F>
void launch(const DeviceMatrix& m, const float* x, int64_t n, float* y, cudaStream_t stream) {
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
