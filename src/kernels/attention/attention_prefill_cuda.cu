// Prefill attention on the tensor cores (contract in attention_cuda.h), flash-attention 2 layout on
// mma.sync, for head_dim 32; the other head sizes run on warpgroup products
// (attention_prefill_wgmma_cuda.cu).
//
// Block (query head h, 64 rows of the chunk), 4 warps of 16 rows. Shared memory, bf16, rows padded
// by 8 elements: Qs [64][HD], then Ks, Vs [32 keys][HD] twice: tile i + 1 streams in through cp.async
// while tile i is computed (the same shared memory as one 64-key tile, so the same two blocks per SM);
// V as stored, the P·V operand read with ldmatrix.trans, which hands each lane its pair of keys along
// a dimension.
// Per key tile:
//   S = Q·Kᵀ        mma.sync m16n8k16, 8 key columns per n-tile, HD/16 k steps
//   mask            key position > query position -> -inf (causality; later keys are masked too)
//   online softmax  row max/sum across the 4 lanes sharing a row (shuffles), rescale O
//   O += P·V        P re-packed from the S accumulators into A fragments (registers only)
// Rows past the chunk load zeros and are not written. The sigmoid output gate is applied at the end.
// Fragment layouts as in kernels/matmul_cuda/gemm_cuda.cu.
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/attention_prefill_out.cuh"
#include "kernels/attention/attention_prefill_wgmma.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/tensor_core.cuh"

namespace qwick::cuda {
namespace {

constexpr int kRows = 64, kThreads = 128;

template <int HD>
struct Smem {
  static constexpr int kKeys = 32, kBuffers = 2;
  static constexpr int kLdQ = HD + 8;
  static constexpr int kKVElems = kKeys * kLdQ;  // one K or V tile
  static constexpr size_t kBytes = sizeof(uint16_t) * (kRows * kLdQ + kBuffers * 2 * kKVElems);
};

template <int HD>
__global__ void __launch_bounds__(kThreads) prefill_kernel(AttentionPrefillArgs a) {
  wait_and_let_next_start();
  using L = Smem<HD>;
  constexpr int kLdQ = L::kLdQ, kKeys = L::kKeys;
  extern __shared__ uint4 smem4[];
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem4);
  // Buffer b: K at Qs + kRows·kLdQ + 2b·kKVElems, V right after it.
  uint16_t* const kv_base = Qs + kRows * kLdQ;

  const int h = blockIdx.x, kvh = h / (a.n_heads / a.n_kv_heads);
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row

  for (int i = threadIdx.x; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const int64_t t = t0 + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (t < a.n) v = *reinterpret_cast<const uint4*>(a.q + (t * a.n_heads + h) * HD + c * 8);
    *reinterpret_cast<uint4*>(Qs + r * kLdQ + c * 8) = v;
  }

  // Each thread owns rows g and g + 8 of its warp's 16.
  const int64_t qpos0 = a.pos0 + t0 + warp * 16 + g, qpos1 = qpos0 + 8;
  float o[HD / 8][4] = {};
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  const int64_t kv_end = min(a.pos0 + a.n, a.pos0 + t0 + kRows);
  const uint16_t* kc = a.k_cache + static_cast<int64_t>(kvh) * a.capacity * HD;
  const uint16_t* vc = a.v_cache + static_cast<int64_t>(kvh) * a.capacity * HD;

  // Copies of the tile at kv0 into buffer b, zero-filled past kv_end.
  auto issue = [&](int64_t kv0, int b) {
    uint16_t* ks = kv_base + 2 * b * L::kKVElems;
    for (int i = threadIdx.x; i < kKeys * kChunks; i += kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      const int64_t p = kv0 + r;
      const bool valid = p < kv_end;
      cp_async16(ks + r * kLdQ + c * 8, kc + (valid ? p : 0) * HD + c * 8, valid);
      cp_async16(ks + L::kKVElems + r * kLdQ + c * 8, vc + (valid ? p : 0) * HD + c * 8, valid);
    }
    cp_async_commit();
  };
  issue(0, 0);

