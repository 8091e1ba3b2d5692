// Token selection on the GPU (contract in sample_cuda.h).
#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/sample/sample_cuda.h"

namespace qwick::cuda {
namespace {

constexpr int kThreads = 1024;
// Logits a thread holds in the first pass: its block's ids r0 + tid + j·kThreads.
constexpr int kPerThread = 4;
// Candidates a thread of the last block holds.
constexpr int kCandPerThread = 8;

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

// The passes' tests and terms are branch-free (& for &&, a select for an if): a branch per logit keeps
// the compiler from overlapping the logits' loads and exponentials (the whole-vocabulary passes took
// ~50 % longer with branches).
__device__ __forceinline__ bool kept_topk(float l, const Cuts& c) {
  return isfinite(l) & (ordered_key(l) >= c.key_k);
}
__device__ __forceinline__ bool kept_all(float l, const Cuts& c) {
  return kept_topk(l, c) & (ordered_key(l) >= c.key_p) & (expf(l - c.top) >= c.min_p);
}

// Largest key τ (bit by bit from the top) such that measure(τ) ≥ target, where measure is a block
// reduction that does not increase with τ.
template <typename Measure>
__device__ uint32_t bisect_key(float target, Measure measure) {
  uint32_t tau = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t cand = tau | (1u << bit);
    if (measure(cand) >= target) tau = cand;
  }
  return tau;
}

// Σ n over the block, to every thread, behind one barrier: the warps' sums go to counts[parity] and
// the next call writes the other half (its barrier orders this call's reads before that call's writes
// of this half).
__device__ __forceinline__ int block_count(int n, int (*counts)[32], int& parity) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  n = static_cast<int>(__reduce_add_sync(kFullMask, static_cast<unsigned>(n)));
  if (lane == 0) counts[parity][warp] = n;
  __syncthreads();
  const int total = static_cast<int>(
      __reduce_add_sync(kFullMask, lane < warps ? static_cast<unsigned>(counts[parity][lane]) : 0u));
  parity ^= 1;
  return total;
}

// f(i, l[i]) for i = i0, i0 + step, ... below end, in that order, until f returns true; eight loads in
// flight (one at a time, a pass of the whole vocabulary waits on L2 for every logit).
template <class F>
__device__ __forceinline__ void scan_logits(const float* l, int64_t i0, int64_t end, int64_t step, F f) {
  int64_t i = i0;
  for (; i + 7 * step < end; i += 8 * step) {
    float x[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = l[i + j * step];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (f(i + j * step, x[j])) return;
  }
  for (; i < end; i += step)
    if (f(i, l[i])) return;
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

// The block's candidates (its finite logits at or above its own k-th largest key, k = min(top_k, its
// finite count)) into out[0, kSampleBlockCandidates) in id order; returns how many, -1 past the room.
// v[j] is id r0 + threadIdx.x + j·kThreads (NaN past the range).
__device__ __forceinline__ int block_candidates(const float (&v)[kPerThread], int64_t r0, int k,
                                                SampleCandidate* out, int (*counts)[32], int& parity) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  uint32_t key[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j)
    key[j] = isfinite(v[j]) ? ordered_key(v[j]) : 0u;  // 0: below any finite
  uint32_t tau = 0;
  if (k > 0)
    tau = bisect_key(static_cast<float>(k), [&](uint32_t cand) {
      int c = 0;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) c += key[j] >= cand;
      return static_cast<float>(block_count(c, counts, parity));
    });
  int base = 0;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const bool take = k > 0 && key[j] != 0u && key[j] >= tau;
    const unsigned ballot = __ballot_sync(kFullMask, take);
    if (lane == 0) counts[parity][warp] = __popc(ballot);
    __syncthreads();
    const unsigned mine = lane < warps ? static_cast<unsigned>(counts[parity][lane]) : 0u;
    const int before = static_cast<int>(__reduce_add_sync(kFullMask, lane < warp ? mine : 0u)),
              all = static_cast<int>(__reduce_add_sync(kFullMask, mine));
    parity ^= 1;
    const int at = base + before + __popc(ballot & ((1u << lane) - 1u));
    if (take && at < kSampleBlockCandidates)
      out[at] = SampleCandidate{static_cast<int32_t>(r0 + threadIdx.x + j * kThreads), v[j]};
    base += all;
  }
  return base <= kSampleBlockCandidates ? base : -1;
}

