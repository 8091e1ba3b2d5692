// One decoder layer on the CPU (model-spec.md §2.1): the main model's layers and the MTP head's.
#include "backend/cpu/cpu_layers.h"
#include "core/error.h"
#include "kernels/norm/rms_norm.h"

namespace qwick {

void decoder_layer(const CpuContext& ctx, const LayerWeights& w, std::span<const SequenceRows> seqs,
                   float* hidden, float* normed, float* branch, int64_t n) {
  const int64_t H = ctx.cfg.hidden_size;
  auto norm_rows = [&](const std::vector<float>& weight) {
    ctx.pool.parallel_for(static_cast<size_t>(n), [&](size_t t, int) {
      rms_norm(hidden + static_cast<int64_t>(t) * H, weight.data(), ctx.cfg.rms_norm_eps, H,
               normed + static_cast<int64_t>(t) * H);
    });
  };
  auto add_branch = [&] {
    ctx.pool.parallel_for(static_cast<size_t>(n), [&](size_t t, int) {
      for (int64_t j = 0; j < H; ++j)
        hidden[static_cast<int64_t>(t) * H + j] += branch[static_cast<int64_t>(t) * H + j];
    });
  };

  norm_rows(w.input_norm);
  ctx.arena.reset();  // layer temporaries live until the branch is added
  if (const auto* att = std::get_if<AttentionWeights>(&w.mixer)) {
    for (const SequenceRows& s : seqs)
      if (s.state.kv.cache == nullptr) fail("decoder_layer: an attention layer without a KV cache");
    attention_forward(ctx, *att, seqs, normed, n, branch);
  } else {
    for (const SequenceRows& s : seqs)
      if (s.state.deltanet == nullptr) fail("decoder_layer: a DeltaNet layer without its state");
    deltanet_forward(ctx, std::get<DeltaNetWeights>(w.mixer), seqs, normed, n, branch);
  }
  add_branch();
  norm_rows(w.post_norm);
  ctx.arena.reset();
  moe_forward(ctx, w.moe, normed, n, branch);
  add_branch();
}

}  // namespace qwick
