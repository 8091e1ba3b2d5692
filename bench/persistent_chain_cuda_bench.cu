// Whether one persistent kernel would run the decode step's chain of 4-bit matrix-vector products faster
// than a launch each (issue 6's last lever; docs/gpu-notes.md, session 46). The chain: `layers` copies of
// a DeltaNet layer's five products at the model's shapes, each reading the one before through RMSNorm:
//   12352 × 2048   the input stack with z
//    2048 × 4096   the output projection
//     256 × 2048   the router
//    9216 × 2048   nine experts' gate|up (eight routed and the shared one, as one matrix)
//    2304 × 4096   their down projections (one matrix of the same bytes as nine of 2048 × 512)
// every matrix its own (1.41 GB at 40 layers: nothing is served from L2). Each row times the chain as a
// CUDA graph (median of 7 launches):
//   launches     the engine's decode GEMV (gemv_cuda.cu, int16 products), one launch a product, with
//                programmatic dependent launch, as the step runs them
//   persistent   one block an SM for the whole chain. Each block owns a fixed share of every product's
//                rows; those rows' codes, scales and biases stream through a ring of shared-memory slots
//                by bulk copies, the next piece requested as soon as a slot is free, so later products'
//                weights arrive while the block waits for the rest of the GPU. Between two products the
//                blocks meet on a counter (each adds itself, thread 0 of each polls), then every block
//                stages the whole input (RMSNorm, int16 chunks) and runs its rows (a warp a row, the
//                products of gemv_stream_cuda.cu)
//     routed: the experts' weights requested only once the router's product is complete, as routing
//       would have it (the top-k itself is not run)
//     with 2 slots: the same with only the next piece in flight, what the ring's depth is worth
//     no products: the meetings, stagings and stream alone, the floor of this design
// The persistent outputs are checked against the launches' (the same int16 products summed in another
// order: they agree to rounding), and that run's times split each product of the persistent kernel into
// the blocks' meeting, the staging and the rows. Needs a CUDA GPU.
//   persistent_chain_cuda_bench [layers]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_buffer.h"
#include "graph_timing.h"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_launch.h"
#include "kernels/matmul/gemv_core.cuh"
#include "kernels/matmul/matmul_cuda.h"
#include "kernels/tensor_core.cuh"