// The cuts and the draw (sample_cuda.h) over a set of logits shared among the block's threads:
// each(f) calls f(logit) for this thread's share (any order: counts and sums), in_order(f) calls
// f(id, logit) for its share in id order, stopping where f returns true (the threads' shares in thread
// order are in id order too: the draw's prefix). Returns the chosen id to every thread (-1: none kept).
template <class Each, class InOrder>
__device__ __forceinline__ int32_t cut_and_draw(const SamplingState& st, float top, bool cut_k, Each each,
                                                InOrder in_order, float* scratch, float* thread_sums,
                                                int32_t* chosen) {
  const int tid = threadIdx.x;
  Cuts cuts{top, 0u, 0u, st.min_p};
  if (cut_k) {
    cuts.key_k = bisect_key(static_cast<float>(st.top_k), [&](uint32_t tau) {
      float c = 0.0f;
      each([&](float l) { c += (isfinite(l) & (ordered_key(l) >= tau)) ? 1.0f : 0.0f; });
      return block_sum(c, scratch);
    });
  }
  if (st.top_p < 1.0f) {
    float total = 0.0f;
    each([&](float l) {
      const float p = expf(l - top);
      total += kept_topk(l, cuts) ? p : 0.0f;
    });
    total = block_sum(total, scratch);
    cuts.key_p = bisect_key(st.top_p * total, [&](uint32_t tau) {
      float s = 0.0f;
      each([&](float l) {
        const float p = expf(l - top);
        s += (kept_topk(l, cuts) & (ordered_key(l) >= tau)) ? p : 0.0f;
      });
      return block_sum(s, scratch);
    });
  }
  const float inv_t = 1.0f / st.temperature;
  float mine = 0.0f;
  in_order([&](int32_t, float l) {
    const float w = expf((l - top) * inv_t);
    mine += kept_all(l, cuts) ? w : 0.0f;
    return false;
  });
  thread_sums[tid] = mine;
  if (tid == 0) *chosen = -1;
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
    *chosen = -2 - owner;      // tells the owner to walk
  }
  __syncthreads();
  if (*chosen == -2 - tid) {
    const float left = thread_sums[0];
    float acc = 0.0f;
    int32_t pick = -1;
    in_order([&](int32_t id, float l) {
      if (!kept_all(l, cuts)) return false;
      pick = id;  // rounding may leave r at the very end: the last kept id
      acc += expf((l - top) * inv_t);
      return left < acc;
    });
    *chosen = pick;
  }
  __syncthreads();
  return *chosen;
}

