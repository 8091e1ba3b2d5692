// The MTP head on the CPU (model-spec.md §2.8), f32 activations like the rest of the backend.
//
// Head row t reads the main model's final-normed hidden state at position t and the token at
// position t + 1, and sits at position t of the head's own attention KV cache:
//
//   x = fc · [RMSNorm1p(E[token], pre_fc_norm_embedding) | RMSNorm1p(hidden, pre_fc_norm_hidden)]
//   x = decoder_layer(x)                       one gated attention layer + MoE, its own KV cache
//   g = RMSNorm1p(x, mtp.norm)                 -> logits = lm_head · g, the token at t + 2
//
// For a further draft, g stands in for the main model's hidden state at t + 1. Rows are written in
// position order and read only rows at or before their own, so a row computed from a draft is
// simply overwritten when the true inputs of its position are known.
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_layers.h"
#include "backend/cpu/cpu_state.h"
#include "core/aligned_buffer.h"
#include "model/weights.h"

namespace qwick {

class CpuMtpHead {
 public:
  CpuMtpHead(const ModelWeights& weights, const ModelConfig& cfg, KvDtype kv_dtype);

  // Head rows [pos0, pos0 + n): tokens [n], hidden [n, hidden_size]. When `out` is non-null it gets
  // the last row's g ([hidden_size]); when `logits` is too, that row's logits ([vocab]).
  void forward(const CpuContext& ctx, const int32_t* tokens, const float* hidden, int64_t n, int64_t pos0,
               float* out, float* logits);

  KvCache& cache() { return cache_; }
  const KvCache& cache() const { return cache_; }

 private:
  const ModelWeights& w_;
  const MtpWeights& head_;
  const ModelConfig& cfg_;
  KvCache cache_;
  AlignedBuffer<float> joined_, x_, normed_, branch_;  // [n, 2 * hidden] and [n, hidden] scratch
};

}  // namespace qwick