namespace qwick::cuda {
namespace {

constexpr int kWarps = 16, kThreads = 32 * kWarps;
constexpr int kE = 32, kGroup = 64;   // 4-bit codes a 16-byte chunk; codes a scale
constexpr int kSlotBytes = 18 << 10;  // a piece: 16 KB of codes, their scales and biases
constexpr int kMaxSlots = 11, kMaxPhases = 200, kMaxCols = 4096;
constexpr int kMaxChunks = kMaxCols / kE, kMaxCpl = kMaxChunks / 32;  // chunks a lane of a row
constexpr float kEps = 1e-6f;

// One product of the chain: y = W · RMSNorm(x) (gamma the norm's weight), W 4-bit affine in groups of
// kGroup, rows packed back to back (DeviceMatrix's layout).
struct Phase {
  const uint8_t* codes;
  const uint16_t* scales;
  const uint16_t* biases;
  const float* x;
  float* y;
  int rows, cols, piece_rows;  // piece_rows: rows a ring slot holds (16 KB of codes)
  // Its weights may be requested only once product `after` is complete (-1: at any time): the routed
  // experts' matrices are known only once the router's logits are.
  int after;
};

// Block b's share of a product's rows: [rows · b / G, rows · (b + 1) / G).
__device__ __forceinline__ int share_begin(int rows, int b) {
  return static_cast<int>(int64_t{rows} * b / gridDim.x);
}

// The chain: `count` products; piece_base [gridDim.x][count + 1]: block b's first piece of each product
// (its pieces numbered through the chain); done [count]: blocks finished with each product (zero at the
// start). kProducts false: the weights still stream through the ring, unread. routed false: every
// product's weights are requested as soon as a slot is free, whatever its `after`. marks (or null):
// [gridDim.x][count][3] the times (ns) at which thread 0 saw the product before complete, had staged the
// input and saw the block's rows done.
template <bool kProducts>
__global__ void __launch_bounds__(kThreads, 1)
    persistent_chain_kernel(const Phase* phases_in, int count, const int* piece_base, int slots,
                            const float* gamma, unsigned long long* done, bool routed,
                            unsigned long long* marks) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t full[kMaxSlots];
  __shared__ int freed[kMaxSlots];    // rows of the slot's piece computed so far
  __shared__ int pending[kMaxSlots];  // the slot's next piece, held back until its `after` is complete
  __shared__ int current;             // the product being computed: every one before it is complete
  __shared__ int first[kMaxPhases + 1];
  __shared__ Phase phases[kMaxPhases];
  __shared__ uint4 xq_s[kMaxChunks][4];  // the staged input's int16 chunks
  __shared__ float2 xd_s[kMaxChunks];    // each chunk's scale and sum
  __shared__ float scratch[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, b = blockIdx.x;
  for (int p = threadIdx.x; p <= count; p += kThreads) first[p] = piece_base[b * (count + 1) + p];
  for (int p = threadIdx.x; p < count; p += kThreads) phases[p] = phases_in[p];
  __syncthreads();
  const int total = first[count];
  auto mark = [&](int p, int k) {
    if (!marks) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    marks[(int64_t{b} * count + p) * 3 + k] = t;
  };

  // The product holding piece g: the last with first[p] <= g.
  auto product_of = [&](int g) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (first[mid] <= g)
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  };
  // Piece g of this block into slot g % slots (none past the chain's last), or held back in pending
  // while its product's `after` is not complete.
  auto request = [&](int g) {
    if (g >= total) return;
    const int lo = product_of(g);
    const Phase& ph = phases[lo];
    if (routed && ph.after >= current) {
      pending[g % slots] = g;
      return;
    }
    const int row = share_begin(ph.rows, b) + (g - first[lo]) * ph.piece_rows,
              n = min(ph.piece_rows, share_begin(ph.rows, b + 1) - row), groups = ph.cols / kGroup;
    const int s = g % slots;
    const uint32_t bar = smem_addr(&full[s]), dst = smem_addr(ring + s * kSlotBytes);
    const uint32_t code_bytes = static_cast<uint32_t>(n * ph.cols / 2),
                   scale_bytes = static_cast<uint32_t>(n * groups * 2),
                   scale_at = static_cast<uint32_t>(ph.piece_rows * ph.cols / 2),
                   bias_at = scale_at + static_cast<uint32_t>(ph.piece_rows * groups * 2);
    mbarrier_expect_bytes(bar, code_bytes + 2 * scale_bytes);
    bulk_copy_to_shared(dst, ph.codes + int64_t{row} * ph.cols / 2, code_bytes, bar);
    bulk_copy_to_shared(dst + scale_at, ph.scales + int64_t{row} * groups, scale_bytes, bar);
    bulk_copy_to_shared(dst + bias_at, ph.biases + int64_t{row} * groups, scale_bytes, bar);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) mbarrier_init(smem_addr(&full[s]), 1), freed[s] = 0, pending[s] = -1;
    fence_mbarrier_init();
    current = 0;
    for (int g = 0; g < slots; ++g) request(g);  // no weight depends on an earlier product
  }
  __syncthreads();

