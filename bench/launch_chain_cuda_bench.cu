// What a chain of dependent kernels costs on this GPU, apart from their work: the decode step is ~260
// kernels, each waiting for the one before (docs/gpu-notes.md, "What a kernel boundary costs"). Each
// row times a CUDA graph of `kernels` launches of 264 blocks of 256 threads (two per multiprocessor,
// as the decode GEMVs run) and prints the time per kernel:
//   empty     the boundary alone: wait for the previous kernel, nothing else
//   x chain   a GEMV's dependent skeleton: read 2048 floats the previous kernel wrote, block-reduce
//             them, one block writes the next kernel's input
//   + MB      the same with that many MB of weights streamed per kernel (distinct buffers, so nothing
//             is served from L2), requested before the wait as the GEMVs do
// with programmatic dependent launch (as the engine runs) and without. Needs a CUDA GPU.
//   launch_chain_cuda_bench [kernels]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "graph_timing.h"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_launch.h"
#include "kernels/matmul/gemv_core.cuh"

namespace qwick::cuda {
namespace {

constexpr int kThreads = 256, kCols = 2048;

// x_in: the previous kernel's output; weights: this kernel's bytes (16-byte pieces, `pieces` of them
// per block), or null.
__global__ void __launch_bounds__(kThreads, 2)
    chain_kernel(const float* x_in, float* x_out, const uint4* weights, int64_t pieces, bool chain) {
  __shared__ float scratch[32];
  let_next_kernel_start();
  // The weights first, as the GEMVs request theirs before waiting: four pieces in flight a thread.
  uint32_t sink = 0;
  if (weights) {
    const uint4* w = weights + static_cast<int64_t>(blockIdx.x) * pieces;
    for (int64_t i = threadIdx.x; i < pieces; i += 4 * kThreads) {
      uint4 v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t at = i + j * kThreads;
        v[j] = at < pieces ? load_weights(w + at) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) sink ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
  }
  wait_for_previous_kernel();
  if (!chain) return;
  float s = 0.0f;
  for (int c = threadIdx.x; c < kCols; c += kThreads) s += x_in[c];
  s = block_sum(s, scratch);
  if (blockIdx.x == 0 && threadIdx.x < kCols / 8)
    for (int c = threadIdx.x; c < kCols; c += kCols / 8) x_out[c] = s * 1e-3f + static_cast<float>(sink & 1);
}

}  // namespace
}  // namespace qwick::cuda

int main(int argc, char** argv) {
  using namespace qwick;
  using namespace qwick::cuda;
  const int kernels = argc > 1 ? std::atoi(argv[1]) : 256;
  try {
    const int blocks = 2 * multiprocessor_count();
    DeviceBuffer x(2 * kCols * sizeof(float));
    check(cudaMemset(x.data(), 0, 2 * kCols * sizeof(float)), "memset");
    std::printf("%d kernels of %d blocks per graph, median of 7 graph launches (us per kernel)\n", kernels,
                blocks);
    std::printf("%-22s %12s %12s %12s\n", "kernel", "PDL", "no PDL", "byte floor");
    struct Row {
      const char* name;
      bool chain;
      double mb;
    };
    for (const Row& row :
         {Row{"empty", false, 0.0}, Row{"x chain", true, 0.0}, Row{"x chain + 1 MB", true, 1.0},
          Row{"x chain + 4 MB", true, 4.0}, Row{"x chain + 9.5 MB", true, 9.5}}) {
      // Distinct weights per kernel, at most 2 GB in all (kernels beyond reuse them round-robin:
      // L2 holds 50 MB, so a buffer read 200 MB ago is gone).
      const int64_t pieces = static_cast<int64_t>(row.mb * (1 << 20) / 16 / blocks);
      const int copies = row.mb > 0 ? std::max(1, std::min(kernels, static_cast<int>(2048 / row.mb))) : 0;
      std::vector<DeviceBuffer> weights;
      for (int i = 0; i < copies; ++i) weights.emplace_back(static_cast<size_t>(pieces) * 16 * blocks);
      std::printf("%-22s", row.name);
      for (bool pdl : {true, false}) {
        float* const xf = reinterpret_cast<float*>(x.data());
        const double us = graph_us_per_call(7, kernels, [&](cudaStream_t stream) {
          for (int k = 0; k < kernels; ++k) {
            const uint4* w =
                copies ? reinterpret_cast<const uint4*>(weights[static_cast<size_t>(k % copies)].data())
                       : nullptr;
            launch_kernel(chain_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, pdl,
                          "chain", xf + (k & 1) * kCols, xf + ((k + 1) & 1) * kCols, w, pieces, row.chain);
          }
        });
        std::printf(" %12.2f", us);
      }
      std::printf(" %12.2f\n", row.mb * (1 << 20) / 4.24e6);  // µs at the measured copy bandwidth
    }
  } catch (const std::exception& e) {  // check() throws
    std::fprintf(stderr, "launch_chain_cuda_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
