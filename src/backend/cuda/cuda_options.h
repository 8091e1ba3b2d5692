// The CUDA backend's debug switches: every optimisation is on by default, and these turn off the few
// that a maintainer needs to isolate a fault or to measure what they are worth. They come from
// BackendOptions::cuda_off, set by `--cuda-off LIST` (or QWICK_CUDA_OFF), a comma-separated list of:
//
//   graph       launch each decode step's kernels one by one instead of replaying one CUDA graph
//   fusion      the reference decode chain: every RMSNorm, the MoE's routing, SwiGLU and combine, and
//               the DeltaNet conv, gates and scan as kernels of their own, instead of folded into the
//               matrix-vector products and the fused MoE and DeltaNet-step kernels
//   overlap     no programmatic dependent launch (decode, and prefill chunks from 2K rows): each kernel
//               starts only after the one before it has ended
//   step-ahead  decode_sampled waits for each step's token before launching the next step
//
// An unknown name is an error. (--exact, which also turns int16 decode activations off, is a
// BackendOptions field of its own: it selects the reference numerics on every device.)
#pragma once

#include <string>

namespace qwick {

struct CudaOptions {
  bool graph = true;
  bool fusion = true;
  bool overlap = true;
  bool step_ahead = true;
};

// The options with the listed switches off; throws Error for an unknown name.
CudaOptions parse_cuda_off(const std::string& list);

}  // namespace qwick
