// Prefill attention on warpgroup products (sm_90a wgmma), the default variant of attention_prefill
// for head_dim 64, 128 and 256 (contract in attention_cuda.h).
//
// Block: 64 chunk rows of G query heads that share a kv head (G = 2 when the group size is even, else
// 1), a warpgroup per head; the key/value tiles are loaded once for both. Heaviest row blocks (the
// chunk's last rows, which see the most keys) are started first.
// Shared memory, bf16 in 128-byte swizzled rows (warpgroup_mma.cuh), 64 rows per tile, each 64-wide
// slab of head_dim a 64 × 128-byte block: Q of each head, then two stages of (K, V) 64-key tiles;
// the next tile's K and this tile's V are copied (cp.async) while the tile is computed, the buffers
// handed between copies and products by mbarriers.
// Per key tile and warpgroup:
//   S = Q·Kᵀ        m64n64k16, both operands from shared memory (Q and K K-major), f32 in registers
//   mask            only in tiles that reach past the block's first query position
//   online softmax  base-2 exponent with the scale folded in; row max/sum over the 4 lanes of a row;
//                   O rescaled only when some row of the warp has a new maximum
//   O += P·V        P from the S registers (rounded to bf16) as the register A operand, V as an
//                   MN-major B operand straight from its row-major tile: m64n{HD}k16; issued with
//                   the next tile's S = Q·Kᵀ, so the softmax of one overlaps the other's product
// The sigmoid output gate is applied at the end; rows past the chunk load zeros and are not written.
#include "kernels/attention/attention_prefill_out.cuh"
#include "kernels/attention/attention_prefill_wgmma.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/tensor_core.cuh"
#include "kernels/cuda/warpgroup_mma.cuh"

#include <type_traits>

namespace qwick::cuda {
namespace {

constexpr int kRows = 64, kKeys = 64;

template <int HD, int G>
struct WgLayout {
  static constexpr uint32_t kSlabBytes = 64 * 128;              // 64 rows × 64 bf16
  static constexpr uint32_t kTileBytes = HD / 64 * kSlabBytes;  // 64 rows × HD
  static constexpr uint32_t kQBytes = G * kTileBytes;
  static constexpr uint32_t kStageBytes = 2 * kTileBytes;             // K, then V
  static constexpr size_t kBytes = kQBytes + 2 * kStageBytes + 1024;  // + alignment slack
};

// A thread's share of copying 64 rows of head_dim HD (row r at `rows` + r·stride) into a swizzled
// tile: chunk column c of rows r0 + k·kStep. Its shared and source offsets are fixed, so in a full
// tile each copy is one instruction with immediate offsets.
template <int HD, int kThreads>
struct TileCopy {
  static constexpr int kChunks = HD / 8, kStep = kThreads / kChunks, kPer = kRows / kStep;
  static_assert(kStep % 4 == 0, "rows r0 + k·kStep then share the swizzle of r0 or r0 + 4");
  int64_t stride;
  int r0;
  uint32_t dst[2];  // shared offset of the chunk in row r0 + k·kStep: k even, k odd
  int64_t src;      // element offset of the chunk in row r0

