// Host-side error checks for the CUDA kernels: every runtime call and every launch is checked, and a
// failure becomes a qwick::Error naming what failed (this header stays free of fmt so .cu files can
// include it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

namespace qwick::cuda {

// Throws Error("<what>: <CUDA error string>") unless `status` is cudaSuccess.
void check(cudaError_t status, const char* what);
// After a launch: throws if the launch itself failed (bad configuration, no device, ...).
void check_launch(const char* kernel);
// Throws for a failed launch_kernel: the error, the configuration and what the kernel needs.
[[noreturn]] void fail_launch(cudaError_t status, const char* kernel, const void* func, dim3 grid, dim3 block,
                              size_t smem);

// Whether p may be read or written 16 bytes at a time (the launchers' checks before vector accesses).
inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// kernel<<<grid, block, smem, stream>>>(args...); with `overlap`, as a programmatic dependent launch:
// the kernel may start while the previous kernel on the stream still runs, so it must call
// wait_for_previous_kernel() (matmul_cuda/gemv_core.cuh) before it reads anything earlier kernels wrote.
// Kept in a CUDA graph when captured. Checked like check_launch.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   bool overlap, const char* name, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = overlap ? 1 : 0;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (status != cudaSuccess)
    fail_launch(status, name, reinterpret_cast<const void*>(kernel), grid, block, smem);
}

// Multiprocessors of the current device (asked once per process: the engine uses one device).
int multiprocessor_count();

inline unsigned blocks_for(long long n, int per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

}  // namespace qwick::cuda
