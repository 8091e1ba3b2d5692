// Row-wise normalisations and the embedding lookup on the GPU (model-spec.md §2.1, §2.2, §2.5),
// reductions in f32:
//   rms_norm_rows        y = x · rsqrt(mean(x²) + eps) · w              (pass w = 1 + w for the
//                                                                       zero-centred norms)
//   gated_rms_norm_rows  per head of D values: y = w · (x · rsqrt(mean(x²) + eps)) · silu(z)
//   embed_rows           hidden[t] = dequantized row tokens[t] of the embedding
// Outputs are f32 or bf16 (the prefill GEMM's input). Rows and heads are multiples of 4 values, every
// pointer 16-byte aligned (bf16 outputs 8): the kernels move four values per access. Tests:
// tests/cuda/deltanet_cuda_test.cpp (Norm.*) against rms_norm / gated_rms_norm / dequantize_row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/matmul_cuda/matmul_cuda.h"

namespace qwick::cuda {

// Writes out_f32 and/or out_bf16 (whichever is non-null); rows are H apart in x and out.
// overlap: a programmatic dependent launch (cuda_launch.h).
void rms_norm_rows(const float* x, int64_t n, int64_t H, const float* weight, float eps, float* out_f32,
                   uint16_t* out_bf16, cudaStream_t stream, bool overlap = false);

inline constexpr int kGatedNormMaxHead = 256;
struct GatedNormArgs {
  const float* x;  // [n, ld_x], heads of D values back to back (D at most kGatedNormMaxHead)
  int64_t ld_x;
  const float* z;  // [n, ld_z]
  int64_t ld_z;
  int64_t n;
  int heads, D;
  const float* weight;  // [D]
  float eps;
  float* out_f32;  // one of the two, [n, ld_out]
  uint16_t* out_bf16;
  int64_t ld_out;
  const uint16_t* z_bf16 = nullptr;  // z in bf16, read instead of z (same ld_z; 8-byte aligned)
  bool overlap = false;              // a programmatic dependent launch (cuda_launch.h)
};
void gated_rms_norm_rows(const GatedNormArgs& a, cudaStream_t stream);

// tokens: device [n]; out: [n, embed.cols] f32.
void embed_rows(const DeviceMatrix& embed, const int32_t* tokens, int64_t n, float* out, cudaStream_t stream);

}  // namespace qwick::cuda
