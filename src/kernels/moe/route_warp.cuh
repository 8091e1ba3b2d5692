// Top-k routing of one token by one warp, shared by the prefill router (moe_cuda.cu) and the decode
// router's last block (moe_decode_cuda.cu).
#pragma once

#include "kernels/cuda_common.cuh"

namespace qwick::cuda {

constexpr int kMaxExpertsPerLane = 16;  // up to 512 experts

// Warp-level top-k of one token's logits. Selection by logit (softmax is monotone), ties to the
// lower expert id; weights exp(l - l_max) renormalised over the chosen k (the softmax denominator
// cancels). Lane j < k writes the j-th choice.
__device__ inline void route_one(const float* logits, int E, int k, int32_t* ids, float* weights) {
  const int lane = threadIdx.x & 31;
  float v[kMaxExpertsPerLane];
#pragma unroll
  for (int i = 0; i < kMaxExpertsPerLane; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < E ? logits[e] : -INFINITY;
  }
  float top = -INFINITY, sum = 0.0f, mine_l = 0.0f;
  int mine_e = 0;
  for (int j = 0; j < k; ++j) {
    // This lane's best (largest value, lowest id), then the warp's.
    float best = -INFINITY;
    int best_e = INT32_MAX;
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < E && (v[i] > best || (v[i] == best && e < best_e))) best = v[i], best_e = e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(kFullMask, best, o);
      const int oe = __shfl_xor_sync(kFullMask, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) best = ob, best_e = oe;
    }
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i)
      if (lane + 32 * i == best_e) v[i] = -INFINITY;  // taken
    if (j == 0) top = best;
    if (lane == j) mine_l = best, mine_e = best_e;
    sum += expf(best - top);
  }
  if (lane < k) {
    ids[lane] = mine_e;
    weights[lane] = expf(mine_l - top) / sum;
  }
}

}  // namespace qwick::cuda
