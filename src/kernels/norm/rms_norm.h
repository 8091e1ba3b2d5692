// The three normalisations of the model (model-spec.md §2.2, §2.5), in f32.
#pragma once

#include <cstdint>

namespace qwick {

// y = x · rsqrt(mean(x²) + eps) · weight. For the zero-centred norms pass weight = 1 + w.
// y may alias x.
void rms_norm(const float* x, const float* weight, float eps, int64_t n, float* y);

// DeltaNet output norm: y = weight · (x · rsqrt(mean(x²) + eps)) · silu(z). y may alias x.
void gated_rms_norm(const float* x, const float* z, const float* weight, float eps, int64_t n, float* y);

// In place: x = x · rsqrt(Σx² + eps) · scale.
void l2_norm(float* x, int64_t n, float eps, float scale);

}  // namespace qwick
