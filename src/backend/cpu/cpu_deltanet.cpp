// Gated DeltaNet on the CPU (model-spec.md §2.5): token-by-token scan with the fp32 state.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_layers.h"
#include "kernels/deltanet/deltanet.h"
#include "kernels/matmul/matmul_parallel.h"
#include "kernels/norm/rms_norm.h"

namespace qwick {

void deltanet_forward(const CpuContext& ctx, const DeltaNetWeights& w, std::span<const SequenceRows> seqs,
                      const float* x, int64_t n, float* out) {
  const ModelConfig& c = ctx.cfg;
  const int64_t H = c.hidden_size, C = c.conv_channels(), Vt = c.lin_v_total();
  const int64_t Hk = c.lin_n_k_heads, Hv = c.lin_n_v_heads, Dk = c.lin_k_dim, Dv = c.lin_v_dim;
  const int64_t key_dim = c.lin_q_dim();

  float* qkv = ctx.arena.floats(static_cast<size_t>(n * C));
  float* z = ctx.arena.floats(static_cast<size_t>(n * Vt));
  float* b = ctx.arena.floats(static_cast<size_t>(n * Hv));
  float* a = ctx.arena.floats(static_cast<size_t>(n * Hv));
  const MatmulProblem proj[] = {
      matmul_problem(w.in_proj_qkv, x, H, n, qkv, C), matmul_problem(w.in_proj_z, x, H, n, z, Vt),
      matmul_problem(w.in_proj_b, x, H, n, b, Hv), matmul_problem(w.in_proj_a, x, H, n, a, Hv)};
  matmul_batch(proj, ctx.pool, ctx.precision);

  // Each row's conv window ends with the last K-1 rows of [window before the step | the step's rows].
  const int64_t W = c.conv_kernel - 1;
  for (const SequenceRows& s : seqs) {
    if (s.state.row_states == nullptr) continue;
    const float* rows = qkv + s.row0 * C;
    for (int64_t t = 0; t < s.n; ++t)
      for (int64_t r = 0; r < W; ++r) {
        const int64_t j = t + 1 - W + r;  // row of the step (negative: of the window before it)
        const float* src = j >= 0 ? rows + j * C : s.state.deltanet->conv.data() + (W + j) * C;
        std::copy_n(src, C, s.state.row_states[t].conv.data() + r * C);
      }
  }

  // Causal conv + SiLU over (sequence, channel block).
  float* conv = ctx.arena.floats(static_cast<size_t>(n * C));
  constexpr int64_t kChannelBlock = 256;
  const int64_t channel_blocks = (C + kChannelBlock - 1) / kChannelBlock;
  ctx.pool.parallel_for(seqs.size() * static_cast<size_t>(channel_blocks), [&](size_t i, int) {
    const SequenceRows& s = seqs[i / static_cast<size_t>(channel_blocks)];
    const int64_t c0 = static_cast<int64_t>(i % static_cast<size_t>(channel_blocks)) * kChannelBlock;
    causal_conv_silu(qkv + s.row0 * C, s.n, C, w.conv.data(), c.conv_kernel, s.state.deltanet->conv.data(),
                     conv + s.row0 * C, c0, std::min(C, c0 + kChannelBlock));
  });

  // Per row: L2-normalise q (then scale by Dk^-1/2) and k per key head; beta and decay per value head.
  float* beta = ctx.arena.floats(static_cast<size_t>(n * Hv));
  float* decay = ctx.arena.floats(static_cast<size_t>(n * Hv));
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(Dk));
  ctx.pool.parallel_for(static_cast<size_t>(n), [&](size_t t, int) {
    float* row = conv + static_cast<int64_t>(t) * C;
    for (int64_t h = 0; h < Hk; ++h) {
      l2_norm(row + h * Dk, Dk, 1e-6f, q_scale);
      l2_norm(row + key_dim + h * Dk, Dk, 1e-6f, 1.0f);
    }
    deltanet_gates(b + t * Hv, a + t * Hv, w.a_neg.data(), w.dt_bias.data(), Hv, beta + t * Hv,
                   decay + t * Hv);
  });

  // The recurrence, one (sequence, value head) per task; value head h reads key head h / (Hv / Hk).
  float* o = ctx.arena.floats(static_cast<size_t>(n * Vt));
  ctx.pool.parallel_for(seqs.size() * static_cast<size_t>(Hv), [&](size_t task, int) {
    const SequenceRows& s = seqs[task / static_cast<size_t>(Hv)];
    const int64_t h = static_cast<int64_t>(task % static_cast<size_t>(Hv)), kh = h / (Hv / Hk);
    const float* rows = conv + s.row0 * C;
    DeltaNetHeadScan scan{
        rows + kh * Dk,          rows + key_dim + kh * Dk, C,  rows + 2 * key_dim + h * Dv, C,
        decay + s.row0 * Hv + h, beta + s.row0 * Hv + h,   Hv, o + s.row0 * Vt + h * Dv,    Vt};
    float* head_state = s.state.deltanet->recurrent.data() + h * Dv * Dk;
    if (s.state.row_states == nullptr) {
      deltanet_scan_head(scan, s.n, Dk, Dv, head_state, ctx.ops);
      return;
    }
    for (int64_t t = 0; t < s.n; ++t) {  // row by row (the same arithmetic), keeping the state after each
      const DeltaNetHeadScan row{scan.q + t * C,      scan.k + t * C,     C,  scan.v + t * C,  C,
                                 scan.decay + t * Hv, scan.beta + t * Hv, Hv, scan.o + t * Vt, Vt};
      deltanet_scan_head(row, 1, Dk, Dv, head_state, ctx.ops);
      std::copy_n(head_state, Dv * Dk, s.state.row_states[t].recurrent.data() + h * Dv * Dk);
    }
  });

  // Gated RMSNorm per (row, value head), then the output projection.
  ctx.pool.parallel_for(static_cast<size_t>(n), [&](size_t t, int) {
    for (int64_t h = 0; h < Hv; ++h) {
      float* oh = o + static_cast<int64_t>(t) * Vt + h * Dv;
      gated_rms_norm(oh, z + static_cast<int64_t>(t) * Vt + h * Dv, w.norm.data(), c.rms_norm_eps, Dv, oh);
    }
  });
  matmul(matmul_problem(w.out_proj, o, Vt, n, out, H), ctx.pool, ctx.precision);
}

}  // namespace qwick
