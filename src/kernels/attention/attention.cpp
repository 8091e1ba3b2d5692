#include "kernels/attention/attention.h"

#include <cmath>

namespace qwick {

void attend(const float* q, const KvHeadView& kv, int64_t n_ctx, int head_dim, float scale, float* scores, float* out,
            const VectorOps& ops) {
  const bool bf16 = kv.dtype == KvDtype::kBF16;
  float max_score = -INFINITY;
  for (int64_t j = 0; j < n_ctx; ++j) {
    const size_t off = static_cast<size_t>(j) * static_cast<size_t>(head_dim);
    const float s = bf16 ? ops.dot_bf16(q, static_cast<const uint16_t*>(kv.k) + off, head_dim)
                         : ops.dot(q, static_cast<const float*>(kv.k) + off, head_dim);
    scores[j] = s * scale;
    max_score = std::fmax(max_score, scores[j]);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n_ctx; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    sum += scores[j];
  }
  for (int d = 0; d < head_dim; ++d) out[d] = 0.0f;
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n_ctx; ++j) {
    const size_t off = static_cast<size_t>(j) * static_cast<size_t>(head_dim);
    if (bf16)
      ops.axpy_bf16(out, scores[j] * inv, static_cast<const uint16_t*>(kv.v) + off, head_dim);
    else
      ops.axpy(out, scores[j] * inv, static_cast<const float*>(kv.v) + off, head_dim);
  }
}

}  // namespace qwick
