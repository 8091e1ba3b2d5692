#include "kernels/cuda_launch.h"

#include "core/error.h"

namespace qwick::cuda {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("{}: {} ({})", what, cudaGetErrorString(status), static_cast<int>(status));
}

void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

}  // namespace qwick::cuda
