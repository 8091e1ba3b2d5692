// Token selection on the GPU (contract in sample_cuda.h).
#include <algorithm>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_launch.h"
#include "kernels/sample/sample_cuda.h"

namespace qwick::cuda {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Cuts {
  float top;       // largest finite logit
  uint32_t key_k;  // top-k cut (0: none)
  uint32_t key_p;  // top-p cut (0: none)
  float min_p;
};

__device__ __forceinline__ bool kept_topk(float l, const Cuts& c) {
  return isfinite(l) && ordered_key(l) >= c.key_k;
}
__device__ __forceinline__ bool kept_all(float l, const Cuts& c) {
  return kept_topk(l, c) && ordered_key(l) >= c.key_p && expf(l - c.top) >= c.min_p;
}

// Largest key τ (bit by bit from the top) such that measure(τ) ≥ target, where measure is a block
// reduction that does not increase with τ.
template <typename Measure>
__device__ uint32_t bisect_key(float target, float* scratch, Measure measure) {
  uint32_t tau = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t cand = tau | (1u << bit);
    if (measure(cand) >= target) tau = cand;
  }
  return tau;
}

// Merges the (argmax, its id, largest finite value) triples across a warp; ties to the lower id.
__device__ __forceinline__ void warp_best(float& best, int& best_i, float& top) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(kFullMask, best, o);
    const int oi = __shfl_xor_sync(kFullMask, best_i, o);
    if (ob > best || (ob == best && oi < best_i)) best = ob, best_i = oi;
    top = fmaxf(top, __shfl_xor_sync(kFullMask, top, o));
  }
}

// Merges every thread's (argmax, its id, largest finite value) into warp 0's lanes (ties to the lower
// id); the caller synchronises before reusing sbest, sbest_i or stop.
__device__ __forceinline__ void block_best(float& best, int& best_i, float& top, float* sbest, int* sbest_i,
                                           float* stop) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  warp_best(best, best_i, top);
  if (lane == 0) sbest[warp] = best, sbest_i[warp] = best_i, stop[warp] = top;
  __syncthreads();
  if (warp == 0) {
    best = lane < warps ? sbest[lane] : -INFINITY, best_i = lane < warps ? sbest_i[lane] : INT32_MAX;
    top = lane < warps ? stop[lane] : -INFINITY;
    warp_best(best, best_i, top);
  }
}

