// f32 products of one warp on the tf32 tensor cores (mma m16n8k8), optionally split three ways for
// about f32 accuracy: each operand is a tf32 high part plus a tf32 low part (the rest), and a·b ≈
// a_hi·b_hi + a_hi·b_lo + a_lo·b_hi (about 1e-6 relative; plain tf32 about 3e-4). Used by the chunked
// DeltaNet scan and the prefill router's f32 GEMM.
//
// Operands come from shared memory. A fragment of 8 k of a row-major operand is four 8-row × 4-word
// tiles, which one ldmatrix (b16 tiles of 16-byte rows) hands out in exactly the mma's register order;
// so is a pair of B fragments when B is stored n-major. That is one instruction where per-element
// loads took four, and one address per lane.
#pragma once

#include "kernels/cuda/tensor_core.cuh"

namespace qwick::cuda {

template <bool SPLIT>
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = to_tf32(x);
  if constexpr (SPLIT) lo = __float_as_uint(x - tf32_value(hi));  // exact; its own low bits dropped
}
// Stores x split for warp_mma's B operand: hi at p, lo at p + lo (its bits, as floats).
template <bool SPLIT>
__device__ __forceinline__ void store_split(float* p, int lo, float x) {
  uint32_t h, l = 0;
  split_tf32<SPLIT>(x, h, l);
  p[0] = __uint_as_float(h);
  if constexpr (SPLIT) p[lo] = __uint_as_float(l);
}

// Four 8-row × 4-word tiles of 32-bit values: lanes 8i .. 8i+7 give the rows of tile i (16-byte
// aligned), lane 4g + t receives word t of row g of each.
__device__ __forceinline__ void ldmatrix_words(uint32_t (&r)[4], const float* row) {
  ldmatrix_x4(r, reinterpret_cast<const uint16_t*>(row));
}

// A operand, element (m, k) at p[m·ld + k]: rows 16-byte aligned, ld ≡ 4 (mod 8) words keeps the
// eight rows of a tile on distinct banks.
struct RowMajorA {
  const float* p;
  int ld;
};
// A row-major A operand stored already split (store_split): hi parts at p[m·ld + k], lo parts lo
// further.
struct SplitRowMajorA {
  const float* p;
  int ld, lo;
};
// A operand, element (m, k) at p[m·am + k·ak], read element by element (a transposed operand).
struct StridedA {
  const float* p;
  int am, ak;
};

template <bool SPLIT>
__device__ __forceinline__ void a_fragment(const RowMajorA& a, int m0, int k0, uint32_t (&hi)[4],
                                           uint32_t (&lo)[4]) {
  const int lane = threadIdx.x & 31;
  ldmatrix_words(hi, a.p + (m0 + (lane & 15)) * a.ld + k0 + 4 * (lane >> 4));
#pragma unroll
  for (int i = 0; i < 4; ++i) split_tf32<SPLIT>(__uint_as_float(hi[i]), hi[i], lo[i]);
}
template <bool SPLIT>
__device__ __forceinline__ void a_fragment(const SplitRowMajorA& a, int m0, int k0, uint32_t (&hi)[4],
                                           uint32_t (&lo)[4]) {
  const int lane = threadIdx.x & 31;
  const float* row = a.p + (m0 + (lane & 15)) * a.ld + k0 + 4 * (lane >> 4);
  ldmatrix_words(hi, row);
  if constexpr (SPLIT) ldmatrix_words(lo, row + a.lo);
}
template <bool SPLIT>
__device__ __forceinline__ void a_fragment(const StridedA& a, int m0, int k0, uint32_t (&hi)[4],
                                           uint32_t (&lo)[4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const float* p = a.p + (m0 + g) * a.am + (k0 + t) * a.ak;
  split_tf32<SPLIT>(p[0], hi[0], lo[0]);
  split_tf32<SPLIT>(p[8 * a.am], hi[1], lo[1]);
  split_tf32<SPLIT>(p[4 * a.ak], hi[2], lo[2]);
  split_tf32<SPLIT>(p[8 * a.am + 4 * a.ak], hi[3], lo[3]);
}

// acc[MT][NT] += A · B for one warp, over k in [0, k_end) (a multiple of 8), rows m < 16·MT of A.
// B is stored n-major and split (store_split): element (k, n) at b[n·ldb + k], its lo part at b_lo
// further, rows 16-byte aligned, ldb ≡ 4 (mod 8); NT even. The warps of a block usually share B, and
// splitting it once saves each of them the same instructions; A is split as it is read.
// Accumulator tile layout of m16n8: [0], [1] at row group, columns 2·(lane%4) + 0, 1; [2], [3] at row
// group + 8.
template <int MT, int NT, bool SPLIT, class AOperand>
__device__ __forceinline__ void warp_mma(float (&acc)[MT][NT][4], const AOperand& a, const float* b, int ldb,
                                         int b_lo, int k_end) {
  static_assert(NT % 2 == 0, "B fragments are loaded two n-tiles at a time");
  const int lane = threadIdx.x & 31;
  // This lane's row of the B tiles: n-tile pair, rows (lane & 7) + 8 (lane >> 4), k half (lane >> 3) & 1.
  const float* b_row = b + ((lane & 7) + 8 * (lane >> 4)) * ldb + 4 * ((lane >> 3) & 1);
#pragma unroll 4
  for (int k0 = 0; k0 < k_end; k0 += 8) {
    uint32_t ah[MT][4], al[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) a_fragment<SPLIT>(a, mt * 16, k0, ah[mt], al[mt]);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bh[4], bl[4] = {};
      ldmatrix_words(bh, b_row + np * 16 * ldb + k0);
      if constexpr (SPLIT) ldmatrix_words(bl, b_row + np * 16 * ldb + k0 + b_lo);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int nt = 2 * np + h;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (SPLIT) {  // the small cross terms first
            mma_tf32(acc[mt][nt], al[mt], bh[2 * h], bh[2 * h + 1]);
            mma_tf32(acc[mt][nt], ah[mt], bl[2 * h], bl[2 * h + 1]);
          }
          mma_tf32(acc[mt][nt], ah[mt], bh[2 * h], bh[2 * h + 1]);
        }
      }
    }
  }
}

}  // namespace qwick::cuda
