// The MoE block on the CPU (model-spec.md §2.6), the same code for prefill and decode:
//
//   route every row -> group (row, expert) pairs by expert -> gather each group's input rows
//   -> gate|up of every expert (and the shared expert) in one parallel region -> SwiGLU
//   -> down of every expert in one parallel region -> weighted sum back into each row.
//
// Batching all experts per parallel region keeps the threads busy when the groups are small
// (decode: 8 groups of one row).
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_layers.h"
#include "kernels/activation.h"
#include "kernels/matmul/matmul_parallel.h"
#include "kernels/moe/router.h"

namespace qwick {

void moe_forward(const CpuContext& ctx, const MoeWeights& w, const float* x, int64_t n, float* out) {
  const ModelConfig& c = ctx.cfg;
  const int64_t H = c.hidden_size, E = c.n_experts, k = c.n_experts_per_tok;
  const int64_t I = c.expert_dim, S = c.shared_expert_dim;

  // Router logits and the shared expert's gate logit, one pass over the rows.
  float* logits = ctx.arena.floats(static_cast<size_t>(n * E));
  float* shared_logit = ctx.arena.floats(static_cast<size_t>(n));
  const MatmulProblem route[] = {matmul_problem(w.router, x, H, n, logits, E),
                                 matmul_problem(w.shared_gate, x, H, n, shared_logit, 1)};
  matmul_batch(route, ctx.pool, ctx.precision);

  int32_t* ids = ctx.arena.ints(static_cast<size_t>(n * k));
  float* weights = ctx.arena.floats(static_cast<size_t>(n * k));
  for (int64_t t = 0; t < n; ++t)
    route_token(logits + t * E, static_cast<int>(E), static_cast<int>(k), ids + t * k, weights + t * k);

  // Counting sort of the n*k assignments by expert: group e owns slots [offset[e], offset[e+1]).
  const int64_t slots = n * k;
  int32_t* offset = ctx.arena.ints(static_cast<size_t>(E + 1));
  int32_t* fill = ctx.arena.ints(static_cast<size_t>(E + 1));
  std::fill_n(offset, E + 1, 0);
  for (int64_t i = 0; i < slots; ++i) ++offset[ids[i] + 1];
  for (int64_t e = 0; e < E; ++e) offset[e + 1] += offset[e];
  int32_t* slot_row = ctx.arena.ints(static_cast<size_t>(slots));     // which input row fills each slot
  float* slot_weight = ctx.arena.floats(static_cast<size_t>(slots));  // its routing weight
  std::copy_n(offset, E, fill);
  for (int64_t i = 0; i < slots; ++i) {
    const int32_t s = fill[ids[i]]++;
    slot_row[s] = static_cast<int32_t>(i / k);
    slot_weight[s] = weights[i];
  }
  float* gathered = ctx.arena.floats(static_cast<size_t>(slots * H));
  ctx.pool.parallel_for(static_cast<size_t>(slots), [&](size_t s, int) {
    std::copy_n(x + static_cast<int64_t>(slot_row[s]) * H, H, gathered + static_cast<int64_t>(s) * H);
  });

  // gate and up projections: routed groups read their gathered rows, the shared expert reads x.
  float* gate = ctx.arena.floats(static_cast<size_t>(slots * I));
  float* up = ctx.arena.floats(static_cast<size_t>(slots * I));
  float* sgate = ctx.arena.floats(static_cast<size_t>(n * S));
  float* sup = ctx.arena.floats(static_cast<size_t>(n * S));
  thread_local std::vector<MatmulProblem> problem_storage;  // reused: no allocation once warm
  std::vector<MatmulProblem>& problems = problem_storage;
  problems.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t s0 = offset[e], rows = offset[e + 1] - s0;
    if (rows == 0) continue;
    const ExpertWeights& ex = w.experts[static_cast<size_t>(e)];
    problems.push_back(matmul_problem(ex.gate, gathered + s0 * H, H, rows, gate + s0 * I, I));
    problems.push_back(matmul_problem(ex.up, gathered + s0 * H, H, rows, up + s0 * I, I));
  }
  problems.push_back(matmul_problem(w.shared.gate, x, H, n, sgate, S));
  problems.push_back(matmul_problem(w.shared.up, x, H, n, sup, S));
  matmul_batch(problems, ctx.pool, ctx.precision);

  ctx.pool.parallel_for(static_cast<size_t>(slots + n), [&](size_t i, int) {
    const bool shared = static_cast<int64_t>(i) >= slots;
    const int64_t width = shared ? S : I;
    float* g = shared ? sgate + (static_cast<int64_t>(i) - slots) * S : gate + static_cast<int64_t>(i) * I;
    const float* u = shared ? sup + (static_cast<int64_t>(i) - slots) * S : up + static_cast<int64_t>(i) * I;
    for (int64_t j = 0; j < width; ++j) g[j] = silu(g[j]) * u[j];
  });

  // down projections into per-slot rows, then out[row] = Σ weight · down + sigmoid(shared gate) · shared
  // down.
  float* down = ctx.arena.floats(static_cast<size_t>(slots * H));
  problems.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t s0 = offset[e], rows = offset[e + 1] - s0;
    if (rows == 0) continue;
    problems.push_back(
        matmul_problem(w.experts[static_cast<size_t>(e)].down, gate + s0 * I, I, rows, down + s0 * H, H));
  }
  problems.push_back(matmul_problem(w.shared.down, sgate, S, n, out, H));
  matmul_batch(problems, ctx.pool, ctx.precision);

  // Each row's slots, in expert order, then the shared expert: deterministic whatever the threading.
  int32_t* row_slots = ctx.arena.ints(static_cast<size_t>(slots));
  int32_t* row_start = ctx.arena.ints(static_cast<size_t>(n + 1));
  int32_t* row_fill = ctx.arena.ints(static_cast<size_t>(n + 1));
  std::fill_n(row_start, n + 1, 0);
  for (int64_t s = 0; s < slots; ++s) ++row_start[slot_row[s] + 1];
  for (int64_t t = 0; t < n; ++t) row_start[t + 1] += row_start[t];
  std::copy_n(row_start, n, row_fill);
  for (int64_t s = 0; s < slots; ++s) row_slots[row_fill[slot_row[s]]++] = static_cast<int32_t>(s);
  ctx.pool.parallel_for(static_cast<size_t>(n), [&](size_t t, int) {
    float* o = out + static_cast<int64_t>(t) * H;
    const float sg = sigmoid(shared_logit[t]);
    for (int64_t j = 0; j < H; ++j) o[j] *= sg;
    for (int64_t r = row_start[t]; r < row_start[t + 1]; ++r) {
      const int64_t s = row_slots[r];
      ctx.ops.axpy(o, slot_weight[s], down + s * H, H);
    }
  });
}

}  // namespace qwick