  for (int p = 0; p < count; ++p) {
    const Phase& ph = phases[p];
    if (p > 0) {  // every block's rows of the product before
      if (threadIdx.x == 0) {
        wait_until_at_least(done + p - 1, gridDim.x);
        mark(p, 0);
        current = p;
        for (int s = 0; s < slots; ++s)  // the pieces that waited for that product
          if (pending[s] >= 0 && phases[product_of(pending[s])].after < p) {
            const int g = pending[s];
            pending[s] = -1;
            request(g);
          }
      }
      __syncthreads();
    } else if (threadIdx.x == 0) {
      mark(p, 0);
    }
    // The input: thread c < chunks stages chunk c (x · gamma, its int16 form), the block sums x².
    const int chunks = ph.cols / kE;
    float sumsq = 0.0f;
    if (static_cast<int>(threadIdx.x) < chunks) {
      float xv[kE], sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kE; j += 4) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(ph.x + threadIdx.x * kE + j));
        const float4 g = __ldg(reinterpret_cast<const float4*>(gamma + threadIdx.x * kE + j));
        sumsq += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        xv[j] = v.x * g.x, xv[j + 1] = v.y * g.y, xv[j + 2] = v.z * g.z, xv[j + 3] = v.w * g.w;
        sum += xv[j] + xv[j + 1] + xv[j + 2] + xv[j + 3];
      }
      uint4 q[4];
      const float d = quantize_chunk_i16(xv, q);
#pragma unroll
      for (int k = 0; k < 4; ++k) xq_s[threadIdx.x][k] = q[k];
      xd_s[threadIdx.x] = make_float2(d, sum);
    }
    // (block_sum's barriers also publish the staging)
    const float factor = rsqrtf(block_sum(sumsq, scratch) / static_cast<float>(ph.cols) + kEps);
    if (threadIdx.x == 0) mark(p, 1);
    // Lane l computes chunks l, l + 32, ... of each of its warp's rows.
    const int cpl = chunks / 32;
    uint4 xq[kMaxCpl][4];
    float2 xd[kMaxCpl];
#pragma unroll
    for (int u = 0; u < kMaxCpl; ++u)
      if (u < cpl) {
#pragma unroll
        for (int k = 0; k < 4; ++k) xq[u][k] = xq_s[u * 32 + lane][k];
        xd[u] = xd_s[u * 32 + lane];
      }
    const int r0 = share_begin(ph.rows, b), n = share_begin(ph.rows, b + 1) - r0, groups = ph.cols / kGroup;
    for (int j = warp; j < n; j += kWarps) {
      const int k = j / ph.piece_rows, g = first[p] + k, s = g % slots, i = j - k * ph.piece_rows;
      mbarrier_wait(smem_addr(&full[s]), static_cast<uint32_t>((g / slots) & 1));
      float acc = 0.0f;
      if constexpr (kProducts) {
        const uint8_t* slot = ring + s * kSlotBytes;
        const uint4* w = reinterpret_cast<const uint4*>(slot + i * ph.cols / 2);
        const uint16_t* sc =
            reinterpret_cast<const uint16_t*>(slot + ph.piece_rows * ph.cols / 2) + i * groups;
        const uint16_t* bi = sc + ph.piece_rows * groups;
#pragma unroll
        for (int u = 0; u < kMaxCpl; ++u)
          if (u < cpl) {
            const int c = u * 32 + lane, grp = c * kE / kGroup;
            const float dot = xd[u].x * static_cast<float>(chunk_code_dot_i16(w[c], xq[u]));
            acc += bf16_to_f32(sc[grp]) * dot + bf16_to_f32(bi[grp]) * xd[u].y;
          }
      }
      acc = warp_sum(acc);  // (its shuffles also end the warp's reads of the slot)
      if (lane == 0) {
        if constexpr (kProducts) ph.y[r0 + j] = factor * acc;
        // The last of the piece's rows frees the slot for the piece `slots` on.
        if (atomicAdd(&freed[s], 1) == min(ph.piece_rows, n - k * ph.piece_rows) - 1) {
          freed[s] = 0;
          request(g + slots);
        }
      }
    }
    __syncthreads();  // the block's rows written (and its staging read)
    if (threadIdx.x == 0) add_release(done + p, 1), mark(p, 2);
  }
}

