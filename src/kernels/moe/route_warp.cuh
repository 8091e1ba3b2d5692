// Top-k routing of one token by one warp, shared by the prefill router (moe_cuda.cu) and the decode
// router's last block (moe_decode_cuda.cu).
#pragma once

#include "kernels/cuda_common.cuh"

namespace qwick::cuda {

constexpr int kMaxExpertsPerLane = 16;  // up to 512 experts

// Warp-level top-k of one token's logits, P candidates per lane (lane j holds experts j, j + 32, ...).
// Selection by logit (softmax is monotone), ties to the lower expert id; weights exp(l - l_max)
// renormalised over the chosen k (the softmax denominator cancels). Lane j < k writes the j-th choice.
template <int P>
__device__ inline void route_one_lanes(const float* logits, int E, int k, int32_t* ids, float* weights) {
  const int lane = threadIdx.x & 31;
  float v[P];
#pragma unroll
  for (int i = 0; i < P; ++i) {
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
    for (int i = 0; i < P; ++i) {
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
    for (int i = 0; i < P; ++i)
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

// E ≤ 32 · kMaxExpertsPerLane. Eight candidates a lane up to 256 experts (the model's): each of the k
// rounds then scans half the registers (the decode router's last block runs this as the MoE's
// serial tail).
__device__ inline void route_one(const float* logits, int E, int k, int32_t* ids, float* weights) {
  if (E <= 32 * 8)
    route_one_lanes<8>(logits, E, k, ids, weights);
  else
    route_one_lanes<kMaxExpertsPerLane>(logits, E, k, ids, weights);
}

}  // namespace qwick::cuda
