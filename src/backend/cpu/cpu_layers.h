// The CPU forward pass, one function per layer kind. Each takes the normalised input rows
// x [n, hidden] at positions [pos0, pos0 + n) and writes the layer's output rows [n, hidden] (the
// caller adds them to the residual stream). Used by both prefill (n = chunk) and decode (n = 1).
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_state.h"
#include "core/scratch_arena.h"
#include "core/thread_pool.h"
#include "kernels/matmul/matmul_parallel.h"
#include "kernels/rope/rope.h"
#include "kernels/vector/vector_ops.h"
#include "model/config.h"
#include "model/weights.h"

namespace qwick {

struct CpuContext {
  const ModelConfig& cfg;
  ThreadPool& pool;
  const VectorOps& ops;
  const RopeTable& rope;
  ScratchArena& arena;
  int64_t max_context;
  MatmulPrecision precision;
};

inline MatmulProblem matmul_problem(const WeightMatrix& w, const float* x, size_t ldx, size_t n, float* y,
                                    size_t ldy) {
  return MatmulProblem{&w, x, ldx, n, y, ldy};
}

void attention_forward(const CpuContext& ctx, const AttentionWeights& w, KvCache& cache, const float* x,
                       int64_t n, int64_t pos0, float* out);
// `row_states` (optional, n of them): the state after each row is also written there, for a
// multi-row step whose caller keeps only a prefix of the rows (CpuSequence::row_states).
void deltanet_forward(const CpuContext& ctx, const DeltaNetWeights& w, DeltaNetState& state, const float* x,
                      int64_t n, float* out, DeltaNetState* row_states = nullptr);
void moe_forward(const CpuContext& ctx, const MoeWeights& w, const float* x, int64_t n, float* out);

// The sequence state one decoder layer advances: `kv` for an attention layer, `deltanet` (and
// optionally `row_states`, see deltanet_forward) for a DeltaNet layer.
struct LayerState {
  KvCache* kv = nullptr;
  DeltaNetState* deltanet = nullptr;
  DeltaNetState* row_states = nullptr;
};

// One decoder layer over the residual rows hidden [n, hidden] at positions [pos0, pos0 + n), in
// place: hidden += mixer(norm(hidden)), then hidden += moe(norm(hidden)). `normed` and `branch` are
// [n, hidden] scratch; the arena is reset.
void decoder_layer(const CpuContext& ctx, const LayerWeights& w, const LayerState& state, float* hidden,
                   float* normed, float* branch, int64_t n, int64_t pos0);

}  // namespace qwick
