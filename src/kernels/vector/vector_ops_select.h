// Picks the vector primitives for a SIMD level (kept apart from vector_ops.h, which SIMD units include).
#pragma once

#include "core/cpu_features.h"
#include "kernels/vector/vector_ops.h"

namespace qwick {

const VectorOps& vector_ops(SimdLevel level);
inline const VectorOps& active_vector_ops() {
  return vector_ops(active_simd_level());
}

}  // namespace qwick
