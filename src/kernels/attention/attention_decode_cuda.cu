// Decode attention (flash-decoding with GQA packing) on the GPU (contract in attention_cuda.h).
//
// Block (kv head j, split s), 8 warps. The split covers positions [s·per, (s+1)·per) of the context
// (per = ceil(len / splits)); warp w takes every 8th position of it. For each position a lane holds
// head_dim/32 consecutive dims of the K and V rows (16-byte loads at head_dim 256) and of the G query
// heads, so one K/V row read serves all G heads:
//   s_g = scale · q_g·k   (warp sum)     online softmax per head: m, l, acc[G][dims] in registers
// The 8 warps then merge into shared memory one after another, and the block writes the split's
// partial (acc, m, l) per head; attention_decode_combine merges the splits and applies the gate.
#include "kernels/attention/attention_cuda.h"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_launch.h"

namespace qwick::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxGroup = 8;  // query heads per kv head

template <int EPL>  // dims per lane = head_dim / 32
__global__ void __launch_bounds__(kWarps * 32) decode_kernel(AttentionDecodeArgs a) {
  constexpr int HD = EPL * 32;
  __shared__ float q_s[kMaxGroup][HD];
  __shared__ float acc_s[kMaxGroup][HD];
  __shared__ float m_s[kMaxGroup], l_s[kMaxGroup];

  const int kvh = blockIdx.x, split = blockIdx.y;
  const int G = a.n_heads / a.n_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t len = static_cast<int64_t>(*a.d_pos) + 1;
  const int64_t per = (len + a.splits - 1) / a.splits;
  const int64_t begin = split * per, end = min(len, begin + per);

  for (int i = threadIdx.x; i < G * HD; i += blockDim.x) q_s[i / HD][i % HD] = a.q[(kvh * G) * HD + i];
  if (threadIdx.x < kMaxGroup) m_s[threadIdx.x] = -INFINITY, l_s[threadIdx.x] = 0.0f;
  for (int i = threadIdx.x; i < kMaxGroup * HD; i += blockDim.x) acc_s[i / HD][i % HD] = 0.0f;
  __syncthreads();

  float q[kMaxGroup][EPL], acc[kMaxGroup][EPL], m[kMaxGroup], l[kMaxGroup];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) q[g][e] = g < G ? q_s[g][lane * EPL + e] : 0.0f, acc[g][e] = 0.0f;
  }
  const uint16_t* kbase = a.k_cache + static_cast<int64_t>(kvh) * a.capacity * HD + lane * EPL;
  const uint16_t* vbase = a.v_cache + static_cast<int64_t>(kvh) * a.capacity * HD + lane * EPL;
  for (int64_t p = begin + warp; p < end; p += kWarps) {
    float kr[EPL], vr[EPL];
#pragma unroll
    for (int e = 0; e < EPL; ++e)
      kr[e] = bf16_to_f32(kbase[p * HD + e]), vr[e] = bf16_to_f32(vbase[p * HD + e]);
    float s[kMaxGroup];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      s[g] = 0.0f;
#pragma unroll
      for (int e = 0; e < EPL; ++e) s[g] += q[g][e] * kr[e];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) s[g] += __shfl_xor_sync(kFullMask, s[g], o);
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= G) break;
      const float sc = s[g] * a.scale;
      const float m_new = fmaxf(m[g], sc);
      const float corr = expf(m[g] - m_new), pw = expf(sc - m_new);
      l[g] = l[g] * corr + pw;
#pragma unroll
      for (int e = 0; e < EPL; ++e) acc[g][e] = acc[g][e] * corr + pw * vr[e];
      m[g] = m_new;
    }
  }
  // Merge the warps one at a time (a warp with no positions has m = -inf and adds nothing).
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g >= G || m[g] == -INFINITY) continue;
        const float m_old = m_s[g];
        const float m_new = fmaxf(m_old, m[g]);
        const float c_old = m_old == -INFINITY ? 0.0f : expf(m_old - m_new), c_new = expf(m[g] - m_new);
#pragma unroll
        for (int e = 0; e < EPL; ++e)
          acc_s[g][lane * EPL + e] = acc_s[g][lane * EPL + e] * c_old + acc[g][e] * c_new;
        __syncwarp();
        if (lane == 0) m_s[g] = m_new, l_s[g] = l_s[g] * c_old + l[g] * c_new;
        __syncwarp();
      }
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < G * (HD + 2); i += blockDim.x) {
    const int g = i / (HD + 2), d = i % (HD + 2);
    const float v = d < HD ? acc_s[g][d] : (d == HD ? m_s[g] : l_s[g]);
    a.partial[((static_cast<int64_t>(kvh) * G + g) * a.splits + split) * (HD + 2) + d] = v;
  }
}

// One block per query head, one thread per dim.
__global__ void combine_kernel(AttentionDecodeArgs a) {
  const int h = blockIdx.x, hd = a.head_dim;
  const float* part = a.partial + static_cast<int64_t>(h) * a.splits * (hd + 2);
  float M = -INFINITY;
  for (int s = 0; s < a.splits; ++s) M = fmaxf(M, part[s * (hd + 2) + hd]);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < a.splits; ++s) {
      const float m = part[s * (hd + 2) + hd];
      if (m == -INFINITY) continue;  // an empty range
      const float c = expf(m - M);
      num += part[s * (hd + 2) + d] * c;
      den += part[s * (hd + 2) + hd + 1] * c;
    }
    float o = num / den;
    if (a.gate) o *= sigmoidf_(a.gate[h * a.gate_stride + d]);
    a.out[static_cast<int64_t>(h) * hd + d] = o;
  }
}

}  // namespace

void attention_decode(const AttentionDecodeArgs& a, cudaStream_t stream) {
  if (a.n_heads % a.n_kv_heads != 0 || a.n_heads / a.n_kv_heads > kMaxGroup)
    check(cudaErrorInvalidValue, "attention_decode: at most 8 query heads per kv head");
  const dim3 grid(static_cast<unsigned>(a.n_kv_heads), static_cast<unsigned>(a.splits));
  switch (a.head_dim) {
    case 32:
      decode_kernel<1><<<grid, kWarps * 32, 0, stream>>>(a);
      break;
    case 64:
      decode_kernel<2><<<grid, kWarps * 32, 0, stream>>>(a);
      break;
    case 128:
      decode_kernel<4><<<grid, kWarps * 32, 0, stream>>>(a);
      break;
    case 256:
      decode_kernel<8><<<grid, kWarps * 32, 0, stream>>>(a);
      break;
    default:
      check(cudaErrorInvalidValue, "attention_decode: head_dim must be 32, 64, 128 or 256");
  }
  check_launch("attention_decode");
  combine_kernel<<<static_cast<unsigned>(a.n_heads), 128, 0, stream>>>(a);
  check_launch("attention_decode_combine");
}

}  // namespace qwick::cuda
