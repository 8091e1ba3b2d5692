// The epilogue of the 128-output wgmma GEMMs (gemm_wgmma_cuda.cu, gemm_tma_cuda.cu): a tile's
// accumulators, 128 W rows (outputs) × BT slots held by two warpgroups in wgmma's layout
// (warpgroup_mma.cuh), staged through shared memory and written as coalesced pieces of slot rows.
// The two warpgroups are threads 0..255 of the block; other threads (a producer warpgroup) take no
// part, so the epilogue synchronizes on a named barrier of its 256 threads, not on __syncthreads.
#pragma once

#include "kernels/matmul_cuda/gemm_tile.cuh"

namespace qwick::cuda {

constexpr int kBW = 128;  // W rows (outputs) per block, 64 per warpgroup
constexpr int kEpilogueThreads = 256;

// Barrier 1 of the block, for the epilogue's 256 threads (barrier 0 is __syncthreads').
__device__ __forceinline__ void sync_epilogue() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kEpilogueThreads) : "memory");
}

// Stages the f32 outputs of the tile through shared memory (rows of kLdY floats: accumulator rows 2
// slots apart land 8 banks apart) and writes each slot's 128 outputs as one coalesced row of float4.
constexpr int kLdY = kBW + 4;
template <int BT>
__device__ __forceinline__ void store_tile(const GemmArgs& a, const GemmBlock& blk,
                                           const float (&acc)[BT / 2], bool has_rows, int r0, int t,
                                           uint8_t* smem) {
  float* const tile = reinterpret_cast<float*>(smem);
  if (has_rows)
#pragma unroll
    for (int j = 0; j < BT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        tile[(8 * j + 2 * t + e) * kLdY + r0] = acc[4 * j + e];
        tile[(8 * j + 2 * t + e) * kLdY + r0 + 8] = acc[4 * j + 2 + e];
      }
  sync_epilogue();
  const int c = 4 * (threadIdx.x & 31);  // this thread's four block columns
  const bool vec =
      blk.r0 + c + 3 < blk.m.rows && blk.n0 + c + 3 < a.N && a.ldy % 4 == 0 &&
      (a.y16 ? reinterpret_cast<uintptr_t>(a.y16) % 8 : reinterpret_cast<uintptr_t>(a.y) % 16) == 0;
  for (int s = threadIdx.x >> 5; s < BT && blk.s0 + s < blk.s1; s += kEpilogueThreads / 32) {
    const int64_t slot = blk.s0 + s;
    const float4 v = *reinterpret_cast<const float4*>(tile + s * kLdY + c);
    if (!vec) {
      store_pair(a, blk, slot, c, v.x, v.y);
      store_pair(a, blk, slot, c + 2, v.z, v.w);
      continue;
    }
    if (a.y16) {
      *reinterpret_cast<uint2*>(a.y16 + slot * a.ldy + blk.n0 + c) =
          make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
      continue;
    }
    float4* y = reinterpret_cast<float4*>(a.y + slot * a.ldy + blk.n0 + c);
    float4 o = v;
    if (a.accumulate) {
      const float4 p = *y;
      o = make_float4(p.x + v.x, p.y + v.y, p.z + v.z, p.w + v.w);
    }
    *y = o;
  }
}

// The SwiGLU epilogue: silu(gate) · up of output wg · 32 + 8 · warp + g for each accumulator column,
// staged as bf16 rows of kLdAct (rows 2 slots apart 8 banks apart) and written as 16-byte pieces.
constexpr int kLdAct = kBW / 2 + 8;
template <int BT>
__device__ __forceinline__ void store_act(const GemmArgs& a, const GemmBlock& blk, const float (&acc)[BT / 2],
                                          bool has_rows, int o, int t, uint8_t* smem) {
  uint16_t* const tile = reinterpret_cast<uint16_t*>(smem);
  if (has_rows)
#pragma unroll
    for (int j = 0; j < BT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        tile[(8 * j + 2 * t + e) * kLdAct + o] = f32_to_bf16(siluf_(acc[4 * j + e]) * acc[4 * j + 2 + e]);
  sync_epilogue();
  const int c = 8 * (threadIdx.x & 7);  // eight outputs; the block's 64 all exist (parts of 64k rows)
  const bool vec = a.ld_act % 8 == 0 && blk.r0 % 8 == 0 && reinterpret_cast<uintptr_t>(a.act) % 16 == 0;
  for (int s = threadIdx.x >> 3; s < BT && blk.s0 + s < blk.s1; s += kEpilogueThreads / 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(tile + s * kLdAct + c);
    uint16_t* out = a.act + (blk.s0 + s) * a.ld_act + blk.r0 + c;
    if (vec) {
      *reinterpret_cast<uint4*>(out) = v;
    } else {
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) out[e] = static_cast<uint16_t>(w[e >> 1] >> (16 * (e & 1)));
    }
  }
}

}  // namespace qwick::cuda
