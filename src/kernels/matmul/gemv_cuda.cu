// Decode GEMV: y = W·x for one f32 row x, weights in file format (see matmul_cuda.h).
//
// Block: 8 warps, each owning kRowsPerWarp consecutive weight rows. Lane l reads chunks l, l+32, ...
// of each row (16 bytes per load, coalesced across the warp) and accumulates
//   Σ_i (q_i·s + b)·x_i = s·Σ q_i·x_i + b·Σ x_i      (affine; fewer multiplies per element)
// then the warp reduces. x is staged in shared memory with 4 floats of padding after each chunk, so
// the eight lanes of one 16-byte access phase hit distinct banks.
//
// Test: tests/cuda/cuda_kernels_test.cu (Gemv.*) against matmul_rows_reference.
#include "kernels/cuda_launch.h"
#include "kernels/matmul/dequant.cuh"

namespace qwick::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 2;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;

template <WeightFormat F>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemvArgs a) {
  constexpr int E = ChunkTraits<F>::kElems;
  constexpr int kStride = E + 4;  // padded floats per chunk in shared memory
  extern __shared__ float4 xs4[];
  float* xs = reinterpret_cast<float*>(xs4);

  const int p = blockIdx.y;
  const DeviceMatrix m = a.table ? a.table[a.index ? a.index[p] : p] : a.single;
  const int64_t block_row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  if (block_row >= m.rows) return;  // uniform over the block: this problem's matrix is shorter

  const float* x = a.x + p * a.x_stride;
  const int64_t chunks = m.cols / E;
  for (int64_t i = threadIdx.x; i < m.cols; i += blockDim.x) xs[(i / E) * kStride + i % E] = x[i];
  __syncthreads();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row0 = block_row + warp * kRowsPerWarp;
  float acc[kRowsPerWarp] = {};
#pragma unroll 2
  for (int64_t c = lane; c < chunks; c += 32) {
    float xv[E];
    const float4* xp = reinterpret_cast<const float4*>(xs + c * kStride);
#pragma unroll
    for (int j = 0; j < E / 4; ++j) {
      const float4 v = xp[j];
      xv[4 * j] = v.x, xv[4 * j + 1] = v.y, xv[4 * j + 2] = v.z, xv[4 * j + 3] = v.w;
    }
    float xsum = 0.0f;
    if constexpr (F != WeightFormat::kBF16) {
#pragma unroll
      for (int i = 0; i < E; ++i) xsum += xv[i];
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t row = row0 + r;
      if (row >= m.rows) break;
      const uint4 w = reinterpret_cast<const uint4*>(m.data + row * m.row_bytes)[c];
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < E; ++i) dot += chunk_value<F>(w, i, 1.0f, 0.0f) * xv[i];
      if constexpr (F == WeightFormat::kBF16) {
        acc[r] += dot;
      } else {
        float s, b;
        group_params(m, row, c * E, &s, &b);
        acc[r] += s * dot + b * xsum;
      }
    }
  }
  float* y = a.y + p * a.y_stride;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const float v = warp_sum(acc[r]);
    const int64_t row = row0 + r;
    if (lane == 0 && row < m.rows) y[row] = a.accumulate ? y[row] + v : v;
  }
}

template <WeightFormat F>
void launch(const GemvArgs& a, cudaStream_t stream) {
  constexpr int E = ChunkTraits<F>::kElems;
  const size_t smem = static_cast<size_t>((a.max_cols + E - 1) / E * (E + 4)) * sizeof(float);
  if (smem > 48 * 1024) {  // inputs past 10K columns; never during the decode graph's capture
    static bool configured = false;
    if (!configured)
      check(cudaFuncSetAttribute(gemv_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 * 1024),
            "gemv: shared memory limit");
    configured = true;
  }
  const dim3 grid(blocks_for(a.max_rows, kRowsPerBlock), static_cast<unsigned>(a.problems));
  gemv_kernel<F><<<grid, kWarps * 32, smem, stream>>>(a);
  check_launch("gemv");
}

}  // namespace

void gemv(const GemvArgs& a, cudaStream_t stream) {
  switch (a.format) {
    case WeightFormat::kAffine4:
      return launch<WeightFormat::kAffine4>(a, stream);
    case WeightFormat::kAffine8:
      return launch<WeightFormat::kAffine8>(a, stream);
    case WeightFormat::kBF16:
      return launch<WeightFormat::kBF16>(a, stream);
    default:
      check(cudaErrorInvalidValue, "gemv: weights must be affine 4/8-bit or bf16 on the GPU");
  }
}

}  // namespace qwick::cuda
