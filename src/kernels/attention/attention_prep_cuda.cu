// q/k RMSNorm + partial RoPE + KV-cache append on the GPU (contract in attention_cuda.h).
//
// One block per token, one warp per head (query heads, then kv heads). The head is staged in the
// warp's slice of shared memory so the rotation can pair dims (i, i + rotary_dim/2) whatever the
// head size; angles are pos · inv_freq in f32 and cosf/sinf, as the CPU's RopeTable computes them.
#include "kernels/attention/attention_cuda.h"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_launch.h"

namespace qwick::cuda {
namespace {

constexpr int kWarps = 8;

__global__ void __launch_bounds__(kWarps * 32) prep_kernel(AttentionPrepArgs a) {
  extern __shared__ float stage[];  // [kWarps][head_dim]
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hd = a.head_dim, half = a.rotary_dim / 2;
  const int64_t pos = a.pos0 + t + (a.d_pos ? *a.d_pos : 0);
  float* x = stage + warp * hd;
  for (int head = warp; head < a.n_heads + a.n_kv_heads; head += kWarps) {
    const bool is_q = head < a.n_heads;
    const int kvh = head - a.n_heads;
    const float* src =
        is_q ? a.qg + t * a.ld_qg + head * a.q_stride : a.k + t * a.ld_kv + static_cast<int64_t>(kvh) * hd;
    const float* w = is_q ? a.q_norm : a.k_norm;
    float ss = 0.0f;
    for (int d = lane; d < hd; d += 32) {
      x[d] = src[d];
      ss += x[d] * x[d];
    }
    ss = warp_sum(ss);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(hd) + a.eps);
    for (int d = lane; d < hd; d += 32) x[d] = x[d] * inv * w[d];
    __syncwarp();
    for (int i = lane; i < half; i += 32) {
      const float angle = static_cast<float>(pos) * a.inv_freq[i];
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
      const int64_t o = (static_cast<int64_t>(kvh) * a.capacity + pos) * hd;
      const float* v = a.v + t * a.ld_kv + static_cast<int64_t>(kvh) * hd;
      for (int d = lane; d < hd; d += 32) {
        a.k_cache[o + d] = f32_to_bf16(x[d]);
        a.v_cache[o + d] = f32_to_bf16(v[d]);
      }
    }
    __syncwarp();  // the next head reuses x
  }
}

}  // namespace

void attention_prep(const AttentionPrepArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  const size_t smem = sizeof(float) * kWarps * static_cast<size_t>(a.head_dim);
  prep_kernel<<<static_cast<unsigned>(a.n), kWarps * 32, smem, stream>>>(a);
  check_launch("attention_prep");
}

}  // namespace qwick::cuda
