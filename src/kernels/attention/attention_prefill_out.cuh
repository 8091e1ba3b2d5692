// The end of a flash prefill block, shared by the wgmma and mma.sync kernels: a warp's 16 query rows
// of head h in mma's C layout (lane 4g + t: rows row0 + g and row0 + g + 8, columns 8j + 2t, +1 in
// o[4j], o[4j + 1] and o[4j + 2], o[4j + 3]), their softmax sums split over the 4 lanes of a row;
// normalised, multiplied by the sigmoid output gate when there is one, written as bf16. Rows past the
// chunk are not written.
#pragma once

#include "kernels/attention/attention_cuda.h"
#include "kernels/cuda/cuda_common.cuh"

namespace qwick::cuda {

template <int HD>
__device__ __forceinline__ void store_prefill_rows(const AttentionPrefillArgs& a, int h, int64_t row0,
                                                   const float (&o)[HD / 2], float l0, float l1) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l0 += __shfl_xor_sync(kFullMask, l0, off);
    l1 += __shfl_xor_sync(kFullMask, l1, off);
  }
  const float inv[2] = {1.0f / l0, 1.0f / l1};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = row0 + g + 8 * half;
    if (row >= a.n) continue;
    uint16_t* out = a.out + (row * a.n_heads + h) * HD;
    const float* gate = a.gate ? a.gate + row * a.ld_gate + h * a.gate_stride : nullptr;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      const int d = j * 8 + 2 * t;
      float v0 = o[4 * j + 2 * half] * inv[half], v1 = o[4 * j + 2 * half + 1] * inv[half];
      if (gate) v0 *= sigmoidf_(gate[d]), v1 *= sigmoidf_(gate[d + 1]);
      *reinterpret_cast<uint32_t*>(out + d) = pack_bf16x2(v0, v1);
    }
  }
}

}  // namespace qwick::cuda
