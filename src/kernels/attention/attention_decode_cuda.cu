// Decode attention (flash-decoding with GQA packing) on the GPU (contract in attention_cuda.h).
//
// Block (kv head j, split s), 8 warps. The split covers positions [s·per, (s+1)·per) of the context
// (per = ceil(len / splits)); warp w takes positions in pairs, every 8th pair of it (both pairs' rows
// loaded before either is used). For each position a lane holds head_dim/32 consecutive dims of the K
// and V rows (one 16-byte load each at head_dim 256) and of the G query heads, so one K/V row read
// serves all G heads:
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
constexpr int kMaxSplits = 1024;
constexpr int kPositions = 2;  // context positions per warp and iteration (their loads in flight together)

// EPL consecutive bf16 values as f32, in one load of 2·EPL bytes.
template <int EPL>
__device__ __forceinline__ void load_bf16(const uint16_t* p, float (&out)[EPL]) {
  if constexpr (EPL == 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
      out[2 * i] = __uint_as_float(w[i] << 16), out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  } else if constexpr (EPL == 4) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    out[0] = __uint_as_float(v.x << 16), out[1] = __uint_as_float(v.x & 0xffff0000u);
    out[2] = __uint_as_float(v.y << 16), out[3] = __uint_as_float(v.y & 0xffff0000u);
  } else if constexpr (EPL == 2) {
    const uint32_t v = *reinterpret_cast<const uint32_t*>(p);
    out[0] = __uint_as_float(v << 16), out[1] = __uint_as_float(v & 0xffff0000u);
  } else {
    out[0] = bf16_to_f32(*p);
  }
}

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
  for (int64_t p0 = begin + warp * kPositions; p0 < end; p0 += kWarps * kPositions) {
    float kr[kPositions][EPL], vr[kPositions][EPL];
#pragma unroll
    for (int i = 0; i < kPositions; ++i) {
      const int64_t p = min(p0 + i, end - 1);  // a position past the range is loaded but not used
      load_bf16<EPL>(kbase + p * HD, kr[i]);
      load_bf16<EPL>(vbase + p * HD, vr[i]);
    }
    float s[kPositions][kMaxGroup];
#pragma unroll
    for (int i = 0; i < kPositions; ++i)
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        s[i][g] = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) s[i][g] += q[g][e] * kr[i][e];
      }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int i = 0; i < kPositions; ++i)
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) s[i][g] += __shfl_xor_sync(kFullMask, s[i][g], o);
#pragma unroll
    for (int i = 0; i < kPositions; ++i) {
      if (p0 + i >= end) break;
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g >= G) break;
        const float sc = s[i][g] * a.scale;
        const float m_new = fmaxf(m[g], sc);
        const float corr = expf(m[g] - m_new), pw = expf(sc - m_new);
        l[g] = l[g] * corr + pw;
#pragma unroll
        for (int e = 0; e < EPL; ++e) acc[g][e] = acc[g][e] * corr + pw * vr[i][e];
        m[g] = m_new;
      }
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

// One block per query head: the splits' weights exp(m_s - M) / Σ_s l_s·exp(m_s - M) once in shared
// memory, then a thread per dim sums the splits' partial outputs (independent loads, unrolled).
__global__ void combine_kernel(AttentionDecodeArgs a) {
  __shared__ float coef[kMaxSplits], scratch[32];
  const int h = blockIdx.x, hd = a.head_dim;
  const float* part = a.partial + static_cast<int64_t>(h) * a.splits * (hd + 2);
  float m = -INFINITY;
  for (int s = threadIdx.x; s < a.splits; s += blockDim.x) m = fmaxf(m, part[s * (hd + 2) + hd]);
  const float M = block_max(m, scratch);
  float den = 0.0f;
  for (int s = threadIdx.x; s < a.splits; s += blockDim.x) {
    const float ms = part[s * (hd + 2) + hd];
    const float c = ms == -INFINITY ? 0.0f : expf(ms - M);  // an empty range adds nothing
    coef[s] = c;
    den += c * part[s * (hd + 2) + hd + 1];
  }
  den = block_sum(den, scratch);  // (its barriers also publish coef)
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float num = 0.0f;
#pragma unroll 8
    for (int s = 0; s < a.splits; ++s) num += part[s * (hd + 2) + d] * coef[s];
    float o = num / den;
    if (a.gate) o *= sigmoidf_(a.gate[h * a.gate_stride + d]);
    a.out[static_cast<int64_t>(h) * hd + d] = o;
  }
}

}  // namespace

void attention_decode(const AttentionDecodeArgs& a, cudaStream_t stream) {
  if (a.n_heads % a.n_kv_heads != 0 || a.n_heads / a.n_kv_heads > kMaxGroup)
    check(cudaErrorInvalidValue, "attention_decode: at most 8 query heads per kv head");
  if (a.splits < 1 || a.splits > kMaxSplits) check(cudaErrorInvalidValue, "attention_decode: 1..1024 splits");
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
  combine_kernel<<<static_cast<unsigned>(a.n_heads), 256, 0, stream>>>(a);
  check_launch("attention_decode_combine");
}

}  // namespace qwick::cuda
