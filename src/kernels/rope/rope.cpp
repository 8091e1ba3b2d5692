#include "kernels/rope/rope.h"

#include <cmath>

namespace qwick {

RopeTable::RopeTable(double theta, int rotary_dim) : rotary_dim_(rotary_dim) {
  // transformers: inv_freq = 1 / theta ** (arange(0, dim, 2).float() / dim), in f32.
  const float base = static_cast<float>(theta);
  for (int i = 0; i < rotary_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    inv_freq_.push_back(1.0f / std::pow(base, exponent));
  }
}

void RopeTable::angles(int64_t pos, float* cos_out, float* sin_out) const {
  const float p = static_cast<float>(pos);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const float a = p * inv_freq_[i];
    cos_out[i] = std::cos(a);
    sin_out[i] = std::sin(a);
  }
}

void apply_rope(float* x, int rotary_dim, const float* cos, const float* sin) {
  const int half = rotary_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float x1 = x[i], x2 = x[i + half];
    x[i] = x1 * cos[i] - x2 * sin[i];
    x[i + half] = x2 * cos[i] + x1 * sin[i];
  }
}

}  // namespace qwick
