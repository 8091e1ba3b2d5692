// Decode attention splits on the CUDA cores: the baseline the tensor-core kernel
// (attention_decode_cuda.cu) is measured against (`--cuda-off decode-attention`).
//
// Block (kv head j, split s), 8 warps. Warp w takes the split's positions in pairs, every 8th pair
// of it (both pairs' rows loaded before either is used). For each position a lane holds head_dim/32
// consecutive dims of the K and V rows (one 16-byte load each at head_dim 256) and of the G query
// heads, so one K/V row read serves all G heads:
//   s_g = scale · q_g·k   (warp sum)     online softmax per head: m, l, acc[G][dims] in registers
// The 8 warps then merge into shared memory one after another, and the block writes the split's
// partial (attention_decode.cuh). A q8 cache's rows (kv_q8.h) are decoded to f32 as they are loaded.
#include "kernels/attention/attention_decode.cuh"
#include "kernels/attention/kv_q8.h"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_launch.h"

namespace qwick::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxGroup = 8;   // query heads per kv head
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

// EPL consecutive q8 bytes of a row of scale `scale`, decoded (p EPL-byte aligned).
template <int EPL>
__device__ __forceinline__ void load_q8(const uint8_t* p, float scale, float (&out)[EPL]) {
  uint32_t w[(EPL + 3) / 4];
  if constexpr (EPL == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x, w[1] = v.y;
  } else if constexpr (EPL == 4) {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  } else if constexpr (EPL == 2) {
    w[0] = *reinterpret_cast<const uint16_t*>(p);
  } else {
    w[0] = *p;
  }
#pragma unroll
  for (int e = 0; e < EPL; ++e) out[e] = kv_q8_value(static_cast<uint8_t>(w[e / 4] >> (8 * (e % 4))), scale);
}

// Position p's EPL dims of a kv head's K or V rows (`rows` at the head's first row, offset to the lane's
// dims; `scales` the head's row scales, null for bf16).
template <int EPL, bool kQ8>
__device__ __forceinline__ void load_row(const void* rows, const float* scales, int64_t p,
                                         float (&out)[EPL]) {
  constexpr int HD = EPL * 32;
  if constexpr (kQ8)
    load_q8<EPL>(static_cast<const uint8_t*>(rows) + p * HD, scales[p], out);
  else
    load_bf16<EPL>(static_cast<const uint16_t*>(rows) + p * HD, out);
}

template <int EPL, bool kQ8>  // dims per lane = head_dim / 32
__global__ void __launch_bounds__(kWarps * 32) decode_kernel(AttentionDecodeArgs a) {
  QWICK_TRACE_BLOCK();
  constexpr int HD = EPL * 32;
  __shared__ float q_s[kMaxGroup][HD];
  __shared__ float acc_s[kMaxGroup][HD];
  __shared__ float m_s[kMaxGroup], l_s[kMaxGroup];

  const int kvh = blockIdx.x, split = blockIdx.y;
  const int G = a.n_heads / a.n_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  let_next_kernel_start();
  wait_for_previous_kernel();  // q and the newest cache row come from attention_prep
  const auto [begin, end] = split_range(a, split);

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
  const int64_t head_elem = static_cast<int64_t>(kvh) * a.capacity * HD + lane * EPL;
  const int elem_bytes = kQ8 ? 1 : 2;
  const void* kbase = static_cast<const uint8_t*>(a.k_cache) + head_elem * elem_bytes;
  const void* vbase = static_cast<const uint8_t*>(a.v_cache) + head_elem * elem_bytes;
  const float* kscale = kQ8 ? a.k_scale + static_cast<int64_t>(kvh) * a.capacity : nullptr;
  const float* vscale = kQ8 ? a.v_scale + static_cast<int64_t>(kvh) * a.capacity : nullptr;
  for (int64_t p0 = begin + warp * kPositions; p0 < end; p0 += kWarps * kPositions) {
    float kr[kPositions][EPL], vr[kPositions][EPL];
#pragma unroll
    for (int i = 0; i < kPositions; ++i) {
      const int64_t p = min(p0 + i, end - 1);  // a position past the range is loaded but not used
      load_row<EPL, kQ8>(kbase, kscale, p, kr[i]);
      load_row<EPL, kQ8>(vbase, vscale, p, vr[i]);
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
    partial_row(a, kvh * G + g, split)[d] = v;
  }
}

}  // namespace

void attention_decode_splits_simt(const AttentionDecodeArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.n_kv_heads), static_cast<unsigned>(a.splits));
  const dim3 block(kWarps * 32);
  auto launch = [&](auto kernel) {
    launch_kernel(kernel, grid, block, 0, stream, a.overlap, "attention_decode", a);
  };
  const bool q8 = a.k_scale != nullptr;
  switch (a.head_dim) {
    case 32:
      return q8 ? launch(decode_kernel<1, true>) : launch(decode_kernel<1, false>);
    case 64:
      return q8 ? launch(decode_kernel<2, true>) : launch(decode_kernel<2, false>);
    case 128:
      return q8 ? launch(decode_kernel<4, true>) : launch(decode_kernel<4, false>);
    default:
      return q8 ? launch(decode_kernel<8, true>) : launch(decode_kernel<8, false>);
  }
}

}  // namespace qwick::cuda
