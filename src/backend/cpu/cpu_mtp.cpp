#include "backend/cpu/cpu_mtp.h"

#include "core/error.h"
#include "kernels/matmul/matmul.h"
#include "kernels/norm/rms_norm.h"

namespace qwick {

CpuMtpHead::CpuMtpHead(const ModelWeights& weights, const ModelConfig& cfg, KvDtype kv_dtype)
    : w_(weights),
      head_(weights.mtp ? *weights.mtp : throw Error("the model has no MTP head")),
      cfg_(cfg),
      cache_(kv_dtype, cfg.n_kv_heads, cfg.head_dim) {}

void CpuMtpHead::forward(const CpuContext& ctx, const int32_t* tokens, const float* hidden, int64_t n,
                         int64_t pos0, float* out, float* logits) {
  if (n <= 0) return;
  const int64_t H = cfg_.hidden_size;
  joined_.reserve(static_cast<size_t>(n * 2 * H));
  for (AlignedBuffer<float>* b : {&x_, &normed_, &branch_}) b->reserve(static_cast<size_t>(n * H));
  float* joined = joined_.data();
  float* x = x_.data();

  // Per row: [normed embedding of the token | normed hidden state], then the fc down to hidden.
  ctx.pool.parallel_for(static_cast<size_t>(n), [&](size_t t, int) {
    float* row = joined + t * 2 * static_cast<size_t>(H);
    dequantize_row(w_.embed, tokens[t], row);
    rms_norm(row, head_.pre_fc_norm_embedding.data(), cfg_.rms_norm_eps, H, row);
    rms_norm(hidden + t * static_cast<size_t>(H), head_.pre_fc_norm_hidden.data(), cfg_.rms_norm_eps, H,
             row + H);
  });
  matmul(matmul_problem(head_.fc, joined, static_cast<size_t>(2 * H), static_cast<size_t>(n), x,
                        static_cast<size_t>(H)),
         ctx.pool, ctx.precision);

  const SequenceRows rows{0, n, pos0, LayerState{KvRows{&cache_, {}}, nullptr, nullptr}};
  decoder_layer(ctx, head_.layer, std::span<const SequenceRows>(&rows, 1), x, normed_.data(), branch_.data(),
                n);

  if (out == nullptr) return;
  const float* last = x + (n - 1) * H;
  rms_norm(last, head_.norm.data(), cfg_.rms_norm_eps, H, out);
  if (logits != nullptr)
    matmul(matmul_problem(w_.lm_head, out, static_cast<size_t>(H), 1, logits,
                          static_cast<size_t>(cfg_.vocab_size)),
           ctx.pool, ctx.precision);
}

}  // namespace qwick