// Device memory filled with random bits (codes), or bf16 values (scales in [lo, hi)).
__device__ __forceinline__ uint32_t mix(uint64_t i, uint32_t seed) {
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t{seed} << 32);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return static_cast<uint32_t>(h);
}
__global__ void fill_bits(uint32_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = mix(i, seed);
}
__global__ void fill_bf16(uint16_t* p, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = f32_to_bf16(lo + (hi - lo) * static_cast<float>(mix(i, seed) >> 8) * (1.0f / (1 << 24)));
}
__global__ void fill_f32(float* p, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = lo + (hi - lo) * static_cast<float>(mix(i, seed) >> 8) * (1.0f / (1 << 24));
}

}  // namespace
}  // namespace qwick::cuda

int main(int argc, char** argv) {
  using namespace qwick;
  using namespace qwick::cuda;
  const int layers = argc > 1 ? std::atoi(argv[1]) : 40;
  try {
    struct Shape {
      int rows, cols;
      bool routed;  // requested only once the layer's router product is complete
    };
    constexpr int kRouter = 2;  // the router's product in a layer
    const Shape layer[] = {{12352, 2048, false},
                           {2048, 4096, false},
                           {256, 2048, false},
                           {9216, 2048, true},
                           {2304, 4096, true}};
    const int per_layer = static_cast<int>(std::size(layer)), count = per_layer * layers;
    if (layers < 1 || count > kMaxPhases) {
      std::fprintf(stderr, "persistent_chain_cuda_bench: layers must be 1..%d\n", kMaxPhases / per_layer);
      return 1;
    }
    const int blocks = multiprocessor_count();
    const double copy_gbps = probe_cuda_device().copy_gbps;

    // The weights, one allocation a product; the activations: the chain's input, then each product's output
    // (one set for the launches, one for the persistent kernel).
    constexpr int kMaxRows = 12352;
    std::vector<DeviceBuffer> weights;
    std::vector<DeviceMatrix> mats;
    double bytes = 0;
    for (int p = 0; p < count; ++p) {
      const Shape sh = layer[p % per_layer];
      const size_t code_bytes = size_t(sh.rows) * sh.cols / 2,
                   scale_count = size_t(sh.rows) * sh.cols / kGroup;
      DeviceBuffer& buf = weights.emplace_back(code_bytes + 4 * scale_count);
      DeviceMatrix m;
      m.format = WeightFormat::kAffine4;
      m.group_size = kGroup;
      m.rows = sh.rows;
      m.cols = sh.cols;
      m.data = buf.data();
      m.row_bytes = sh.cols / 2;
      m.scales = reinterpret_cast<const uint16_t*>(buf.data() + code_bytes);
      m.biases = m.scales + scale_count;
      fill_bits<<<1024, 256>>>(reinterpret_cast<uint32_t*>(buf.data()), int64_t(code_bytes / 4), 3u * p);
      fill_bf16<<<256, 256>>>(const_cast<uint16_t*>(m.scales), int64_t(scale_count), 3u * p + 1, 0.01f,
                              0.02f);
      fill_bf16<<<256, 256>>>(const_cast<uint16_t*>(m.biases), int64_t(scale_count), 3u * p + 2, -0.12f,
                              -0.10f);
      mats.push_back(m);
      bytes += static_cast<double>(buf.size());
    }
    DeviceBuffer x0(kMaxCols * sizeof(float)), gamma(kMaxCols * sizeof(float));
    fill_f32<<<16, 256>>>(reinterpret_cast<float*>(x0.data()), kMaxCols, 7, -1.0f, 1.0f);
    fill_f32<<<16, 256>>>(reinterpret_cast<float*>(gamma.data()), kMaxCols, 8, 0.5f, 1.5f);
    check(cudaGetLastError(), "fill");
    DeviceBuffer y_launch(size_t(count) * kMaxRows * sizeof(float)), y_persist(y_launch.size());
    auto y_of = [&](const DeviceBuffer& y, int p) {
      return reinterpret_cast<float*>(y.data()) + size_t(p) * kMaxRows;
    };
    auto x_of = [&](const DeviceBuffer& y, int p) {
      return p == 0 ? reinterpret_cast<const float*>(x0.data()) : y_of(y, p - 1);
    };
    const float* gamma_f = reinterpret_cast<const float*>(gamma.data());

    // The persistent kernel's tables: its products, each block's first piece of each.
    std::vector<Phase> phases(count);
    std::vector<int> piece_base(size_t(blocks) * (count + 1));
    for (int p = 0; p < count; ++p) {
      const DeviceMatrix& m = mats[p];
      phases[p] = Phase{m.data,
                        m.scales,
                        m.biases,
                        x_of(y_persist, p),
                        y_of(y_persist, p),
                        int(m.rows),
                        int(m.cols),
                        static_cast<int>((16 << 10) / m.row_bytes),
                        layer[p % per_layer].routed ? p - p % per_layer + kRouter : -1};
    }
    for (int b = 0; b < blocks; ++b) {
      int g = 0;
      for (int p = 0; p < count; ++p) {
        piece_base[size_t(b) * (count + 1) + p] = g;
        const int64_t rows =
            int64_t(phases[p].rows) * (b + 1) / blocks - int64_t(phases[p].rows) * b / blocks;
        g += static_cast<int>((rows + phases[p].piece_rows - 1) / phases[p].piece_rows);
      }
      piece_base[size_t(b) * (count + 1) + count] = g;
    }
    DeviceBuffer phases_d(phases.size() * sizeof(Phase)), base_d(piece_base.size() * sizeof(int)),
        done(size_t(count) * sizeof(unsigned long long));
    check(cudaMemcpy(phases_d.data(), phases.data(), phases_d.size(), cudaMemcpyHostToDevice), "upload");
    check(cudaMemcpy(base_d.data(), piece_base.data(), base_d.size(), cudaMemcpyHostToDevice), "upload");
    check(cudaDeviceSynchronize(), "fill");

    const size_t ring_bytes = size_t(kMaxSlots) * kSlotBytes;
    for (auto kernel : {persistent_chain_kernel<true>, persistent_chain_kernel<false>}) {
      check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(ring_bytes)),
            "shared memory limit");
      int per_sm = 0;
      check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, ring_bytes),
            "occupancy");
      if (per_sm < 1) {
        std::fprintf(stderr, "persistent_chain_cuda_bench: a block does not fit an SM\n");
        return 1;
      }
    }

    auto launches = [&](cudaStream_t stream) {
      for (int p = 0; p < count; ++p) {
        GemvArgs a;
        a.single = mats[p];
        a.format = WeightFormat::kAffine4;
        a.max_rows = mats[p].rows;
        a.max_cols = mats[p].cols;
        a.x = x_of(y_launch, p);
        a.y = y_of(y_launch, p);
        a.norm_weight = gamma_f;
        a.eps = kEps;
        a.i16 = true;
        a.overlap = true;
        gemv(a, stream);
      }
    };
    auto persistent = [&](bool products, int slots, bool routed, unsigned long long* marks = nullptr) {
      return [&, products, slots, routed, marks](cudaStream_t stream) {
        check(cudaMemsetAsync(done.data(), 0, done.size(), stream), "memset");
        launch_kernel(products ? persistent_chain_kernel<true> : persistent_chain_kernel<false>, dim3(blocks),
                      dim3(kThreads), ring_bytes, stream, false, "persistent chain",
                      reinterpret_cast<const Phase*>(phases_d.data()), count,
                      reinterpret_cast<const int*>(base_d.data()), slots, gamma_f,
                      reinterpret_cast<unsigned long long*>(done.data()), routed, marks);
      };
    };

    std::printf(
        "%d layers of %d products (%.2f GB), %d blocks; copy bandwidth %.0f GB/s; median of 7 graph "
        "launches\n",
        layers, per_layer, bytes / 1e9, blocks, copy_gbps);
    std::printf("%-32s %10s %12s %8s %10s\n", "chain", "us", "us a layer", "GB/s", "% of copy");
    auto row = [&](const char* name, double us) {
      std::printf("%-32s %10.1f %12.2f %8.0f %10.1f\n", name, us, us / layers, bytes / us / 1e3,
                  100.0 * bytes / us / 1e3 / copy_gbps);
    };
    row("byte floor", bytes / copy_gbps / 1e3);
    row("launches (engine GEMV)", graph_us_per_call(7, 1, launches));
    row("persistent, 11 slots", graph_us_per_call(7, 1, persistent(true, kMaxSlots, false)));
    row("persistent, 11 slots, routed", graph_us_per_call(7, 1, persistent(true, kMaxSlots, true)));
    row("persistent, 2 slots", graph_us_per_call(7, 1, persistent(true, 2, false)));
    row("persistent, 11 slots, no products", graph_us_per_call(7, 1, persistent(false, kMaxSlots, false)));

    // The check: the persistent kernel's outputs (from its own run, routed, its times marked) against the
    // launches'.
    DeviceBuffer marks_d(size_t(blocks) * count * 3 * sizeof(unsigned long long));
    {
      cudaStream_t stream;
      check(cudaStreamCreate(&stream), "stream");
      launches(stream);
      persistent(true, kMaxSlots, true, reinterpret_cast<unsigned long long*>(marks_d.data()))(stream);
      check(cudaStreamSynchronize(stream), "check run");
      cudaStreamDestroy(stream);
    }
    // Where a product's time goes in that run: medians over the blocks and the layers after the first.
    std::vector<unsigned long long> marks(marks_d.size() / sizeof(unsigned long long));
    check(cudaMemcpy(marks.data(), marks_d.data(), marks_d.size(), cudaMemcpyDeviceToHost), "download");
    std::printf(
        "\nrouted run, us a product (median over blocks and layers 2..%d)\n%-10s %10s %10s %10s %10s\n",
        layers, "product", "meeting", "staging", "rows", "in all");
    const char* names[] = {"input", "out proj", "router", "gate|up", "down"};
    for (int k = 0; k < per_layer; ++k) {
      std::vector<double> parts[4];
      for (int b = 0; b < blocks; ++b)
        for (int p = per_layer + k; p < count; p += per_layer) {
          const unsigned long long* m = &marks[(size_t(b) * count + p) * 3];
          const unsigned long long before = m[-1];  // the block's end of the product before
          const double t[4] = {double(m[0] - before), double(m[1] - m[0]), double(m[2] - m[1]),
                               double(m[2] - before)};
          for (int i = 0; i < 4; ++i) parts[i].push_back(t[i] / 1e3);
        }
      std::printf("%-10s", names[k]);
      for (auto& v : parts) {
        std::nth_element(v.begin(), v.begin() + int64_t(v.size() / 2), v.end());
        std::printf(" %10.2f", v.empty() ? 0.0 : v[v.size() / 2]);
      }
      std::printf("\n");
    }
    std::vector<float> a(y_launch.size() / 4), c(a.size());
    check(cudaMemcpy(a.data(), y_launch.data(), y_launch.size(), cudaMemcpyDeviceToHost), "download");
    check(cudaMemcpy(c.data(), y_persist.data(), y_persist.size(), cudaMemcpyDeviceToHost), "download");
    double worst = 0;
    int worst_p = 0;
    for (int p = 0; p < count; ++p) {
      double diff = 0, scale = 0;
      for (int r = 0; r < phases[p].rows; ++r) {
        const size_t i = size_t(p) * kMaxRows + r;
        diff = std::max(diff, double(std::fabs(a[i] - c[i])));
        scale = std::max(scale, double(std::fabs(a[i])));
      }
      const double rel = diff / scale;
      if (std::isnan(rel) || rel > worst) worst = rel, worst_p = p;
      if (std::isnan(rel)) break;
    }
    const bool ok = worst < 1e-3;  // (false for NaN)
    std::printf(
        "check: persistent vs launches, worst max|diff| / max|y| over the products %.2e (product %d)%s\n",
        worst, worst_p, ok ? "" : "  MISMATCH");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {  // check() throws
    std::fprintf(stderr, "persistent_chain_cuda_bench: %s\n", e.what());
    return 1;
  }
}
