// What a chain of dependent kernels costs on this GPU, apart from their work: the decode step is ~260
// kernels, each waiting for the one before (docs/gpu-notes.md, "What a kernel boundary costs"). Each
// row times a CUDA graph of `kernels` launches of 264 blocks of 256 threads (two per multiprocessor,
// as the decode GEMVs run) and prints the time per kernel:
//   empty     the boundary alone: wait for the previous kernel, nothing else
//   x chain   a GEMV's dependent skeleton: read 2048 floats the previous kernel wrote, block-reduce
//             them, one block writes the next kernel's input
//   + MB      the same with that many MB of weights streamed per kernel (distinct buffers, so nothing
//             is served from L2), requested before the wait as the GEMVs do; then the 9.5 MB row with
//             the buffers spread over up to 32 GB, as a step's pages are spread
// with programmatic dependent launch (as the engine runs) and without, and with programmatic launch but
// only two blocks resident per multiprocessor (each block holding 100 KB of shared memory, as a kernel
// whose registers fill the register file at two blocks would): then the next kernel's blocks cannot
// start, and request their weights, until blocks of the one before have finished. Last, the 9.5 MB row
// with the weights bulk-copied into shared memory (one or two blocks a multiprocessor, each block's
// share in 1 to 64 copies). Needs a CUDA GPU.
//   launch_chain_cuda_bench [kernels]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_buffer.h"
#include "graph_timing.h"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_launch.h"
#include "kernels/matmul/gemv_core.cuh"
#include "kernels/tensor_core.cuh"

