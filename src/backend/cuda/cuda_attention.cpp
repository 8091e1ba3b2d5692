// The gated attention layer on the GPU, decode and prefill (cuda_layers.h): the q|k|v (and output
// gate) projections, attention_prep (q and k norms, RoPE, the new rows into the KV cache), the
// attention kernels (attention_cuda.h) and the output projection added to the residual.
#include <cmath>
#include <tuple>

#include "backend/cuda/cuda_layers.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/cuda/cuda_launch.h"

namespace qwick::cuda {

// d.proj slots: q, k, v, and the gate's rows unless the combine computes them (gate_rows):
// then the q|k|v stack lets the chain after it start only past its wait, so the combine, launched
// while the splits run, may read the layer's input (AttentionDecodeArgs::gate_proj).
void decode_attention_layer(CudaContext& ctx, const CudaSequence& seq, const CudaAttentionWeights& w,
                            int slot, const float* input_norm) {
  const ModelConfig& cfg = ctx.cfg;
  const DecodeScratch& d = ctx.d;
  const int64_t ps = ctx.proj_stride(), hd = cfg.head_dim;
  const float* x = ctx.mixer_input(input_norm);
  const bool gated = cfg.attn_output_gate, gate_rows = gated && attention_gate_rows_fit(w.gate);
  if (gated && !gate_rows)
    ctx.gemv_stack({w.q, w.k, w.v, w.gate}, w.qkv_table, x, d.proj, ps, input_norm);
  else
    ctx.gemv_stack({w.q, w.k, w.v}, w.qkv_table, x, d.proj, ps, input_norm, gate_rows);
  const KvLayer& kv = seq.kv[static_cast<size_t>(slot)];
  AttentionPrepArgs prep{d.proj,
                         0,
                         hd,
                         d.proj + ps,
                         d.proj + 2 * ps,
                         0,
                         1,
                         0,
                         d.position,
                         cfg.n_heads,
                         cfg.n_kv_heads,
                         cfg.head_dim,
                         cfg.rotary_dim,
                         w.q_norm,
                         w.k_norm,
                         cfg.rms_norm_eps,
                         ctx.weights.rope_inv_freq,
                         d.q,
                         nullptr,
                         kv.k,
                         kv.v,
                         ctx.max_context,
                         ctx.options.overlap,
                         kv.k_scale,
                         kv.v_scale};
  attention_prep(prep, ctx.stream);
  AttentionDecodeArgs at{d.q,
                         kv.k,
                         kv.v,
                         ctx.max_context,
                         d.position,
                         cfg.n_heads,
                         cfg.n_kv_heads,
                         cfg.head_dim,
                         1.0f / std::sqrt(static_cast<float>(hd)),
                         ctx.attention_splits,
                         d.partial,
                         gated && !gate_rows ? d.proj + 3 * ps : nullptr,
                         hd,
                         d.att_out,
                         ctx.options.overlap};
  if (gate_rows) at.gate_proj = w.gate, at.gate_x = x, at.gate_norm = input_norm, at.eps = cfg.rms_norm_eps;
  at.k_scale = kv.k_scale, at.v_scale = kv.v_scale;
  attention_decode(at, ctx.stream);
  ctx.gemv_one(w.o, d.att_out, d.x, true);
}

void prefill_attention_layer(CudaContext& ctx, const CudaSequence& seq, const CudaAttentionWeights& w,
                             int slot, int64_t n) {
  const ModelConfig& cfg = ctx.cfg;
  const PrefillScratch& p = ctx.p;
  // p.att_in's columns: q, the gate (with the output gate; CudaAttentionWeights), then k at q_rows, v.
  const int64_t hd = cfg.head_dim, q_rows = cfg.q_proj_rows(), kvr = int64_t{cfg.n_kv_heads} * hd;
  const int64_t nq_hd = int64_t{cfg.n_heads} * hd, H = cfg.hidden_size;
  const bool gated = cfg.attn_output_gate;
  ctx.timer.mark("attention: q k v projections");
  const int64_t ld = gated ? ctx.project_in(w.in_proj, w.in_proj16, {w.q, w.gate, w.k, w.v}, p.att_in, n)
                           : ctx.project_in(w.in_proj, w.in_proj16, {w.q, w.k, w.v}, p.att_in, n);
  const float* q = p.att_in;
  const KvLayer& kv = seq.kv[static_cast<size_t>(slot)];
  AttentionPrepArgs prep{q,
                         ld,
                         hd,
                         q + q_rows,
                         q + q_rows + kvr,
                         ld,
                         n,
                         seq.position,
                         nullptr,
                         cfg.n_heads,
                         cfg.n_kv_heads,
                         cfg.head_dim,
                         cfg.rotary_dim,
                         w.q_norm,
                         w.k_norm,
                         cfg.rms_norm_eps,
                         ctx.weights.rope_inv_freq,
                         nullptr,
                         p.q16,
                         kv.k,
                         kv.v,
                         ctx.max_context,
                         ctx.prefill_overlap(),
                         kv.k_scale,
                         kv.v_scale};
  ctx.timer.mark("attention: norm, rope, cache");
  attention_prep(prep, ctx.stream);
  // A q8 cache is read through its bf16 copy, rows [0, seq.position + n) made afresh for each chunk.
  const auto [kc, vc] =
      seq.kv_q8() ? seq.kv_bf16 : std::pair{static_cast<uint16_t*>(kv.k), static_cast<uint16_t*>(kv.v)};
  if (seq.kv_q8()) {
    ctx.timer.mark("attention: q8 cache to bf16");
    for (auto [from, scales, to] : {std::tuple{kv.k, kv.k_scale, kc}, std::tuple{kv.v, kv.v_scale, vc}})
      kv_q8_to_bf16(static_cast<const uint8_t*>(from), scales, seq.position + n, cfg.n_kv_heads, cfg.head_dim,
                    ctx.max_context, to, ctx.stream);
  }
  AttentionPrefillArgs at{p.q16,
                          kc,
                          vc,
                          ctx.max_context,
                          n,
                          seq.position,
                          cfg.n_heads,
                          cfg.n_kv_heads,
                          cfg.head_dim,
                          1.0f / std::sqrt(static_cast<float>(hd)),
                          gated ? q + nq_hd : nullptr,
                          ld,
                          hd,
                          p.att16};
  at.overlap = ctx.prefill_overlap();
  ctx.timer.mark("attention: flash prefill");
  attention_prefill(at, ctx.stream);
  ctx.timer.mark("attention: o projection");
  ctx.gemm_one(ctx.prefill_matrix(w.o, w.o16, n), p.att16, nq_hd, n, p.hidden, H, true);
}

}  // namespace qwick::cuda
