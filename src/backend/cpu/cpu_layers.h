// The CPU forward pass, one function per layer kind. Each takes the normalised input rows
// x [n, hidden] and writes the layer's output rows [n, hidden] (the caller adds them to the residual
// stream). The rows come in runs of one sequence each (SequenceRows): prefill is one run of a chunk,
// decode one run of one row, a multi-row step one run per sequence. Matrix products and the MoE take
// all n rows at once; attention and DeltaNet advance each run's own sequence state.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/cpu_kv_pool.h"
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

// The state one decoder layer advances for one sequence: `kv` for an attention layer, `deltanet`
// (and optionally `row_states`) for a DeltaNet layer. `row_states` (one per row of the run): the
// state after each row is also written there, for a multi-row step whose caller keeps only a prefix
// of the rows (CpuSequence::row_states).
struct LayerState {
  KvRows kv;
  DeltaNetState* deltanet = nullptr;
  DeltaNetState* row_states = nullptr;
};

// Rows [row0, row0 + n) of a pass: consecutive positions [pos0, pos0 + n) of one sequence.
struct SequenceRows {
  int64_t row0 = 0, n = 0, pos0 = 0;
  LayerState state;
};

void attention_forward(const CpuContext& ctx, const AttentionWeights& w, std::span<const SequenceRows> seqs,
                       const float* x, int64_t n, float* out);
void deltanet_forward(const CpuContext& ctx, const DeltaNetWeights& w, std::span<const SequenceRows> seqs,
                      const float* x, int64_t n, float* out);
void moe_forward(const CpuContext& ctx, const MoeWeights& w, const float* x, int64_t n, float* out);

// One decoder layer over the residual rows hidden [n, hidden] of the runs `seqs`, in place:
// hidden += mixer(norm(hidden)), then hidden += moe(norm(hidden)). `normed` and `branch` are
// [n, hidden] scratch; the arena is reset.
void decoder_layer(const CpuContext& ctx, const LayerWeights& w, std::span<const SequenceRows> seqs,
                   float* hidden, float* normed, float* branch, int64_t n);

}  // namespace qwick
