// Gated full attention on the CPU (model-spec.md §2.3).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_layers.h"
#include "kernels/activation.h"
#include "kernels/attention/attention.h"
#include "kernels/matmul/matmul_parallel.h"
#include "kernels/norm/rms_norm.h"

namespace qwick {

void attention_forward(const CpuContext& ctx, const AttentionWeights& w, std::span<const SequenceRows> seqs,
                       const float* x, int64_t n, float* out) {
  const ModelConfig& c = ctx.cfg;
  const int64_t H = c.hidden_size, hd = c.head_dim, nq = c.n_heads, nkv = c.n_kv_heads;
  const int64_t q_rows = c.q_proj_rows(), kv_rows = nkv * hd;
  const int64_t q_stride = c.attn_output_gate ? 2 * hd : hd;  // per head: [q | gate]

  float* qg = ctx.arena.floats(static_cast<size_t>(n * q_rows));
  float* k = ctx.arena.floats(static_cast<size_t>(n * kv_rows));
  float* v = ctx.arena.floats(static_cast<size_t>(n * kv_rows));
  const MatmulProblem proj[] = {matmul_problem(w.q_proj, x, H, n, qg, q_rows),
                                matmul_problem(w.k_proj, x, H, n, k, kv_rows),
                                matmul_problem(w.v_proj, x, H, n, v, kv_rows)};
  matmul_batch(proj, ctx.pool, ctx.precision);

  // Each row's run and position.
  int32_t* row_seq = ctx.arena.ints(static_cast<size_t>(n));
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceRows& r = seqs[s];
    std::fill_n(row_seq + r.row0, r.n, static_cast<int32_t>(s));
    // A cache without a block table holds the positions themselves and grows with them.
    if (r.state.kv.blocks.empty()) r.state.kv.cache->reserve(r.pos0 + r.n, ctx.max_context);
  }
  const auto position = [&](int64_t t) {
    const SequenceRows& r = seqs[static_cast<size_t>(row_seq[t])];
    return r.pos0 + t - r.row0;
  };

  // q/k norm and RoPE per head, then the new keys and values into the cache.
  const int half = c.rotary_dim / 2;
  float* angles = ctx.arena.floats(static_cast<size_t>(n * 2 * half));  // per row: cos[half], sin[half]
  ctx.pool.parallel_for(static_cast<size_t>(n), [&](size_t t, int) {
    const int64_t pos = position(static_cast<int64_t>(t));
    const float* cos = angles + t * 2 * static_cast<size_t>(half);
    const float* sin = cos + half;
    ctx.rope.angles(pos, angles + t * 2 * static_cast<size_t>(half),
                    angles + t * 2 * static_cast<size_t>(half) + half);
    for (int64_t h = 0; h < nq; ++h) {
      float* q = qg + static_cast<int64_t>(t) * q_rows + h * q_stride;
      rms_norm(q, w.q_norm.data(), c.rms_norm_eps, hd, q);
      apply_rope(q, c.rotary_dim, cos, sin);
    }
    float* kt = k + static_cast<int64_t>(t) * kv_rows;
    for (int64_t h = 0; h < nkv; ++h) {
      rms_norm(kt + h * hd, w.k_norm.data(), c.rms_norm_eps, hd, kt + h * hd);
      apply_rope(kt + h * hd, c.rotary_dim, cos, sin);
    }
    const KvRows& kv = seqs[static_cast<size_t>(row_seq[t])].state.kv;
    kv.cache->write(kv.row(pos), kt, v + static_cast<int64_t>(t) * kv_rows);
  });

  // Each run's cache rows [0, pos0 + n) per kv head as one view: in place when its blocks are
  // adjacent, else gathered into scratch once for all the run's rows.
  std::vector<KvHeadView> views(seqs.size() * static_cast<size_t>(nkv));
  std::vector<std::vector<KvRowRun>> runs(seqs.size());
  std::vector<uint8_t*> gathered(seqs.size() * static_cast<size_t>(nkv), nullptr);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const KvRows& kv = seqs[s].state.kv;
    const int64_t len = seqs[s].pos0 + seqs[s].n;
    runs[s] = kv.runs(len);
    for (int64_t h = 0; h < nkv; ++h) {
      const size_t i = s * static_cast<size_t>(nkv) + static_cast<size_t>(h);
      if (runs[s].size() == 1)
        views[i] = kv.cache->head(static_cast<int>(h), runs[s][0].row);
      else
        gathered[i] = reinterpret_cast<uint8_t*>(ctx.arena.floats((kv.cache->gather_bytes(len) + 3) / 4));
    }
  }
  if (std::any_of(gathered.begin(), gathered.end(), [](const uint8_t* g) { return g != nullptr; }))
    ctx.pool.parallel_for(gathered.size(), [&](size_t i, int) {
      const size_t s = i / static_cast<size_t>(nkv);
      if (gathered[i] != nullptr)
        views[i] = seqs[s].state.kv.cache->gather(static_cast<int>(i % static_cast<size_t>(nkv)), runs[s],
                                                  gathered[i]);
    });

  // Causal GQA attention per (row, kv head): the nq / nkv query heads of kv head j read each cached
  // key and value row once between them.
  int64_t longest = 0;
  for (const SequenceRows& r : seqs) longest = std::max(longest, r.pos0 + r.n);
  const int64_t group = nq / nkv;
  float* o = ctx.arena.floats(static_cast<size_t>(n * nq * hd));
  const size_t per_thread = static_cast<size_t>(group * longest);
  float* scratch = ctx.arena.floats(static_cast<size_t>(ctx.pool.size()) * per_thread);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ctx.pool.parallel_for(static_cast<size_t>(n * nkv), [&](size_t task, int thread) {
    const int64_t t = static_cast<int64_t>(task) / nkv, kvh = static_cast<int64_t>(task) % nkv;
    const float* q = qg + t * q_rows + kvh * group * q_stride;
    float* oh = o + (t * nq + kvh * group) * hd;
    float* scores = scratch + static_cast<size_t>(thread) * per_thread;
    const KvHeadView& view =
        views[static_cast<size_t>(row_seq[t]) * static_cast<size_t>(nkv) + static_cast<size_t>(kvh)];
    attend_group(q, q_stride, static_cast<int>(group), view, position(t) + 1, static_cast<int>(hd), scale,
                 scores, oh, hd, ctx.ops);
    if (c.attn_output_gate)
      for (int64_t g = 0; g < group; ++g)
        for (int64_t d = 0; d < hd; ++d) oh[g * hd + d] *= sigmoid(q[g * q_stride + hd + d]);
  });

  matmul(matmul_problem(w.o_proj, o, nq * hd, n, out, H), ctx.pool, ctx.precision);
}

}  // namespace qwick
