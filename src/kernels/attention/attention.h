// Softmax attention of query heads over a KV cache head (model-spec.md §2.3), f32 softmax.
//
// CPU reference for the CUDA attention kernels; the CPU backend runs attend_group in parallel over
// (query row, kv head) pairs. Causality is the caller's: it passes n_ctx = position + 1.
// tests/unit/kernels_test.cpp checks attend_group against attend per head.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/kv_dtype.h"
#include "kernels/vector/vector_ops.h"

namespace qwick {

// One kv head's cache: position j's key at k + j * head_dim elements (same for v), of the dtype's
// element type (uint16_t bf16 bits, float, or for kQ8 kv_q8.h's uint8_t codes, whose row scales are
// at k_scale[j] and v_scale[j]; null for the other types).
struct KvHeadView {
  KvDtype dtype = KvDtype::kBF16;
  const void* k = nullptr;
  const void* v = nullptr;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
};

// out[0, head_dim) = Σ_j softmax_j(scale · q·k_j) · v_j over j < n_ctx.
// `scores` is scratch for n_ctx floats. The plain reference that attend_group is tested against.
void attend(const float* q, const KvHeadView& kv, int64_t n_ctx, int head_dim, float scale, float* scores,
            float* out, const VectorOps& ops);

// The same for the `n_heads` query heads that share one kv head (GQA): each key and value row is
// read once for every head (VectorOps::qk_bf16 / pv_bf16 for a bf16 cache; a q8 row is decoded to
// f32 once), instead of once per head. Query head g is at q + g * q_stride, its output at
// out + g * out_stride. Scratch: `scores` n_heads * n_ctx floats.
void attend_group(const float* q, int64_t q_stride, int n_heads, const KvHeadView& kv, int64_t n_ctx,
                  int head_dim, float scale, float* scores, float* out, int64_t out_stride,
                  const VectorOps& ops);

}  // namespace qwick
