// The MoE layer on the GPU, decode and prefill (cuda_layers.h).
//
// decode   the fused kernels of moe_decode (router, experts' gate|up and down in one pass, combine)
//          read the residual and apply the post-attention norm themselves; where the fused kernels do
//          not take the shapes or formats, or with CudaOptions::fusion off, the reference chain: an
//          RMSNorm kernel, the router and shared gate as one GEMV stack, routing, the experts'
//          gate|up, SwiGLU, down and the weighted combine as kernels of their own.
// prefill  the shared expert on the side stream beside the router, routing and grouping (all on the
//          device), the routed experts' grouped GEMMs (SwiGLU in the wgmma kernel's epilogue), and the
//          combine, which also computes the next layer's input norm.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_layers.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/norm/norm_cuda.h"

namespace qwick::cuda {

namespace {

void decode_moe_fused(CudaContext& ctx, const CudaLayerWeights& lw, int L) {
  const ModelConfig& cfg = ctx.cfg;
  const DecodeScratch& d = ctx.d;
  const CudaMoeWeights& w = lw.moe;
  MoeDecodeArgs a;
  a.x = d.x;
  a.norm_weight = lw.post_norm;
  a.eps = cfg.rms_norm_eps;
  a.H = cfg.hidden_size;
  a.I = cfg.expert_dim;
  a.E = cfg.n_experts;
  a.k = cfg.n_experts_per_tok;
  a.route_table = w.route_table;
  a.route_format = w.router.format;
  a.experts = w.experts;
  a.expert_format = w.expert_format;
  a.logits = d.router;
  a.ids = d.ids;
  a.weights = d.weights;
  a.counter = d.route_counter;
  a.sync = d.moe_sync + kMoeSyncWords * L;
  a.act = d.act;
  a.i16 = ctx.int16;
  a.overlap = ctx.options.overlap;
  moe_decode(a, ctx.stream);
}

void decode_moe_unfused(CudaContext& ctx, const CudaMoeWeights& w) {
  const ModelConfig& cfg = ctx.cfg;
  const DecodeScratch& d = ctx.d;
  const int64_t H = cfg.hidden_size, E = cfg.n_experts, k = cfg.n_experts_per_tok, Im = ctx.imax();
  ctx.gemv_stack({w.router, w.shared_gate}, w.route_table, d.normed, d.router, E);
  moe_route_decode(d.router, static_cast<int>(E), static_cast<int>(k), d.ids, d.weights, d.gate_up_index,
                   d.down_index, ctx.stream);
  // gate|up rows: [gate of the k experts | up of the k experts | shared gate | shared up].
  const bool shared_too = same_format(w.shared_gate_proj, w.shared_up) &&
                          w.shared_gate_proj.format == w.expert_format &&
                          w.shared_down.format == w.expert_format;
  GemvArgs gu = ctx.gemv_settings();
  gu.table = w.experts;
  gu.index = d.gate_up_index;
  gu.problems = static_cast<int>(shared_too ? 2 * k + 2 : 2 * k);
  gu.format = w.expert_format;
  gu.max_rows = Im;
  gu.max_cols = H;
  gu.x = d.normed;
  gu.y = d.gate_up;
  gu.y_stride = Im;
  gemv(gu, ctx.stream);
  if (!shared_too) {
    ctx.gemv_one(w.shared_gate_proj, d.normed, d.gate_up + 2 * k * Im, false);
    ctx.gemv_one(w.shared_up, d.normed, d.gate_up + (2 * k + 1) * Im, false);
  }
  swiglu(d.gate_up, d.gate_up + k * Im, Im, k, cfg.expert_dim, d.act, Im, false, ctx.stream);
  swiglu(d.gate_up + 2 * k * Im, d.gate_up + (2 * k + 1) * Im, Im, 1, cfg.shared_expert_dim, d.act + k * Im,
         Im, false, ctx.stream);
  GemvArgs dn = ctx.gemv_settings();
  dn.table = w.experts;
  dn.index = d.down_index;
  dn.problems = static_cast<int>(shared_too ? k + 1 : k);
  dn.format = w.expert_format;
  dn.max_rows = H;
  dn.max_cols = Im;
  dn.x = d.act;
  dn.x_stride = Im;
  dn.y = d.down;
  dn.y_stride = H;
  gemv(dn, ctx.stream);
  if (!shared_too) ctx.gemv_one(w.shared_down, d.act + k * Im, d.down + k * H, false);
  MoeCombine c{d.x,          1, H, static_cast<int>(k), d.weights, nullptr, d.down, H, d.down + k * H, H,
               d.router + E, 1};
  moe_combine(c, ctx.stream);
}

// Most slots per tile of the expert groups of an n-row chunk. The wgmma kernel takes 128 (64 for the
// simple one: each dequantized W slice then serves up to 128 rows); gemm() runs it only for gate|up
// widths a multiple of 128. It takes 144 once an expert's rows (n·k/E on average, give or take
// its square root for an even router) often pass 128: at a 4096-row chunk, 128 ± 11, 128-slot
// tiles left a thin second tile, which decodes the whole W slice again, for half the experts.
// Shorter chunks keep 128: the 144-slot kernel has one pipeline stage fewer.
int expert_tile_rows(const ModelConfig& cfg, int64_t n) {
  const int64_t E = cfg.n_experts, k = cfg.n_experts_per_tok, I = cfg.expert_dim;
  if (I % 128 != 0) return kGemmTileRows;
  return n * k >= 112 * E ? 144 : 128;
}

// gate|up of the expert table's entry at table_base (gate, then up: parts of `rows` each) from the MoE
// input, into y [*, 2·rows]; the caller adds the slots (n, or a tile list).
GemmArgs expert_gate_up(const CudaContext& ctx, const CudaMoeWeights& w, int table_base, int64_t rows,
                        float* y) {
  const ModelConfig& cfg = ctx.cfg;
  const PrefillScratch& p = ctx.p;
  GemmArgs a;
  a.table = w.experts;
  a.table_stride = 3;
  a.table_base = table_base;
  a.part_rows = rows;
  a.format = w.expert_format;
  a.K = cfg.hidden_size;
  a.N = 2 * rows;
  a.x = p.normed;
  a.ldx = cfg.hidden_size;
  a.y = y;
  a.ldy = 2 * rows;
  return a;
}

// The shared expert of an n-row chunk into p.shared_down, on stream `s`.
void prefill_shared_expert(CudaContext& ctx, const CudaMoeWeights& w, int64_t n, cudaStream_t s) {
  const ModelConfig& cfg = ctx.cfg;
  const PrefillScratch& p = ctx.p;
  const int64_t H = cfg.hidden_size, E = cfg.n_experts, S = cfg.shared_expert_dim;
  ctx.timer.mark("moe: shared expert");
  // SwiGLU in the wgmma kernel's epilogue (the expert table), as for the routed experts, or in
  // gemm_tma's over the stacked bf16 copy.
  const bool in_table = w.shared_gate_proj.format == w.expert_format &&
                        same_format(w.shared_gate_proj, w.shared_up) && S % 128 == 0;
  const bool copy = ctx.reads_copy(w.shared_gate_up16, n);
  if (copy) {
    GemmArgs su = gemm_args(w.shared_gate_up16, p.normed, H, n, nullptr, 0);
    su.act = p.shared_act;
    su.ld_act = S;
    gemm(su, s);
  } else if (in_table) {
    // gate|up in one launch through the expert table (the shared expert is its entry E): twice the
    // blocks of either alone.
    GemmArgs su = expert_gate_up(ctx, w, static_cast<int>(3 * E), S, p.shared_gate_up);
    su.n = n;
    su.act = p.shared_act;
    su.ld_act = S;
    gemm(su, s);
  } else {
    ctx.gemm_one(w.shared_gate_proj, p.normed, H, n, p.shared_gate_up, 2 * S, false, s);
    ctx.gemm_one(w.shared_up, p.normed, H, n, p.shared_gate_up + S, 2 * S, false, s);
  }
  if (!in_table && !copy)
    swiglu(p.shared_gate_up, p.shared_gate_up + S, 2 * S, n, S, p.shared_act, S, true, s);
  ctx.gemm_one(ctx.prefill_matrix(w.shared_down, w.shared_down16, n), p.shared_act, S, n, p.shared_down, H,
               false, s);
}

}  // namespace

void decode_moe_layer(CudaContext& ctx, const CudaLayerWeights& lw, int layer) {
  const ModelConfig& cfg = ctx.cfg;
  const CudaMoeWeights& w = lw.moe;
  if (ctx.options.fusion &&
      moe_decode_fits(w.router.format, w.expert_format, cfg.expert_dim, cfg.shared_expert_dim,
                      cfg.n_experts_per_tok) &&
      same_format(w.router, w.shared_gate) && same_format(w.shared_gate_proj, w.shared_up) &&
      w.shared_gate_proj.format == w.expert_format && w.shared_down.format == w.expert_format) {
    decode_moe_fused(ctx, lw, layer);
  } else {
    rms_norm_rows(ctx.d.x, 1, cfg.hidden_size, lw.post_norm, cfg.rms_norm_eps, ctx.d.normed, nullptr,
                  ctx.stream);
    decode_moe_unfused(ctx, w);
  }
}

// next_norm: the next layer's input norm, which the combine then computes into p.normed.
void prefill_moe_layer(CudaContext& ctx, const CudaMoeWeights& w, int64_t n, const float* next_norm) {
  const ModelConfig& cfg = ctx.cfg;
  PrefillScratch& p = ctx.p;
  // The shared expert needs no routing: on the side stream it fills the SMs that the router and the
  // routing (narrow launches, one last block for the scan) leave idle. Serial while stages are timed,
  // so each stage keeps its own time.
  const bool side = !ctx.timer.active();
  if (side) {
    check(cudaEventRecord(ctx.fork, ctx.stream), "prefill fork");
    check(cudaStreamWaitEvent(ctx.side, ctx.fork), "prefill fork");
  }
  prefill_shared_expert(ctx, w, n, side ? ctx.side : ctx.stream);
  if (side) check(cudaEventRecord(ctx.join, ctx.side), "prefill join");
  const int64_t H = cfg.hidden_size, E = cfg.n_experts, k = cfg.n_experts_per_tok, I = cfg.expert_dim;
  // Router logits [n, E] and the shared expert's gate logit (column E), at stride route_ld(): from
  // the bf16 MoE input like every other prefill product, and like the CPU backend's prefill (bf16
  // inputs and weights, f32 sums), so both pick alike; decode routes from f32 inputs. The weights
  // were decoded to bf16 at upload.
  ctx.timer.mark("moe: router");
  const int64_t ld_route = ctx.route_ld(), ld_logit = ld_route;
  const float* const shared_logit = p.router + E;
  ctx.gemm_one(w.route16, p.normed, H, n, p.router, ld_route, false);
  ctx.timer.mark("moe: route, group");
  p.grouping.tile_rows = expert_tile_rows(cfg, n);
  moe_route_group(p.router, ld_route, n, static_cast<int>(E), static_cast<int>(k), p.ids, p.weights,
                  p.grouping, ctx.stream, ctx.prefill_overlap());

  GemmArgs gu = expert_gate_up(ctx, w, 0, I, p.gate_up);
  gu.x_rows = p.grouping.slot_row;
  gu.tiles = p.grouping.tiles;
  gu.tile_count = p.grouping.tile_count;
  gu.max_tiles = moe_max_tiles(n * k, static_cast<int>(E));
  gu.tile_rows = p.grouping.tile_rows;
  gu.overlap = ctx.prefill_overlap();
  // The wgmma kernel applies SwiGLU in its epilogue (GemmArgs::act); where the simple kernel runs
  // (widths not a multiple of 64), gate|up stays in f32 for the swiglu kernel.
  const bool fused_swiglu = I % 64 == 0;
  ctx.timer.mark("moe: experts gate|up");
  if (fused_swiglu) {
    GemmArgs fused = gu;
    fused.act = p.act;
    fused.ld_act = I;
    gemm(fused, ctx.stream);
  } else {
    gemm(gu, ctx.stream);
    ctx.timer.mark("moe: swiglu");
    swiglu(p.gate_up, p.gate_up + I, 2 * I, n * k, I, p.act, I, true, ctx.stream);
  }
  GemmArgs dn = gu;
  dn.table_base = 2;
  dn.part_rows = 0;
  dn.K = I;
  dn.N = H;
  dn.x = p.act;
  dn.ldx = I;
  dn.x_rows = nullptr;
  dn.y = p.down;
  dn.ldy = H;
  // bf16 rows for the combine (the buffer is sized for f32 ones).
  uint16_t* const down16 = reinterpret_cast<uint16_t*>(p.down);
  dn.y = nullptr, dn.y16 = down16;
  ctx.timer.mark("moe: experts down");
  gemm(dn, ctx.stream);

  if (side) check(cudaStreamWaitEvent(ctx.stream, ctx.join), "prefill join");
  MoeCombine c{p.hidden,           n,       H, static_cast<int>(k), p.weights,
               p.grouping.slot_of, p.down,  H, p.shared_down,       H,
               shared_logit,       ld_logit};
  c.down16 = down16;
  // Plain after the side stream's join: an event wait, not a kernel, comes before it.
  c.overlap = ctx.prefill_overlap() && !side;
  if (next_norm) {
    c.norm_weight = next_norm;
    c.eps = cfg.rms_norm_eps;
    c.normed = p.normed;
  }
  ctx.timer.mark("moe: combine");
  moe_combine(c, ctx.stream);
}

}  // namespace qwick::cuda