  __device__ explicit TileCopy(int64_t row_stride) : stride(row_stride) {
    const int c = threadIdx.x % kChunks;
    r0 = threadIdx.x / kChunks;
    const uint32_t d0 = (c >> 3) * 8192 + r0 * 128, sw = (c & 7) ^ (r0 & 7);
    dst[0] = d0 + (sw << 4);
    dst[1] = d0 + ((sw ^ (kStep & 4)) << 4);
    src = r0 * stride + c * 8;
  }
  // Rows from `valid` on are zero-filled.
  __device__ __forceinline__ void operator()(uint32_t tile, const uint16_t* rows, int valid) const {
    const uint16_t* from = rows + src;
    const bool full = valid >= kRows;
#pragma unroll
    for (int k = 0; k < kPer; ++k)
      cp_async16_shared(tile + dst[k & 1] + k * kStep * 128, from + k * kStep * stride,
                        full || r0 + k * kStep < valid);
  }
};

// 2^x on the MUFU unit alone (exp2f adds a range fix for results below 2^-126; here those are 0).
__device__ __forceinline__ float exp2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

template <int HD>
__device__ __forceinline__ void pv_product(float (&o)[HD / 2], const uint32_t (&p)[4], uint64_t desc) {
  if constexpr (HD == 256)
    wgmma_m64n256k16<true>(o, p, desc);
  else if constexpr (HD == 128)
    wgmma_m64n128k16<HD / 2, true>(o, p, desc);
  else
    wgmma_m64n64k16<HD / 2, true>(o, p, desc);
}

template <int HD, int G>
__global__ void __launch_bounds__(128 * G, 1) prefill_wgmma_kernel(AttentionPrefillArgs a) {
  wait_and_let_next_start();
  using L = WgLayout<HD, G>;
  constexpr int kThreads = 128 * G;
  extern __shared__ uint8_t smem_unaligned[];
  const uint32_t unaligned = smem_addr(smem_unaligned);
  const uint32_t q_tiles = unaligned + ((1024 - (unaligned & 1023)) & 1023);
  const uint32_t stages = q_tiles + L::kQBytes;

  const int h0 = blockIdx.x * G, kvh = h0 / (a.n_heads / a.n_kv_heads);
  const int t0 = static_cast<int>(gridDim.y - 1 - blockIdx.y) * kRows;
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3, h = h0 + wg;
  const int n = static_cast<int>(a.n), pos0 = static_cast<int>(a.pos0);
  const int kv_end = min(pos0 + n, pos0 + t0 + kRows);
  const int n_tiles = (kv_end + kKeys - 1) / kKeys;
  const uint16_t* kc = a.k_cache + static_cast<int64_t>(kvh) * a.capacity * HD;
  const uint16_t* vc = a.v_cache + static_cast<int64_t>(kvh) * a.capacity * HD;
  auto k_tile = [&](int tile) { return stages + (tile & 1) * L::kStageBytes; };
  auto v_tile = [&](int tile) { return stages + (tile & 1) * L::kStageBytes + L::kTileBytes; };
  {
    const TileCopy<HD, kThreads> q_copy(static_cast<int64_t>(a.n_heads) * HD);
#pragma unroll
    for (int hh = 0; hh < G; ++hh)
      q_copy(q_tiles + hh * L::kTileBytes, a.q + (static_cast<int64_t>(t0) * a.n_heads + h0 + hh) * HD,
             n - t0);
  }
  const TileCopy<HD, kThreads> kv_copy(HD);
  auto copy_keys = [&](const uint16_t* cache, uint32_t dst, int tile) {
    const int kv0 = tile * kKeys;
    kv_copy(dst, cache + static_cast<int64_t>(kv0) * HD, kv_end - kv0);
  };
  // Barriers, a pair of each per buffer: K / V of a tile landed (every thread's copies: cp.async
  // arrivals), K / V of a tile read by both warpgroups' products (an arrival per warp).
  __shared__ uint64_t bars[8];
  const uint32_t k_full = smem_addr(bars), v_full = k_full + 16, k_free = k_full + 32, v_free = k_full + 48;
  if (threadIdx.x == 0) {
    for (int b = 0; b < 4; ++b) mbarrier_init(k_full + 8 * b, kThreads);
    for (int b = 4; b < 8; ++b) mbarrier_init(k_full + 8 * b, kThreads / 32);
  }
  __syncthreads();
  copy_keys(kc, k_tile(0), 0);
  cp_async_mbarrier_arrive(k_full);

  // Each thread holds rows g and g + 8 of its warp's 16: accumulator columns 8j + 2t, 8j + 2t + 1.
  const int qpos0 = pos0 + t0 + warp * 16 + g, qpos1 = qpos0 + 8;
  const float scale2 = a.scale * 1.4426950408889634f;  // exp(x·scale) = 2^(x·scale2)
  const uint64_t q_desc = wgmma_desc(q_tiles + wg * L::kTileBytes);
  float o[HD / 2];
#pragma unroll
  for (int i = 0; i < HD / 2; ++i) o[i] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // m in units of scale2
  uint32_t p[4][4];                                            // P of the previous tile, bf16 pairs
  auto pv = [&](int tile) {
    const uint64_t v_desc = wgmma_desc(v_tile(tile), L::kSlabBytes);
#pragma unroll
    for (int ks16 = 0; ks16 < 4; ++ks16) pv_product<HD>(o, p[ks16], wgmma_desc_advance(v_desc, ks16 * 2048));
    wgmma_commit();
  };

  // Tile j's S = Q·Kᵀ runs with the previous tile's O += P·V, and its softmax overlaps the latter.
  // Copies in iteration j: K of tile j + 1 (over tile j - 1's, once both warpgroups' S of it is done)
  // and V of tile j (over tile j - 2's, once its P·V is done). A tile's uses of a buffer count phases
  // (tile i is use i / 2 of buffer i % 2). No block-wide barrier: a warpgroup runs up to a tile ahead
  // of the other, so their softmax and products interleave on the tensor cores.
  // `first` (tile 0, no P·V before it) is a compile-time flag: a branch around the P·V would leave
  // ptxas moving accumulators between the products and fencing them again.
  auto phase = [](int tile) { return static_cast<uint32_t>(tile >> 1) & 1; };
  auto iteration = [&](int j, auto first) {
    if (j + 1 < n_tiles) {
      if (j >= 1) mbarrier_wait(k_free + 8 * ((j + 1) & 1), phase(j - 1));
      copy_keys(kc, k_tile(j + 1), j + 1);
      cp_async_mbarrier_arrive(k_full + 8 * ((j + 1) & 1));
    }
    if (j >= 2) mbarrier_wait(v_free + 8 * (j & 1), phase(j - 2));
    copy_keys(vc, v_tile(j), j);
    cp_async_mbarrier_arrive(v_full + 8 * (j & 1));
    mbarrier_wait(k_full + 8 * (j & 1), phase(j));
    if constexpr (!first) mbarrier_wait(v_full + 8 * ((j - 1) & 1), phase(j - 1));
    fence_proxy_async();  // the copies seen through the barriers, before the tensor cores read them

    float s[32];
    const uint64_t k_desc = wgmma_desc(k_tile(j));
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      const uint32_t off = (kk >> 2) * L::kSlabBytes + (kk & 3) * 32;
      wgmma_m64n64k16_ss(s, wgmma_desc_advance(q_desc, off), wgmma_desc_advance(k_desc, off), kk > 0);
    }
    wgmma_commit();
    if constexpr (first) {
      wgmma_wait<0>();
    } else {
      pv(j - 1);
      wgmma_wait<1>();
    }
    wgmma_fence_operands(s);
    if (lane == 0) mbarrier_arrive(k_free + 8 * (j & 1));

    const int kv0 = j * kKeys;
    if (kv0 + kKeys - 1 > pos0 + t0) {  // keys past some query row of the block: causal mask
#pragma unroll
      for (int jb = 0; jb < 8; ++jb)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int kp = kv0 + 8 * jb + 2 * t + e;
          if (kp > qpos0) s[4 * jb + e] = -INFINITY;
          if (kp > qpos1) s[4 * jb + 2 + e] = -INFINITY;
        }
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int jb = 0; jb < 8; ++jb) {
      mx0 = fmaxf(mx0, fmaxf(s[4 * jb], s[4 * jb + 1]));
      mx1 = fmaxf(mx1, fmaxf(s[4 * jb + 2], s[4 * jb + 3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, off));
    }
    const float new0 = fmaxf(m0, mx0 * scale2), new1 = fmaxf(m1, mx1 * scale2);
    // A row with every key masked so far keeps max -inf; exponentiate against 0 then (all p = 0).
    const float base0 = new0 == -INFINITY ? 0.0f : new0, base1 = new1 == -INFINITY ? 0.0f : new1;
    const float c0 = exp2_approx(m0 - base0), c1 = exp2_approx(m1 - base1);
    m0 = new0, m1 = new1;
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int jb = 0; jb < 8; ++jb)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[4 * jb + e] = exp2_approx(fmaf(s[4 * jb + e], scale2, -base0));
        s[4 * jb + 2 + e] = exp2_approx(fmaf(s[4 * jb + 2 + e], scale2, -base1));
        sum0 += s[4 * jb + e];
        sum1 += s[4 * jb + 2 + e];
      }
    l0 = l0 * c0 + sum0;
    l1 = l1 * c1 + sum1;

