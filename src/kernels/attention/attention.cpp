#include "kernels/attention/attention.h"

#include <cmath>
#include <vector>

#include "kernels/attention/kv_q8.h"

namespace qwick {
namespace {

// Row j of a kF32 or kQ8 cache's keys (or values) as f32: a kF32 row in place, a kQ8 row decoded
// into `buf` (head_dim floats, overwritten by the next call). bf16 rows go to the bf16 ops instead.
const float* f32_row(KvDtype dtype, const void* rows, const float* scales, int64_t j, int head_dim,
                     float* buf) {
  const size_t off = static_cast<size_t>(j) * static_cast<size_t>(head_dim);
  if (dtype == KvDtype::kF32) return static_cast<const float*>(rows) + off;
  const uint8_t* codes = static_cast<const uint8_t*>(rows) + off;
  for (int d = 0; d < head_dim; ++d) buf[d] = kv_q8_value(codes[d], scales[j]);
  return buf;
}

// f32_row's buffer: one a call, and none unless the rows need decoding.
std::vector<float> row_buffer(const KvHeadView& kv, int head_dim) {
  return std::vector<float>(kv.dtype == KvDtype::kQ8 ? static_cast<size_t>(head_dim) : 0);
}

}  // namespace

void attend(const float* q, const KvHeadView& kv, int64_t n_ctx, int head_dim, float scale, float* scores,
            float* out, const VectorOps& ops) {
  const bool bf16 = kv.dtype == KvDtype::kBF16;
  std::vector<float> buf = row_buffer(kv, head_dim);
  float max_score = -INFINITY;
  for (int64_t j = 0; j < n_ctx; ++j) {
    const size_t off = static_cast<size_t>(j) * static_cast<size_t>(head_dim);
    const float s = bf16 ? ops.dot_bf16(q, static_cast<const uint16_t*>(kv.k) + off, head_dim)
                         : ops.dot(q, f32_row(kv.dtype, kv.k, kv.k_scale, j, head_dim, buf.data()), head_dim);
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
      ops.axpy(out, scores[j] * inv, f32_row(kv.dtype, kv.v, kv.v_scale, j, head_dim, buf.data()), head_dim);
  }
}

void attend_group(const float* q, int64_t q_stride, int n_heads, const KvHeadView& kv, int64_t n_ctx,
                  int head_dim, float scale, float* scores, float* out, int64_t out_stride,
                  const VectorOps& ops) {
  const bool bf16 = kv.dtype == KvDtype::kBF16;
  std::vector<float> buf = row_buffer(kv, head_dim);
  if (bf16) {
    ops.qk_bf16(q, q_stride, n_heads, static_cast<const uint16_t*>(kv.k), n_ctx, head_dim, scale, scores);
  } else {
    for (int64_t j = 0; j < n_ctx; ++j) {
      const float* k = f32_row(kv.dtype, kv.k, kv.k_scale, j, head_dim, buf.data());
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
    const float* v = f32_row(kv.dtype, kv.v, kv.v_scale, j, head_dim, buf.data());
    for (int g = 0; g < n_heads; ++g) ops.axpy(out + g * out_stride, scores[g * n_ctx + j], v, head_dim);
  }
}

}  // namespace qwick