  int tile = 0;
  for (int64_t kv0 = 0; kv0 < kv_end; kv0 += kKeys, ++tile) {
    const int buf = tile & 1;
    uint16_t* Ks = kv_base + 2 * buf * L::kKVElems;
    uint16_t* Vt = Ks + L::kKVElems;
    // The other buffer was consumed in the last iteration (barrier at its end): refill it.
    if (kv0 + kKeys < kv_end)
      issue(kv0 + kKeys, buf ^ 1);
    else
      cp_async_commit();  // keeps one group per tile
    cp_async_wait<1>();
    __syncthreads();  // this tile has landed for everyone (and, first time round, Qs is written)

    float s[kKeys / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < HD; kk += 16) {
      const uint16_t* qb = Qs + (warp * 16 + g) * kLdQ + kk + 2 * tq;
      const uint32_t a0 = *reinterpret_cast<const uint32_t*>(qb);
      const uint32_t a1 = *reinterpret_cast<const uint32_t*>(qb + 8 * kLdQ);
      const uint32_t a2 = *reinterpret_cast<const uint32_t*>(qb + 8);
      const uint32_t a3 = *reinterpret_cast<const uint32_t*>(qb + 8 * kLdQ + 8);
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt) {
        const uint16_t* kb = Ks + (nt * 8 + g) * kLdQ + kk + 2 * tq;
        mma_bf16(s[nt], a0, a1, a2, a3, *reinterpret_cast<const uint32_t*>(kb),
                 *reinterpret_cast<const uint32_t*>(kb + 8));
      }
    }

    // Scale, mask, row maxima.
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t kp = kv0 + nt * 8 + 2 * tq + e;
        s[nt][e] = kp <= qpos0 ? s[nt][e] * a.scale : -INFINITY;
        s[nt][2 + e] = kp <= qpos1 ? s[nt][2 + e] * a.scale : -INFINITY;
        mx0 = fmaxf(mx0, s[nt][e]);
        mx1 = fmaxf(mx1, s[nt][2 + e]);
      }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, off));
    }
    // A row with every key masked so far keeps max -inf; exponentiate against 0 then (all p = 0).
    const float base0 = mx0 == -INFINITY ? 0.0f : mx0, base1 = mx1 == -INFINITY ? 0.0f : mx1;
    const float c0 = expf(m0 - base0), c1 = expf(m1 - base1);
    m0 = mx0, m1 = mx1;
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[nt][e] = expf(s[nt][e] - base0);
        s[nt][2 + e] = expf(s[nt][2 + e] - base1);
        sum0 += s[nt][e];
        sum1 += s[nt][2 + e];
      }
    l0 = l0 * c0 + sum0;
    l1 = l1 * c1 + sum1;
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) o[nt][0] *= c0, o[nt][1] *= c0, o[nt][2] *= c1, o[nt][3] *= c1;

#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) {
      const uint32_t p0 = pack_bf16x2(s[2 * ks][0], s[2 * ks][1]);
      const uint32_t p1 = pack_bf16x2(s[2 * ks][2], s[2 * ks][3]);
      const uint32_t p2 = pack_bf16x2(s[2 * ks + 1][0], s[2 * ks + 1][1]);
      const uint32_t p3 = pack_bf16x2(s[2 * ks + 1][2], s[2 * ks + 1][3]);
      // Lanes 0-7 / 8-15 / 16-23 / 24-31 address keys +0..7 / +8..15 / +0..7 / +8..15 of
      // dimensions nt·8 / nt·8 / nt·8 + 8 / nt·8 + 8: b0, b1 of n-tile nt, then of nt + 1.
      const uint16_t* vrow = Vt + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLdQ + (lane >> 4) * 8;
#pragma unroll
      for (int nt = 0; nt < HD / 8; nt += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vrow + nt * 8);
        mma_bf16(o[nt], p0, p1, p2, p3, b[0], b[1]);
        mma_bf16(o[nt + 1], p0, p1, p2, p3, b[2], b[3]);
      }
    }
    __syncthreads();  // done with this buffer before it is refilled
  }

  store_prefill_rows<HD>(a, h, t0 + warp * 16, reinterpret_cast<const float(&)[HD / 2]>(o), l0, l1);
}

template <int HD>
void launch(const AttentionPrefillArgs& a, cudaStream_t stream) {
  static bool configured = false;
  if (!configured) {
    check(cudaFuncSetAttribute(prefill_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(Smem<HD>::kBytes)),
          "attention_prefill: shared memory limit");
    configured = true;
  }
  const dim3 grid(static_cast<unsigned>(a.n_heads), blocks_for(a.n, kRows));
  launch_kernel(prefill_kernel<HD>, grid, dim3(kThreads), Smem<HD>::kBytes, stream, a.overlap,
                "attention_prefill", a);
}

}  // namespace

void attention_prefill(const AttentionPrefillArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  if (attention_prefill_wgmma(a, stream)) return;
  if (a.head_dim != 32)
    check(cudaErrorInvalidValue, "attention_prefill: head_dim must be 32, 64, 128 or 256");
  launch<32>(a, stream);
}

}  // namespace qwick::cuda