namespace qwick::cuda {
namespace {

constexpr int kThreads = 256, kCols = 2048;

// The dependent part of a GEMV: read the previous kernel's output, block-reduce it, one block writes the
// next kernel's input (`sink` keeps the weights' loads alive).
__device__ __forceinline__ void x_chain(const float* x_in, float* x_out, uint32_t sink) {
  __shared__ float scratch[32];
  float s = 0.0f;
  for (int c = threadIdx.x; c < kCols; c += kThreads) s += x_in[c];
  s = block_sum(s, scratch);
  if (blockIdx.x == 0 && threadIdx.x < kCols / 8)
    for (int c = threadIdx.x; c < kCols; c += kCols / 8) x_out[c] = s * 1e-3f + static_cast<float>(sink & 1);
}

// x_in: the previous kernel's output; weights: this kernel's bytes (16-byte pieces, `pieces` of them
// per block), or null.
__global__ void __launch_bounds__(kThreads, 2)
    chain_kernel(const float* x_in, float* x_out, const uint4* weights, int64_t pieces, bool chain) {
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
  if (chain) x_chain(x_in, x_out, sink);
}

// The chain with each block's weights bulk-copied into shared memory instead (`bytes` a block, in
// `parts` copies issued by as many threads), as a GEMV holding its rows in shared memory would fetch
// them (docs/gpu-notes.md, "Decode: where a GEMV's time goes").
__global__ void __launch_bounds__(kThreads)
    bulk_chain_kernel(const float* x_in, float* x_out, const uint8_t* weights, uint32_t bytes, int parts) {
  extern __shared__ uint4 slice[];
  __shared__ uint64_t bar_word;
  let_next_kernel_start();
  const uint32_t bar = smem_addr(&bar_word);
  if (threadIdx.x == 0) {
    mbarrier_init(bar, 1);
    fence_mbarrier_init();
    mbarrier_expect_bytes(bar, bytes);
  }
  __syncthreads();
  const uint32_t part = bytes / static_cast<uint32_t>(parts);
  if (static_cast<int>(threadIdx.x) < parts)
    bulk_copy_to_shared(smem_addr(slice) + threadIdx.x * part,
                        weights + uint64_t{blockIdx.x} * bytes + threadIdx.x * part, part, bar);
  mbarrier_wait(bar, 0);
  const uint32_t sink = slice[threadIdx.x].x;
  wait_for_previous_kernel();
  x_chain(x_in, x_out, sink);
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
    const double copy_gbps = probe_cuda_device().copy_gbps;
    std::printf("%d kernels of %d blocks per graph, median of 7 graph launches (us per kernel); byte floor at "
                "the measured copy bandwidth, %.0f GB/s\n",
                kernels, blocks, copy_gbps);
    auto floor_us = [&](double mb) { return mb * (1 << 20) / (copy_gbps * 1e3); };
    constexpr size_t kFillSmem = 100 << 10;  // two blocks a multiprocessor, no third
    check(cudaFuncSetAttribute(chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kFillSmem),
          "shared memory limit");
    float* const xf = reinterpret_cast<float*>(x.data());
    // µs a kernel of a chain of chain_kernel launches, kernel k streaming `pieces` a block from
    // weights_of(k) (null: none).
    auto chain_us = [&](bool pdl, size_t smem, const std::function<const uint4*(int)>& weights_of,
                        int64_t pieces, bool chain) {
      return graph_us_per_call(7, kernels, [&](cudaStream_t stream) {
        for (int k = 0; k < kernels; ++k)
          launch_kernel(chain_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, stream, pdl,
                        "chain", xf + (k & 1) * kCols, xf + ((k + 1) & 1) * kCols, weights_of(k), pieces,
                        chain);
      });
    };
    std::printf("%-22s %12s %12s %12s %12s\n", "kernel", "PDL", "PDL 2/SM", "no PDL", "byte floor");
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
      struct Column {
        bool pdl;
        size_t smem;
      };
      for (const auto [pdl, smem] : {Column{true, 0}, Column{true, kFillSmem}, Column{false, 0}}) {
        const double us = chain_us(
            pdl, smem,
            [&](int k) {
              return copies ? reinterpret_cast<const uint4*>(weights[static_cast<size_t>(k % copies)].data())
                            : nullptr;
            },
            pieces, row.chain);
        std::printf(" %12.2f", us);
      }
      std::printf(" %12.2f\n", floor_us(row.mb));
    }
    // The same 9.5 MB row with each kernel's weights placed apart in one allocation: a step reads its
    // ~1.7 GB from pages spread over ~19 GB, more than the address translation caches may hold. Equal
    // times for a footprint of 0.2 GB and of 32 GB say the spread does not slow a stream.
    {
      size_t free_bytes = 0, total_bytes = 0;
      check(cudaMemGetInfo(&free_bytes, &total_bytes), "memory info");
      const int64_t pieces = static_cast<int64_t>(9.5 * (1 << 20) / 16 / blocks);
      const size_t bytes = static_cast<size_t>(pieces) * 16 * blocks;
      const size_t span = std::max(bytes, std::min(size_t{32} << 30, free_bytes / 10 * 6));
      DeviceBuffer pool(span);
      std::printf("\n%-34s %12s %12s\n", "x chain + 9.5 MB, buffers apart", "PDL", "byte floor");
      struct Spread {
        size_t gap_mb;
        int most;  // buffers at most (then reused round-robin)
      };
      for (const Spread sp :
           {Spread{10, 16}, Spread{10, kernels}, Spread{64, kernels}, Spread{256, kernels}}) {
        const size_t gap = sp.gap_mb << 20;
        const int copies = static_cast<int>(std::min<size_t>(sp.most, (span - bytes) / gap + 1));
        const double us = chain_us(
            true, 0,
            [&](int k) {
              return reinterpret_cast<const uint4*>(pool.data() + static_cast<size_t>(k % copies) * gap);
            },
            pieces, true);
        char name[64];
        std::snprintf(name, sizeof name, "%d buffers over %.1f GB", copies,
                      static_cast<double>(static_cast<size_t>(copies - 1) * gap + bytes) / (1 << 30));
        std::printf("%-34s %12.2f %12.2f\n", name, us, floor_us(9.5));
      }
    }
    // 9.5 MB bulk-copied: one block per multiprocessor (72 KB each) or two (36 KB), in 1 to 64 copies.
    std::printf("\n%-34s %12s %12s\n", "x chain + 9.5 MB bulk-copied", "PDL", "byte floor");
    check(cudaFuncSetAttribute(bulk_chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10),
          "shared memory limit");
    const int copies = std::min(kernels, 200);  // 9.5 MB each, shared by every row
    std::vector<DeviceBuffer> weights;
    for (int i = 0; i < copies; ++i) weights.emplace_back(static_cast<size_t>(9.5 * (1 << 20)));
    for (int per_sm : {1, 2})
      for (int parts : {1, 8, 64}) {
        const int n = per_sm * multiprocessor_count();
        const uint32_t bytes = static_cast<uint32_t>(9.5 * (1 << 20) / n) / (16 * 64) * (16 * 64);
        const double us = graph_us_per_call(7, kernels, [&](cudaStream_t stream) {
          for (int k = 0; k < kernels; ++k)
            launch_kernel(bulk_chain_kernel, dim3(static_cast<unsigned>(n)), dim3(kThreads), bytes, stream,
                          true, "bulk chain", xf + (k & 1) * kCols, xf + ((k + 1) & 1) * kCols,
                          weights[static_cast<size_t>(k % copies)].data(), bytes, parts);
        });
        char name[64];
        std::snprintf(name, sizeof name, "%d block(s) an SM, %d copies each", per_sm, parts);
        std::printf("%-34s %12.2f %12.2f\n", name, us, floor_us(9.5));
      }
  } catch (const std::exception& e) {  // check() throws
    std::fprintf(stderr, "launch_chain_cuda_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
