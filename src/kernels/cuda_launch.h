// Host-side error checks for the CUDA kernels: every runtime call and every launch is checked, and a
// failure becomes a qwick::Error naming what failed (this header stays free of fmt so .cu files can
// include it).
#pragma once

#include <cuda_runtime.h>

namespace qwick::cuda {

// Throws Error("<what>: <CUDA error string>") unless `status` is cudaSuccess.
void check(cudaError_t status, const char* what);
// After a launch: throws if the launch itself failed (bad configuration, no device, ...).
void check_launch(const char* kernel);

inline unsigned blocks_for(long long n, int per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

}  // namespace qwick::cuda