// Grid: blocks scan contiguous id ranges for the argmax, the top and the count of finite logits,
// and leave them in `partials`; the last block to finish merges them and chooses (greedy: the argmax,
// read straight from the merge; otherwise the passes below over all logits).
__global__ void __launch_bounds__(kThreads) sample_kernel(SampleArgs a) {
  __shared__ float scratch[32];
  __shared__ float sbest[32];
  __shared__ int sbest_i[32];
  __shared__ float thread_sums[kThreads];
  __shared__ int32_t chosen;
  __shared__ bool last;
  const int tid = threadIdx.x;
  const float* l = a.logits;

  // Argmax (any value, for greedy) and the largest finite logit, ties to the lowest id.
  const int64_t per = (a.V + gridDim.x - 1) / gridDim.x;
  const int64_t r0 = blockIdx.x * per, r1 = min(a.V, r0 + per);
  float best = -INFINITY, top = -INFINITY, n_finite = 0.0f;
  int best_i = INT32_MAX;
  for (int64_t i = r0 + tid; i < r1; i += kThreads) {
    const float v = l[i];
    if (v > best || (best_i == INT32_MAX && v == best)) best = v, best_i = static_cast<int>(i);
    if (isfinite(v)) top = fmaxf(top, v), n_finite += 1.0f;
  }
  block_best(best, best_i, top, sbest, sbest_i, scratch);
  __syncthreads();
  n_finite = block_sum(n_finite, scratch);
  if (tid == 0) {
    a.partials[blockIdx.x] = SamplePartial{best, best_i, top, n_finite};
    __threadfence();
    last = atomicAdd(a.counter, 1) == static_cast<int>(gridDim.x) - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  best = -INFINITY, best_i = INT32_MAX, top = -INFINITY, n_finite = 0.0f;
  for (int b = tid; b < static_cast<int>(gridDim.x); b += kThreads) {
    const float4 raw =
        __ldcg(reinterpret_cast<const float4*>(a.partials + b));  // past L1: other blocks wrote it
    const SamplePartial p{raw.x, __float_as_int(raw.y), raw.z, raw.w};
    if (p.best > best || (p.best == best && p.best_i < best_i)) best = p.best, best_i = p.best_i;
    top = fmaxf(top, p.top), n_finite += p.n_finite;
  }
  block_best(best, best_i, top, sbest, sbest_i, scratch);
  if (tid == 0) sbest_i[0] = best_i == INT32_MAX ? 0 : best_i, scratch[0] = top;
  __syncthreads();
  best_i = sbest_i[0];
  top = scratch[0];
  __syncthreads();
  n_finite = block_sum(n_finite, scratch);
  const SamplingState st = *a.state;

  if (st.temperature <= 0.0f || n_finite == 0.0f) {
    if (tid == 0) chosen = best_i;
  } else {
    Cuts cuts{top, 0u, 0u, st.min_p};
    if (st.top_k > 0 && static_cast<float>(st.top_k) < n_finite) {
      cuts.key_k = bisect_key(static_cast<float>(st.top_k), scratch, [&](uint32_t tau) {
        float c = 0.0f;
        for (int64_t i = tid; i < a.V; i += kThreads)
          c += (isfinite(l[i]) && ordered_key(l[i]) >= tau) ? 1.0f : 0.0f;
        return block_sum(c, scratch);
      });
    }
    if (st.top_p < 1.0f) {
      float total = 0.0f;
      for (int64_t i = tid; i < a.V; i += kThreads)
        if (kept_topk(l[i], cuts)) total += expf(l[i] - top);
      total = block_sum(total, scratch);
      cuts.key_p = bisect_key(st.top_p * total, scratch, [&](uint32_t tau) {
        float s = 0.0f;
        for (int64_t i = tid; i < a.V; i += kThreads)
          if (kept_topk(l[i], cuts) && ordered_key(l[i]) >= tau) s += expf(l[i] - top);
        return block_sum(s, scratch);
      });
    }
    // The draw: each thread owns a contiguous id range, so a prefix over threads is in id order.
    const int64_t per = (a.V + kThreads - 1) / kThreads;
    const int64_t i0 = tid * per, i1 = min(a.V, i0 + per);
    const float inv_t = 1.0f / st.temperature;
    float mine = 0.0f;
    for (int64_t i = i0; i < i1; ++i)
      if (kept_all(l[i], cuts)) mine += expf((l[i] - top) * inv_t);
    thread_sums[tid] = mine;
    if (tid == 0) chosen = -1;
    __syncthreads();
    if (tid == 0) {  // 1024 prefix additions: short next to the passes above
      float total = 0.0f;
      for (int i = 0; i < kThreads; ++i) total += thread_sums[i];
      const uint64_t bits = splitmix64(st.seed ^ splitmix64(st.draws));
      const float r = static_cast<float>(static_cast<double>(bits >> 11) * 0x1.0p-53) * total;
      float acc = 0.0f;
      int owner = -1;
      for (int i = 0; i < kThreads; ++i) {
        if (thread_sums[i] <= 0.0f) continue;
        owner = i;
        if (r < acc + thread_sums[i]) break;
        acc += thread_sums[i];
      }
      thread_sums[0] = r - acc;  // what is left to walk inside the owner's range
      chosen = -2 - owner;       // tells the owner to walk
    }
    __syncthreads();
    if (chosen == -2 - tid) {
      const float left = thread_sums[0];
      float acc = 0.0f;
      int32_t pick = -1;
      for (int64_t i = i0; i < i1; ++i) {
        if (!kept_all(l[i], cuts)) continue;
        pick = static_cast<int32_t>(i);  // rounding may leave r at the very end: the last kept id
        acc += expf((l[i] - top) * inv_t);
        if (left < acc) break;
      }
      chosen = pick;
    }
    __syncthreads();
    if (tid == 0 && chosen < 0) chosen = best_i;  // nothing kept (cannot happen: the top is kept)
  }
  __syncthreads();
  if (tid == 0) {
    *a.token = chosen;
    a.state->draws = st.draws + 1;
    if (a.position) *a.position += 1;
    *a.counter = 0;
  }
}

}  // namespace

void sample_token(const SampleArgs& a, cudaStream_t stream) {
  // About 4 logits per thread of the first pass, one block per multiprocessor at most.
  const int64_t blocks = std::min<int64_t>(
      {kSampleMaxBlocks, multiprocessor_count(), std::max<int64_t>(1, a.V / (4 * kThreads))});
  sample_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
  check_launch("sample_token");
}

}  // namespace qwick::cuda
