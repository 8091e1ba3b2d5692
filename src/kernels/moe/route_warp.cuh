// Top-k routing of one token by one warp, shared by the prefill router (moe_cuda.cu) and the decode
// MoE (moe_decode_cuda.cu: each one-pass block, or the router's last block).
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace qwick::cuda {

constexpr int kMaxExpertsPerLane = 16;  // up to 512 experts

// Warp-level top-k of one token's logits, P candidates per lane (lane j holds experts j, j + 32, ...).
// Selection by logit (softmax is monotone), ties to the lower expert id; weights exp(l - l_max)
// renormalised over the chosen k (the softmax denominator cancels). Lane j < k writes the j-th choice.
// Each round's warp-wide choice is two reductions in hardware (the largest key, then the lowest id
// holding it) instead of five dependent rounds of shuffles (+2.7 % decode at 4K). Returns lane j's
// choice to lane j < k. kL2: logits read from L2 (other blocks of the running kernel wrote them).
template <int P, bool kL2>
__device__ inline int route_one_lanes(const float* logits, int E, int k, int32_t* ids, float* weights) {
  const int lane = threadIdx.x & 31;
  uint32_t v[P];  // ordered_key of the logit; 0 (below every real key) once taken, past E or NaN
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int e = lane + 32 * i;
    const float l = e < E ? (kL2 ? __ldcg(logits + e) : logits[e]) : NAN;
    // (-0 as +0: equal logits, equal keys; a NaN is never chosen ahead of a number, as with compares)
    v[i] = isnan(l) ? 0u : ordered_key(l + 0.0f);
  }
  float top = -INFINITY, sum = 0.0f, mine_l = 0.0f;
  int mine_e = 0;
  for (int j = 0; j < k; ++j) {
    // This lane's best (largest key, lowest id: the first of its largest), then the warp's.
    uint32_t best = 0u;
    int best_i = 0;
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (v[i] > best) best = v[i], best_i = i;
    const uint32_t warp_best = __reduce_max_sync(kFullMask, best);
    const uint32_t e = __reduce_min_sync(
        kFullMask, best == warp_best ? static_cast<uint32_t>(lane + 32 * best_i) : UINT32_MAX);
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (static_cast<uint32_t>(lane + 32 * i) == e) v[i] = 0u;  // taken
    const float l = key_value(warp_best);
    if (j == 0) top = l;
    if (lane == j) mine_l = l, mine_e = static_cast<int>(e);
    sum += expf(l - top);
  }
  if (lane < k) {
    ids[lane] = mine_e;
    weights[lane] = expf(mine_l - top) / sum;
  }
  return mine_e;
}

// E ≤ 32 · kMaxExpertsPerLane. Eight candidates a lane up to 256 experts (the model's): each of the k
// rounds then scans half the registers (in decode every one-pass MoE block, or the router's last
// block, runs this as the MoE's serial tail).
template <bool kL2 = false>
__device__ inline int route_one(const float* logits, int E, int k, int32_t* ids, float* weights) {
  if (E <= 32 * 8) return route_one_lanes<8, kL2>(logits, E, k, ids, weights);
  return route_one_lanes<kMaxExpertsPerLane, kL2>(logits, E, k, ids, weights);
}

}  // namespace qwick::cuda
