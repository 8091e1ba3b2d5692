// q/k RMSNorm + partial RoPE + KV-cache append on the GPU (contract in attention_cuda.h).
//
// A warp per (token, head), query heads then kv heads. Decode has a single token: a one-warp block
// per head, so they spread over the multiprocessors (a block per token ran them 3 deep through one
// SM). Prefill: blocks of kPrefillWarps heads (one-warp blocks held half the warps an SM can, and
// moved 1.3 TB/s at 4K rows).
// Each lane loads its head_dim/32 values at once (a kv head's v values with them, the norm's weights
// and the rotary frequencies before the wait); the head is then staged in shared memory so the
// rotation can pair dims (i, i + rotary_dim/2) whatever the head size. Angles are pos · inv_freq in
// f32 and cosf/sinf, as the CPU's RopeTable computes them. A q8 cache's rows are coded as the CPU's
// KvCache codes them (kv_q8.h), each row's scale from the warp's maximum.
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/kv_q8.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"

namespace qwick::cuda {
namespace {

constexpr int kMaxHeadDim = 256, kPrefillWarps = 4;

__global__ void __launch_bounds__(32 * kPrefillWarps) prep_kernel(AttentionPrepArgs a) {
  __shared__ float heads_x[kPrefillWarps][kMaxHeadDim];
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int head = static_cast<int>(blockIdx.y) * (blockDim.x >> 5) + warp;
  if (head >= a.n_heads + a.n_kv_heads) return;  // (only warp-wide barriers below)
  float* const x = heads_x[warp];
  const int hd = a.head_dim, half = a.rotary_dim / 2;
  const bool is_q = head < a.n_heads;
  const int kvh = head - a.n_heads;
  // The norm's weights and RoPE's frequencies are constants: requested before the wait, so after it a
  // warp makes one round of loads (its head, and a kv head's v row), not two or three in a row.
  const float* w = is_q ? a.q_norm : a.k_norm;
  float g[kMaxHeadDim / 32], freq[kMaxHeadDim / 64];
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) g[i] = lane + 32 * i < hd ? w[lane + 32 * i] : 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxHeadDim / 64; ++j)
    freq[j] = lane + 32 * j < half ? a.inv_freq[lane + 32 * j] : 0.0f;
  let_next_kernel_start();
  wait_for_previous_kernel();  // the projections (and the decode position) come from earlier kernels
  const int64_t pos = a.pos0 + t + (a.d_pos ? *a.d_pos : 0);
  const float* src =
      is_q ? a.qg + t * a.ld_qg + head * a.q_stride : a.k + t * a.ld_kv + static_cast<int64_t>(kvh) * hd;
  const float* vsrc = a.v + t * a.ld_kv + static_cast<int64_t>(kvh) * hd;
  float v[kMaxHeadDim / 32], vv[kMaxHeadDim / 32];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) {
    const int d = lane + 32 * i;
    v[i] = d < hd ? src[d] : 0.0f;
    vv[i] = !is_q && d < hd ? vsrc[d] : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) ss += v[i] * v[i];
  const float inv = 1.0f / sqrtf(warp_sum(ss) / static_cast<float>(hd) + a.eps);
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) x[d] = v[i] * inv * g[i];
  }
  __syncwarp();
#pragma unroll
  for (int j = 0; j < kMaxHeadDim / 64; ++j) {
    const int i = lane + 32 * j;
    if (i >= half) break;
    const float angle = static_cast<float>(pos) * freq[j];
    const float c = cosf(angle), s = sinf(angle);
    const float x1 = x[i], x2 = x[i + half];
    x[i] = x1 * c - x2 * s;
    x[i + half] = x2 * c + x1 * s;
  }
  __syncwarp();
  if (is_q) {
    const int64_t o = (t * a.n_heads + head) * hd;
    for (int d = lane; d < hd; d += 32) {
      if (a.q_f32)
        a.q_f32[o + d] = x[d];
      else
        a.q_bf16[o + d] = f32_to_bf16(x[d]);
    }
  } else {
    const int64_t row = static_cast<int64_t>(kvh) * a.capacity + pos, o = row * hd;
    const bool q8 = a.k_scale != nullptr;
    float ks = 0.0f, vs = 0.0f;  // q8: each row's scale from its largest magnitude
    if (q8) {
#pragma unroll
      for (int i = 0; i < kMaxHeadDim / 32; ++i) {
        const int d = lane + 32 * i;
        if (d >= hd) break;
        ks = fmaxf(ks, fabsf(x[d])), vs = fmaxf(vs, fabsf(vv[i]));
      }
      ks = kv_q8_scale(warp_max(ks)), vs = kv_q8_scale(warp_max(vs));
      if (lane == 0) a.k_scale[row] = ks, a.v_scale[row] = vs;
    }
#pragma unroll
    for (int i = 0; i < kMaxHeadDim / 32; ++i) {
      const int d = lane + 32 * i;
      if (d >= hd) break;
      if (q8) {
        static_cast<uint8_t*>(a.k_cache)[o + d] = kv_q8_code(x[d], ks);
        static_cast<uint8_t*>(a.v_cache)[o + d] = kv_q8_code(vv[i], vs);
      } else {
        static_cast<uint16_t*>(a.k_cache)[o + d] = f32_to_bf16(x[d]);
        static_cast<uint16_t*>(a.v_cache)[o + d] = f32_to_bf16(vv[i]);
      }
    }
  }
}

}  // namespace

void attention_prep(const AttentionPrepArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  if (a.head_dim > kMaxHeadDim || a.head_dim % 32 != 0)
    check(cudaErrorInvalidValue, "attention_prep: head_dim must be a multiple of 32 up to 256");
  const int warps = a.n > 1 ? kPrefillWarps : 1;
  const dim3 grid(static_cast<unsigned>(a.n), blocks_for(a.n_heads + a.n_kv_heads, warps));
  launch_kernel(prep_kernel, grid, dim3(32 * warps), 0, stream, a.overlap, "attention_prep", a);
}

}  // namespace qwick::cuda
