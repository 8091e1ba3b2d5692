// What one token costs this model, counted from the config and the weights as stored: the bytes a
// decode step must read (active weights in file format with scales and biases, the DeltaNet states,
// the KV cache) and the FLOPs of a prefill or decode row. `qwick bench` divides its timings by these
// to report achieved GB/s and TFLOP/s.
#pragma once

#include <cstdint>

#include "core/kv_dtype.h"
#include "model/model.h"

namespace qwick {

struct TokenCost {
  double weight_bytes = 0;        // active weights read per decoded token (embedding row, mixers, router,
                                  // shared expert, k routed experts, lm_head)
  double state_bytes = 0;         // DeltaNet conv + recurrent states, read and written
  double kv_bytes_per_ctx = 0;    // KV cache bytes read per token of context (all attention layers)
  double matmul_flops = 0;        // 2 · active weight elements
  double lm_head_flops = 0;       // the part of matmul_flops a prefill spends only on its last row
  double deltanet_flops = 0;      // the recurrence, all DeltaNet layers
  double attn_flops_per_ctx = 0;  // QKᵀ and PV per token of context (all attention layers)
  double total_bytes = 0;         // every weight in the checkpoint
  double total_params = 0;

  double decode_bytes(int64_t context) const {
    return weight_bytes + state_bytes + kv_bytes_per_ctx * static_cast<double>(context);
  }
  double decode_flops(int64_t context) const {
    return matmul_flops + deltanet_flops + attn_flops_per_ctx * static_cast<double>(context);
  }
  // A prompt of n tokens from an empty context: row t attends to t + 1 positions; logits of the
  // last row only.
  double prefill_flops(int64_t n) const {
    const double nn = static_cast<double>(n);
    return nn * (matmul_flops - lm_head_flops + deltanet_flops) + lm_head_flops +
           attn_flops_per_ctx * nn * (nn + 1) / 2;
  }
};

TokenCost token_cost(const Model& model, KvDtype kv);

}  // namespace qwick
