// Softmax attention of one query head over a KV cache head (model-spec.md §2.3), f32 softmax.
//
// CPU reference for the CUDA attention kernels; the CPU backend runs it in parallel over
// (query row, head) pairs. Causality is the caller's: it passes n_ctx = position + 1.
#pragma once

#include <cstdint>

#include "kernels/vector/vector_ops.h"

namespace qwick {

enum class KvDtype { kBF16, kF32 };

// One kv head's cache: position j's key at k + j * head_dim elements (same for v).
struct KvHeadView {
  KvDtype dtype = KvDtype::kBF16;
  const void* k = nullptr;
  const void* v = nullptr;
};

// out[0, head_dim) = Σ_j softmax_j(scale · q·k_j) · v_j over j < n_ctx.
// `scores` is scratch for n_ctx floats.
void attend(const float* q, const KvHeadView& kv, int64_t n_ctx, int head_dim, float scale, float* scores, float* out,
            const VectorOps& ops);

}  // namespace qwick
