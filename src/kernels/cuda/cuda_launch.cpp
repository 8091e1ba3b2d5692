#include "kernels/cuda/cuda_launch.h"

#include "core/error.h"

namespace qwick::cuda {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // consumed here, so a later check_launch does not report it again
  fail("{}: {} ({})", what, cudaGetErrorString(status), static_cast<int>(status));
}

void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

void fail_launch(cudaError_t status, const char* kernel, const void* func, dim3 grid, dim3 block,
                 size_t smem) {
  cudaGetLastError();  // consumed here, so a later check does not report it again
  cudaFuncAttributes attr = {};
  cudaFuncGetAttributes(&attr, func);
  fail(
      "{}: {} ({}); grid {}x{}x{}, block {}x{}x{}, {} B of dynamic shared memory; the kernel needs {} "
      "registers per thread, {} B of static shared memory, at most {} threads per block",
      kernel, cudaGetErrorString(status), static_cast<int>(status), grid.x, grid.y, grid.z, block.x, block.y,
      block.z, smem, attr.numRegs, attr.sharedSizeBytes, attr.maxThreadsPerBlock);
}

int multiprocessor_count() {
  static const int count = [] {
    int device = 0, n = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
    return n;
  }();
  return count;
}

}  // namespace qwick::cuda