    wgmma_wait<0>();  // the previous tile's P·V: O, P and its V buffer are free
    wgmma_fence_operands(o);
#pragma unroll
    for (int ks16 = 0; ks16 < 4; ++ks16) wgmma_fence_operands(p[ks16]);
    if (!first && lane == 0) mbarrier_arrive(v_free + 8 * ((j - 1) & 1));
    if (__any_sync(kFullMask, c0 != 1.0f || c1 != 1.0f)) {
#pragma unroll
      for (int jb = 0; jb < HD / 8; ++jb)
        o[4 * jb] *= c0, o[4 * jb + 1] *= c0, o[4 * jb + 2] *= c1, o[4 * jb + 3] *= c1;
    }
#pragma unroll
    for (int ks16 = 0; ks16 < 4; ++ks16)
#pragma unroll
      for (int r = 0; r < 4; ++r) p[ks16][r] = pack_bf16x2(s[8 * ks16 + 2 * r], s[8 * ks16 + 2 * r + 1]);
  };
  iteration(0, std::true_type{});
  for (int j = 1; j < n_tiles; ++j) iteration(j, std::false_type{});
  mbarrier_wait(v_full + 8 * ((n_tiles - 1) & 1), phase(n_tiles - 1));
  fence_proxy_async();
  wgmma_fence();
  pv(n_tiles - 1);
  wgmma_wait<0>();
  wgmma_fence_operands(o);

  store_prefill_rows<HD>(a, h, t0 + warp * 16, o, l0, l1);
}

