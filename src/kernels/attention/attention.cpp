#include "kernels/attention/attention.h"

#include <cmath>

namespace qwick {

void attend(const float* q, const KvHeadView& kv, int64_t n_ctx, int head_dim, float scale, float* scores,
            float* out, const VectorOps& ops) {
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

namespace qwick {

void attend_group(const float* q, int64_t q_stride, int n_heads, const KvHeadView& kv, int64_t n_ctx,
                  int head_dim, float scale, float* scores, float* out, int64_t out_stride,
                  const VectorOps& ops) {
  const bool bf16 = kv.dtype == KvDtype::kBF16;
  if (bf16) {
    ops.qk_bf16(q, q_stride, n_heads, static_cast<const uint16_t*>(kv.k), n_ctx, head_dim, scale, scores);
  } else {
    for (int64_t j = 0; j < n_ctx; ++j) {
      const float* k = static_cast<const float*>(kv.k) + j * head_dim;
      for (int g = 0; g < n_heads; ++g)
        scores[g * n_ctx + j] = ops.dot(q + g * q_stride, k, head_dim) * scale;
    }
  }
  for (int g = 0; g < n_heads; ++g) {
    float* s = scores + g * n_ctx;
    float max_score = -INFINITY;
    for (int64_t j = 0; j < n_ctx; ++j) max_score = std::fmax(max_score, s[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < n_ctx; ++j) sum += s[j] = std::exp(s[j] - max_score);
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n_ctx; ++j) s[j] *= inv;
    for (int d = 0; d < head_dim; ++d) out[g * out_stride + d] = 0.0f;
  }
  if (bf16) {
    ops.pv_bf16(scores, n_heads, n_ctx, static_cast<const uint16_t*>(kv.v), head_dim, out, out_stride);
    return;
  }
  for (int64_t j = 0; j < n_ctx; ++j) {
    const float* v = static_cast<const float*>(kv.v) + j * head_dim;
    for (int g = 0; g < n_heads; ++g) ops.axpy(out + g * out_stride, scores[g * n_ctx + j], v, head_dim);
  }
}

}  // namespace qwick
