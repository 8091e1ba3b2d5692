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

}  // namespace

const VectorOps kVectorOpsReference = {dot, dot_bf16, axpy, axpy_bf16, deltanet_row};

}  // namespace qwick