template <int HD, int G>
void launch(const AttentionPrefillArgs& a, cudaStream_t stream) {
  using L = WgLayout<HD, G>;
  static bool configured = false;
  if (!configured) {
    check(cudaFuncSetAttribute(prefill_wgmma_kernel<HD, G>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(L::kBytes)),
          "attention_prefill (wgmma): shared memory limit");
    configured = true;
  }
  const dim3 grid(static_cast<unsigned>(a.n_heads / G), blocks_for(a.n, kRows));
  launch_kernel(prefill_wgmma_kernel<HD, G>, grid, dim3(128 * G), L::kBytes, stream, a.overlap,
                "attention_prefill (wgmma)", a);
}

template <int HD>
void launch_heads(const AttentionPrefillArgs& a, cudaStream_t stream) {
  if ((a.n_heads / a.n_kv_heads) % 2 == 0)
    launch<HD, 2>(a, stream);
  else
    launch<HD, 1>(a, stream);
}

}  // namespace

bool attention_prefill_wgmma(const AttentionPrefillArgs& a, cudaStream_t stream) {
  switch (a.head_dim) {
    case 64:
      launch_heads<64>(a, stream);
      return true;
    case 128:
      launch_heads<128>(a, stream);
      return true;
    case 256:
      launch_heads<256>(a, stream);
      return true;
    default:
      return false;
  }
}

}  // namespace qwick::cuda
