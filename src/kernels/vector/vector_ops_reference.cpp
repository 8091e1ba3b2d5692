#include <cstring>

#include "kernels/vector/vector_ops.h"

namespace qwick {
namespace {

float bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

float dot_bf16(const float* a, const uint16_t* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * bf16(b[i]);
  return s;
}

void axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void axpy_bf16(float* y, float a, const uint16_t* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * bf16(x[i]);
}

float deltanet_row(float* s, const float* k, const float* q, float decay, float beta, float v, int64_t n) {
  const float u = decay * dot(s, k, n);
  const float delta = beta * (v - u);
  for (int64_t i = 0; i < n; ++i) s[i] = decay * s[i] + delta * k[i];
  return dot(s, q, n);
}

void qk_bf16(const float* q, int64_t q_stride, int n_heads, const uint16_t* k, int64_t n_ctx,
             int64_t head_dim, float scale, float* scores) {
  for (int64_t j = 0; j < n_ctx; ++j)
    for (int g = 0; g < n_heads; ++g)
      scores[g * n_ctx + j] = dot_bf16(q + g * q_stride, k + j * head_dim, head_dim) * scale;
}

void pv_bf16(const float* p, int n_heads, int64_t n_ctx, const uint16_t* v, int64_t head_dim, float* out,
             int64_t out_stride) {
  for (int64_t j = 0; j < n_ctx; ++j)
    for (int g = 0; g < n_heads; ++g)
      axpy_bf16(out + g * out_stride, p[g * n_ctx + j], v + j * head_dim, head_dim);
}

}  // namespace

const VectorOps kVectorOpsReference = {dot, dot_bf16, axpy, axpy_bf16, deltanet_row, qk_bf16, pv_bf16};

}  // namespace qwick
