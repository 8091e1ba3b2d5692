#include "kernels/vector/vector_ops_select.h"

namespace qwick {

const VectorOps& vector_ops(SimdLevel level) {
  return *by_simd_level(level, &kVectorOpsAvx512, &kVectorOpsAvx2, &kVectorOpsReference);
}

}  // namespace qwick