// Grid: blocks scan contiguous id ranges for the argmax, the top and the count of finite logits (and,
// for a top-k of at most kSampleFastTopK, their candidates), and leave them in `partials`; the last block
// to finish merges them and chooses (greedy: the argmax, read straight from the merge; otherwise
// cut_and_draw over the candidates, or over all logits).
__global__ void __launch_bounds__(kThreads) sample_kernel(SampleArgs a) {
  __shared__ float scratch[32];
  __shared__ float sbest[32];
  __shared__ int sbest_i[32];
  __shared__ int counts[2][32];
  __shared__ float thread_sums[kThreads];
  __shared__ int cand_at[kSampleMaxBlocks + 1];  // the last block: block b's candidates from cand_at[b]
  __shared__ int32_t cand_id[kCandPerThread][kThreads];  // and their ids (their logits in registers)
  __shared__ int32_t chosen;
  __shared__ bool last, overflow;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float* l = a.logits;
  const SamplingState st0 = *a.state;  // the host rewrites it only between steps
  const bool candidates =
      a.candidate_counts && st0.temperature > 0.0f && st0.top_k > 0 && st0.top_k <= kSampleFastTopK;
  int parity = 0;

  // Argmax (any value, for greedy) and the largest finite logit, ties to the lowest id.
  const int64_t per = (a.V + gridDim.x - 1) / gridDim.x;
  const int64_t r0 = blockIdx.x * per, r1 = min(a.V, r0 + per);
  float v[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = r0 + tid + j * kThreads;
    v[j] = i < r1 ? l[i] : NAN;  // (the launch gives each block at most kPerThread · kThreads ids)
  }
  float best = -INFINITY, top = -INFINITY, n_finite = 0.0f;
  int best_i = INT32_MAX;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = r0 + tid + j * kThreads;
    if (i >= r1) break;
    if (v[j] > best || (best_i == INT32_MAX && v[j] == best)) best = v[j], best_i = static_cast<int>(i);
    if (isfinite(v[j])) top = fmaxf(top, v[j]), n_finite += 1.0f;
  }
  block_best(best, best_i, top, sbest, sbest_i, scratch);
  __syncthreads();
  n_finite = block_sum(n_finite, scratch);
  if (candidates) {
    const int n = block_candidates(v, r0, min(st0.top_k, static_cast<int>(n_finite)),
                                   a.candidates + static_cast<int64_t>(blockIdx.x) * kSampleBlockCandidates,
                                   counts, parity);
    if (tid == 0) a.candidate_counts[blockIdx.x] = n;
    __threadfence();  // every thread's candidates before the block counts itself below
    __syncthreads();
  }
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
    __syncthreads();
  } else {
    // Where each block's candidates go in the list (warp 0: a scan over the blocks' counts).
    if (candidates && warp == 0) {
      int carry = 0;
      bool over = false;
      for (int b0 = 0; b0 < static_cast<int>(gridDim.x); b0 += 32) {
        const int b = b0 + lane;
        int c = b < static_cast<int>(gridDim.x) ? __ldcg(a.candidate_counts + b) : 0;
        over |= c < 0;
        c = max(c, 0);
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const int up = __shfl_up_sync(kFullMask, c, o);
          if (lane >= o) c += up;
        }
        if (b < static_cast<int>(gridDim.x)) cand_at[b + 1] = carry + c;
        carry += __shfl_sync(kFullMask, c, 31);
      }
      over = __any_sync(kFullMask, over);
      if (lane == 0) cand_at[0] = 0, overflow = over;
    }
    __syncthreads();
    const int total = candidates ? cand_at[gridDim.x] : 0;
    if (candidates && !overflow && static_cast<float>(st.top_k) < n_finite &&
        total <= kThreads * kCandPerThread) {
      // Thread t holds candidates [t·m, (t + 1)·m) of the list, in id order.
      const int m = (total + kThreads - 1) / kThreads, c0 = tid * m;
      float cl[kCandPerThread];                     // NaN: no candidate
      int b = 0, hi = static_cast<int>(gridDim.x);  // the block holding c0: cand_at[b] <= c0 < cand_at[b + 1]
      while (hi - b > 1) {
        const int mid = (b + hi) / 2;
        (cand_at[mid] <= c0 ? b : hi) = mid;
      }
#pragma unroll
      for (int j = 0; j < kCandPerThread; ++j) {
        const int c = c0 + j;
        cl[j] = NAN;
        if (j >= m || c >= total) continue;
        while (cand_at[b + 1] <= c) ++b;
        const SampleCandidate* e =
            a.candidates + static_cast<int64_t>(b) * kSampleBlockCandidates + (c - cand_at[b]);
        cand_id[j][tid] = __ldcg(&e->id), cl[j] = __ldcg(&e->logit);
      }
      auto each = [&](auto&& f) {
#pragma unroll
        for (int j = 0; j < kCandPerThread; ++j) f(cl[j]);  // (NaN counts for nothing)
      };
      auto in_order = [&](auto&& f) {
#pragma unroll
        for (int j = 0; j < kCandPerThread; ++j)
          if (!isnan(cl[j]) && f(cand_id[j][tid], cl[j])) break;
      };
      cut_and_draw(st, top, true, each, in_order, scratch, thread_sums, &chosen);
    } else {
      auto each = [&](auto&& f) {
        scan_logits(l, tid, a.V, kThreads, [&](int64_t, float x) {
          f(x);
          return false;
        });
      };
      // Each thread owns a contiguous id range, so a prefix over threads is in id order.
      const int64_t per_thread = (a.V + kThreads - 1) / kThreads;
      const int64_t i0 = tid * per_thread, i1 = min(a.V, i0 + per_thread);
      auto in_order = [&](auto&& f) {
        scan_logits(l, i0, i1, 1, [&](int64_t i, float x) { return f(static_cast<int32_t>(i), x); });
      };
      cut_and_draw(st, top, st.top_k > 0 && static_cast<float>(st.top_k) < n_finite, each, in_order, scratch,
                   thread_sums, &chosen);
    }
    if (tid == 0 && chosen < 0) chosen = best_i;  // nothing kept (cannot happen: the top is kept)
    __syncthreads();
  }
  if (tid == 0) {
    *a.token = chosen;
    if (a.host_token) *a.host_token = chosen;
    a.state->draws = st.draws + 1;
    if (a.position) *a.position += 1;
    *a.counter = 0;
  }
}

}  // namespace

void sample_token(const SampleArgs& a, cudaStream_t stream) {
  // kPerThread logits a thread of the first pass, one block per multiprocessor at most.
  const int64_t blocks =
      std::min<int64_t>({kSampleMaxBlocks, multiprocessor_count(),
                         std::max<int64_t>(1, (a.V + kPerThread * kThreads - 1) / (kPerThread * kThreads))});
  if ((a.V + blocks - 1) / blocks > int64_t{kPerThread} * kThreads)
    check(cudaErrorInvalidValue, "sample_token: vocabulary too large for the sampler's first pass");
  launch_kernel(sample_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, false,
                "sample_token", a);
}

}  // namespace qwick::cuda
