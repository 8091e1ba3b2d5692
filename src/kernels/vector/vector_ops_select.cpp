#include "kernels/vector/vector_ops_select.h"

namespace qwick {

const VectorOps& vector_ops(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return kVectorOpsAvx512;
    case SimdLevel::kAvx2:
      return kVectorOpsAvx2;
    case SimdLevel::kScalar:
      break;
  }
  return kVectorOpsReference;
}

}  // namespace qwick
