// Scalar activations in f32, as torch computes them.
#pragma once

#include <cmath>

namespace qwick {

inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
inline float silu(float x) {
  return x / (1.0f + std::exp(-x));
}
// torch.nn.functional.softplus with beta = 1, threshold = 20 (linear above it).
inline float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

}  // namespace qwick
