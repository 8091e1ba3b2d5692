// Gated DeltaNet pieces (model-spec.md §2.5), CPU reference versions, all f32.
//
// Recurrent state of one value head: S [Dv][Dk] (row j holds column j of the spec's S_h, so every
// update touches contiguous memory):
//
//        k-dim (Dk) ->
//   v0 [ s00 s01 ... ]      u_j   = exp(g) · (S_j · k)
//   v1 [ s10 s11 ... ]      S_j  <- exp(g) · S_j + beta · (v_j - u_j) · k
//   ..                      o_j   = S_j · q
#pragma once

#include <cstdint>

#include "kernels/vector/vector_ops.h"

namespace qwick {

// Causal depthwise conv + SiLU over T rows of C channels, for channels [c_begin, c_end):
//   out[t, c] = silu( Σ_{j<K} w[c, j] · row_{t-K+1+j}[c] )
// where rows before the chunk come from `state` ([K-1, C], oldest first; zeros at sequence start).
// Afterwards `state` holds the last K-1 input rows (pre-conv), ready for the next chunk.
void causal_conv_silu(const float* in, int64_t T, int64_t C, const float* w, int K, float* state, float* out,
                      int64_t c_begin, int64_t c_end);

// beta = sigmoid(b), decay = exp(g) with g = a_neg · softplus(a + dt_bias), for Hv heads.
void deltanet_gates(const float* b, const float* a, const float* a_neg, const float* dt_bias, int64_t n_heads,
                    float* beta, float* decay);

// The recurrence for one value head over T tokens, updating `state` [Dv][Dk] in place.
// q_t, k_t: Dk values at q + t*ld_qk (already L2-normalised, q scaled); v_t, o_t: Dv values at
// v + t*ld_v and o + t*ld_o; decay_t, beta_t at decay[t*ld_g], beta[t*ld_g].
struct DeltaNetHeadScan {
  const float* q;
  const float* k;
  int64_t ld_qk;
  const float* v;
  int64_t ld_v;
  const float* decay;
  const float* beta;
  int64_t ld_g;
  float* o;
  int64_t ld_o;
};
void deltanet_scan_head(const DeltaNetHeadScan& s, int64_t T, int64_t Dk, int64_t Dv, float* state,
                        const VectorOps& ops);

}  // namespace qwick
