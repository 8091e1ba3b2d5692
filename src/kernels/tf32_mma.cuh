// f32 products of one warp on the tf32 tensor cores (mma m16n8k8), optionally split three ways for
// about f32 accuracy: each operand is a tf32 high part plus a tf32 low part (the rest), and a·b ≈
// a_hi·b_hi + a_hi·b_lo + a_lo·b_hi (about 1e-6 relative; plain tf32 about 3e-4). Used by the chunked
// DeltaNet scan and the prefill router's f32 GEMM.
#pragma once

#include "kernels/tensor_core.cuh"

namespace qwick::cuda {

template <bool SPLIT>
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = to_tf32(x);
  if constexpr (SPLIT) lo = to_tf32(x - __uint_as_float(hi));
}
// Stores x split for warp_mma's B operand: hi at p, lo at p + lo (its bits, as floats).
template <bool SPLIT>
__device__ __forceinline__ void store_split(float* p, int lo, float x) {
  uint32_t h, l = 0;
  split_tf32<SPLIT>(x, h, l);
  p[0] = __uint_as_float(h);
  if constexpr (SPLIT) p[lo] = __uint_as_float(l);
}

// acc[MT][NT] += A · B for one warp, over k in [0, k_end) (a multiple of 8). A's element (m, k) is
// A[m·am + k·ak] for rows m < 16·MT, split as it is read (each warp reads its own rows). B's element
// (k, n) is B[k·bk + n·bn] for n < 8·NT, stored split (store_split, lo at b_lo further): the warps of
// a block usually share B, and splitting it once saves each of them the same instructions.
// Accumulator tile layout of m16n8: [0], [1] at row group, columns 2·(lane%4) + 0, 1; [2], [3] at row
// group + 8.
template <int MT, int NT, bool SPLIT>
__device__ __forceinline__ void warp_mma(float (&acc)[MT][NT][4], const float* A, int am, int ak,
                                         const float* B, int bk, int bn, int b_lo, int k_end) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll 4
  for (int k0 = 0; k0 < k_end; k0 += 8) {
    uint32_t ah[MT][4], al[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const float* p = A + (mt * 16 + g) * am + (k0 + t) * ak;
      split_tf32<SPLIT>(p[0], ah[mt][0], al[mt][0]);
      split_tf32<SPLIT>(p[8 * am], ah[mt][1], al[mt][1]);
      split_tf32<SPLIT>(p[4 * ak], ah[mt][2], al[mt][2]);
      split_tf32<SPLIT>(p[8 * am + 4 * ak], ah[mt][3], al[mt][3]);
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const float* p = B + (k0 + t) * bk + (nt * 8 + g) * bn;
      const uint32_t bh0 = __float_as_uint(p[0]), bh1 = __float_as_uint(p[4 * bk]);
      uint32_t bl0 = 0, bl1 = 0;
      if constexpr (SPLIT) bl0 = __float_as_uint(p[b_lo]), bl1 = __float_as_uint(p[4 * bk + b_lo]);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (SPLIT) {  // the small cross terms first
          mma_tf32(acc[mt][nt], al[mt], bh0, bh1);
          mma_tf32(acc[mt][nt], ah[mt], bl0, bl1);
        }
        mma_tf32(acc[mt][nt], ah[mt], bh0, bh1);
      }
    }
  }
}

}  // namespace qwick::cuda
