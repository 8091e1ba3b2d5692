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

inline MatmulProblem matmul_problem(const WeightMatrix& w, const float* x, size_t ldx, size_t n, float* y, size_t ldy) {
  return MatmulProblem{&w, x, ldx, n, y, ldy};
}

void attention_forward(const CpuContext& ctx, const AttentionWeights& w, KvCache& cache, const float* x, int64_t n,
                       int64_t pos0, float* out);
void deltanet_forward(const CpuContext& ctx, const DeltaNetWeights& w, DeltaNetState& state, const float* x, int64_t n,
                      float* out);
void moe_forward(const CpuContext& ctx, const MoeWeights& w, const float* x, int64_t n, float* out);

}  // namespace qwick
