// The Gated DeltaNet layer on the GPU, decode and prefill (cuda_layers.h): the qkv|z|b|a input
// projections, the causal conv, the gates, the recurrence (deltanet_cuda.h, deltanet_chunked_cuda.h),
// the gated output norm and the output projection added to the residual.
#include "backend/cuda/cuda_layers.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/deltanet/deltanet_chunked_cuda.h"
#include "kernels/deltanet/deltanet_cuda.h"
#include "kernels/norm/norm_cuda.h"

namespace qwick::cuda {

namespace {

// Prefill chunks from this many rows run the DeltaNet recurrence in the chunked (WY) form; shorter
// ones (and decode) take the token scan, whose fixed cost is lower (one layer at the real shape,
// H200: 64 rows 47 µs token scan vs 67 µs chunked, 128 rows 84 vs 78).
constexpr int64_t kChunkedScanMinRows = 128;

}  // namespace

void decode_deltanet_layer(CudaContext& ctx, const CudaSequence& seq, const CudaDeltaNetWeights& w, int slot,
                           const float* input_norm) {
  const ModelConfig& cfg = ctx.cfg;
  const DecodeScratch& d = ctx.d;
  // d.proj slots: qkv, b, a, z. The fused step's launch may carry z (deltanet_decode_step_carries_z).
  const int64_t ps = ctx.proj_stride();
  float *proj_b = d.proj + ps, *proj_a = d.proj + 2 * ps, *proj_z = d.proj + 3 * ps;
  const bool z_along =
      ctx.options.fusion && deltanet_decode_step_carries_z(cfg.lin_k_dim, cfg.conv_kernel, w.z);
  if (z_along)
    ctx.gemv_stack({w.qkv, w.b, w.a}, w.proj_table, ctx.mixer_input(input_norm), d.proj, ps, input_norm);
  else
    ctx.gemv_stack({w.qkv, w.b, w.a, w.z}, w.proj_table, ctx.mixer_input(input_norm), d.proj, ps, input_norm);
  // From set seq.live into the other (launch_step).
  const auto& [conv_state, rec_state] =
      seq.deltanet[static_cast<size_t>(seq.live)][static_cast<size_t>(slot)];
  const auto& [conv_next, rec_next] =
      seq.deltanet[static_cast<size_t>(seq.live ^ 1)][static_cast<size_t>(slot)];
  DeltaNetConvArgs conv{d.proj, 0, 1, cfg.conv_channels(), w.conv, cfg.conv_kernel, conv_state, d.conv, 0};
  conv.state_out = conv_next;
  if (ctx.options.fusion) {
    DeltaNetDecodeStepArgs step{conv,
                                cfg.lin_n_k_heads,
                                cfg.lin_k_dim,
                                cfg.lin_n_v_heads,
                                cfg.lin_v_dim,
                                proj_b,
                                proj_a,
                                w.a_neg,
                                w.dt_bias,
                                rec_state,
                                rec_next,
                                d.dn_out,
                                ctx.options.overlap};
    if (z_along) {
      step.z = w.z;
      step.z_x = ctx.mixer_input(input_norm);
      step.z_norm = input_norm;
      step.z_eps = cfg.rms_norm_eps;
      step.z_out = proj_z;
      step.z_i16 = ctx.int16;
    }
    deltanet_decode_step(step, ctx.stream);
  } else {
    deltanet_conv(conv, ctx.stream);
    deltanet_prepare({d.conv, 0, 1, cfg.lin_n_k_heads, cfg.lin_k_dim, cfg.lin_n_v_heads, proj_b, proj_a, 0,
                      w.a_neg, w.dt_bias, d.beta, d.decay},
                     ctx.stream);
    DeltaNetScanArgs scan{
        d.conv,        0,         d.beta,   d.decay, 1, cfg.lin_n_k_heads, cfg.lin_n_v_heads, cfg.lin_k_dim,
        cfg.lin_v_dim, rec_state, d.dn_out, 0};
    scan.state_out = rec_next;
    deltanet_scan(scan, ctx.stream);
  }
  if (ctx.options.fusion && gemv_gated_norm_fits(cfg.lin_v_dim) && ps % 4 == 0) {
    // out_proj · gated_norm(o, z): the per-head norm and the gate applied as the gemv reads o.
    GemvArgs a = ctx.gemv_args(w.out);
    a.x = d.dn_out;
    a.gate_z = proj_z;
    a.head_dim = cfg.lin_v_dim;
    a.norm_weight = w.norm;
    a.eps = cfg.rms_norm_eps;
    a.y = d.x;
    a.accumulate = true;
    gemv(a, ctx.stream);
    return;
  }
  gated_rms_norm_rows({d.dn_out, 0, proj_z, 0, 1, cfg.lin_n_v_heads, cfg.lin_v_dim, w.norm, cfg.rms_norm_eps,
                       d.dn_normed, nullptr, 0},
                      ctx.stream);
  ctx.gemv_one(w.out, d.dn_normed, d.x, true);
}

void prefill_deltanet_layer(CudaContext& ctx, const CudaSequence& seq, const CudaDeltaNetWeights& w, int slot,
                            int64_t n) {
  const ModelConfig& cfg = ctx.cfg;
  const PrefillScratch& p = ctx.p;
  const int64_t H = cfg.hidden_size, C = cfg.conv_channels(), Vt = cfg.lin_v_total(), Hv = cfg.lin_n_v_heads;
  ctx.timer.mark("deltanet: qkv z b a projections");
  // In bf16 in the f32 buffer: read by the conv, the gated norm and the gates only, which then move
  // half the bytes.
  uint16_t* const in16 = reinterpret_cast<uint16_t*>(p.dn_in);
  const int64_t ld = ctx.project_in(w.in_proj, w.in_proj16, {w.qkv, w.z, w.b, w.a}, p.dn_in, n, in16);
  // Where q|k|v, z, b and a start.
  const int64_t at_z = C, at_b = at_z + Vt, at_a = at_b + Hv;
  const auto& [conv_state, rec_state] =
      seq.deltanet[static_cast<size_t>(seq.live)][static_cast<size_t>(slot)];
  ctx.timer.mark("deltanet: conv, gates");
  DeltaNetConvArgs conv{nullptr, ld, n, C, w.conv, cfg.conv_kernel, conv_state, p.conv, C};
  conv.in_bf16 = in16;
  conv.overlap = ctx.prefill_overlap();
  if (deltanet_conv_norms(cfg.lin_k_dim)) {  // q and k normalised in the conv
    conv.norm_heads = cfg.lin_n_k_heads;
    conv.norm_dim = cfg.lin_k_dim;
  }
  deltanet_conv(conv, ctx.stream);
  DeltaNetPrepareArgs gates{
      p.conv,  C,  n,       cfg.lin_n_k_heads, cfg.lin_k_dim, cfg.lin_n_v_heads, nullptr,
      nullptr, ld, w.a_neg, w.dt_bias,         p.beta,        p.decay,           conv.norm_heads > 0};
  gates.b_bf16 = in16 + at_b;
  gates.a_bf16 = in16 + at_a;
  gates.overlap = ctx.prefill_overlap();
  deltanet_prepare(gates, ctx.stream);
  ctx.timer.mark("deltanet: scan");
  DeltaNetScanArgs scan{
      p.conv,        C,         p.beta,   p.decay, n, cfg.lin_n_k_heads, cfg.lin_n_v_heads, cfg.lin_k_dim,
      cfg.lin_v_dim, rec_state, p.dn_out, Vt};
  scan.overlap = ctx.prefill_overlap();
  if (n >= kChunkedScanMinRows && deltanet_chunked_supported(scan))
    deltanet_chunked_scan(scan, p.dn_chunked, ctx.stream);
  else
    deltanet_scan(scan, ctx.stream);
  ctx.timer.mark("deltanet: gated norm");
  GatedNormArgs norm{p.dn_out,      Vt,     nullptr,          ld,      n,      cfg.lin_n_v_heads,
                     cfg.lin_v_dim, w.norm, cfg.rms_norm_eps, nullptr, p.dn16, Vt};
  norm.z_bf16 = in16 + at_z;
  norm.overlap = ctx.prefill_overlap();
  gated_rms_norm_rows(norm, ctx.stream);
  ctx.timer.mark("deltanet: out projection");
  ctx.gemm_one(ctx.prefill_matrix(w.out, w.out16, n), p.dn16, Vt, n, p.hidden, H, true);
}

}  // namespace qwick::cuda
