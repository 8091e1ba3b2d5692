#include "kernels/norm/rms_norm.h"

#include <cmath>

#include "kernels/activation.h"

namespace qwick {
namespace {

// Sum of squares in double: an accurate reference for every device's f32 reduction order.
double sum_squares(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace

void rms_norm(const float* x, const float* weight, float eps, int64_t n, float* y) {
  const float inv = 1.0f / std::sqrt(static_cast<float>(sum_squares(x, n) / static_cast<double>(n)) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * weight[i];
}

void gated_rms_norm(const float* x, const float* z, const float* weight, float eps, int64_t n, float* y) {
  const float inv = 1.0f / std::sqrt(static_cast<float>(sum_squares(x, n) / static_cast<double>(n)) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = weight[i] * (x[i] * inv) * silu(z[i]);
}

void l2_norm(float* x, int64_t n, float eps, float scale) {
  const float inv = 1.0f / std::sqrt(static_cast<float>(sum_squares(x, n)) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * scale;
}

}  // namespace qwick
