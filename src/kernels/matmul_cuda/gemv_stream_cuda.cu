// Decode GEMV for matrices of many rows (the lm_head): y = W·x streamed through shared memory by the
// copy engine, so the bytes in flight are not bounded by registers (contract in matmul_cuda.h).
//
// The register-streaming GEMV (gemv_cuda.cu) holds a row step's weights in registers and computes
// them before it asks for the next step's: on the 248,320 × 2048 lm_head each warp alternates between
// loading and computing, and the GPU moves 2.25 TB/s of its 4.2. Here one block
// an SM walks tiles of kTileRows rows (blockIdx.x, + gridDim.x, ...) through a ring of kStages tiles:
// one bulk copy each for a tile's codes, scales and biases (cp.async.bulk, completing an mbarrier),
// requested kStages tiles ahead, and the warp that finishes a tile last asks for the tile that
// replaces it. Each lane keeps its chunks of the (normed) input in registers for the whole matrix:
// warp w computes rows 2w, 2w + 1 of each tile, lane l chunks l, l + 32, ... of each row, the order
// and the sums of dot_rows (gemv_core.cuh) with a whole warp per row. kI16 (GemvArgs::i16): each lane's
// chunks held in the int16 form instead (quantize_chunk_i16), dp2a dots.
//
// Test: tests/cuda/gemv_cuda_test.cpp (Gemv.StreamMatchesCpu) against matmul_rows_reference.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/tensor_core.cuh"
#include "kernels/matmul_cuda/gemv_core.cuh"

namespace qwick::cuda {
namespace {

// 16 warps (four a scheduler) to hide the products' latency: at 8 the lm_head took 110.6 µs.
constexpr int kWarps = 16, kRowsPerWarp = 2, kTileRows = kWarps * kRowsPerWarp, kStages = 4;
constexpr int kStreamMinRows = 32768;  // below that the register-streaming GEMV fills the GPU
constexpr int kMaxSmem = 200 * 1024;
constexpr WeightFormat kF = WeightFormat::kAffine4;
constexpr int kE = ChunkTraits<kF>::kElems;  // 32 codes a 16-byte chunk

struct TileLayout {
  int64_t data_bytes, scale_bytes, stage_bytes;  // a tile's codes, its scales (as many biases)
  __host__ __device__ explicit TileLayout(const DeviceMatrix& m)
      : data_bytes(int64_t{kTileRows} * m.row_bytes),
        scale_bytes(int64_t{kTileRows} * (m.cols / m.group_size) * 2),
        stage_bytes(data_bytes + 2 * scale_bytes) {}
};

// CPL: chunks a lane of each row (cols = 32 · CPL · 32).
template <int CPL, bool kNorm, bool kI16>
__global__ void __launch_bounds__(kWarps * 32, 1) gemv_stream_kernel(const GemvArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ int freed[kStages];  // warps done with the stage's tiles so far (kWarps a tile)
  const DeviceMatrix& m = a.single;
  const TileLayout L(m);
  const int64_t groups = m.cols / m.group_size, tiles = (m.rows + kTileRows - 1) / kTileRows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Tile i of this block (i = 0, 1, ...) into stage i % kStages; only the rows the matrix has.
  auto request = [&](int64_t i) {
    const int64_t tile = blockIdx.x + i * gridDim.x;
    if (tile >= tiles) return;
    const int64_t row0 = tile * kTileRows, rows = m.rows - row0 < kTileRows ? m.rows - row0 : kTileRows;
    const int s = static_cast<int>(i % kStages);
    const uint32_t bar = smem_addr(&full[s]), dst = smem_addr(smem + s * L.stage_bytes);
    const uint32_t data = static_cast<uint32_t>(rows * m.row_bytes),
                   scales = static_cast<uint32_t>(rows * groups * 2);
    mbarrier_expect_bytes(bar, data + 2 * scales);
    bulk_copy_to_shared(dst, m.data + row0 * m.row_bytes, data, bar);
    bulk_copy_to_shared(dst + static_cast<uint32_t>(L.data_bytes), m.scales + row0 * groups, scales, bar);
    bulk_copy_to_shared(dst + static_cast<uint32_t>(L.data_bytes + L.scale_bytes), m.biases + row0 * groups,
                        scales, bar);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) mbarrier_init(smem_addr(&full[s]), 1), freed[s] = 0;
    fence_mbarrier_init();
    for (int i = 0; i < kStages; ++i) request(i);  // the weights never depend on an earlier kernel
  }
  let_next_kernel_start();
  if constexpr (kNorm) prefetch_to_l1(a.norm_weight, m.cols);
  wait_for_previous_kernel();  // x comes from an earlier kernel

  // The lane's chunks of the input (x · w for RMSNorm) and their sums, for every row.
  float xv[CPL][kE], xsum[CPL], sumsq = 0.0f;
#pragma unroll
  for (int u = 0; u < CPL; ++u) {
    const int64_t c0 = static_cast<int64_t>(u * 32 + lane) * kE;
    xsum[u] = 0.0f;
#pragma unroll
    for (int j = 0; j < kE; j += 4) {
      const float4 v = *reinterpret_cast<const float4*>(a.x + c0 + j);
      float4 g = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
      if constexpr (kNorm) g = *reinterpret_cast<const float4*>(a.norm_weight + c0 + j);
      sumsq += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      xv[u][j] = v.x * g.x, xv[u][j + 1] = v.y * g.y, xv[u][j + 2] = v.z * g.z, xv[u][j + 3] = v.w * g.w;
      xsum[u] += xv[u][j] + xv[u][j + 1] + xv[u][j + 2] + xv[u][j + 3];
    }
  }
  const float factor = kNorm ? rsqrtf(warp_sum(sumsq) / static_cast<float>(m.cols) + a.eps) : 1.0f;
  uint4 xq[CPL][4];  // kI16: the chunks' int16 form, xd its scales (xv is dead after this)
  float xd[CPL];
  if constexpr (kI16) {
#pragma unroll
    for (int u = 0; u < CPL; ++u) xd[u] = quantize_chunk_i16(xv[u], xq[u]);
  }
  __syncthreads();  // the barriers' initialisation, before any wait on them
  const ChunkGroup group(m.group_size, kE);

  for (int64_t i = 0; blockIdx.x + i * gridDim.x < tiles; ++i) {
    const int s = static_cast<int>(i % kStages);
    mbarrier_wait(smem_addr(&full[s]), static_cast<uint32_t>((i / kStages) & 1));
    const uint8_t* stage = smem + s * L.stage_bytes;
    const uint16_t* sc = reinterpret_cast<const uint16_t*>(stage + L.data_bytes);
    const uint16_t* bi = reinterpret_cast<const uint16_t*>(stage + L.data_bytes + L.scale_bytes);
    float acc[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r;
      acc[r] = 0.0f;
#pragma unroll
      for (int u = 0; u < CPL; ++u) {
        const int c = u * 32 + lane;
        const uint4 w = *reinterpret_cast<const uint4*>(stage + row * m.row_bytes + c * 16);
        const int g = row * static_cast<int>(groups) + group.of(c);
        const float dot = kI16 ? xd[u] * static_cast<float>(chunk_code_dot_i16(w, xq[u]))
                               : chunk_code_dot<kF>(w, xv[u], xsum[u]);
        acc[r] += bf16_to_f32(sc[g]) * dot + bf16_to_f32(bi[g]) * xsum[u];
      }
    }
    __syncwarp();
    // The warp is done with the stage: the last of the block to be asks for its next tile.
    if (lane == 0 && atomicAdd(&freed[s], 1) % kWarps == kWarps - 1) request(i + kStages);
    const int64_t row0 = (blockIdx.x + i * gridDim.x) * kTileRows + warp * kRowsPerWarp;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float v = warp_sum(acc[r]);
      if (lane == 0 && row0 + r < m.rows)
        a.y[row0 + r] = a.accumulate ? a.y[row0 + r] + factor * v : factor * v;
    }
  }
}

template <int CPL, bool kNorm, bool kI16>
void launch(const GemvArgs& a, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(kStages * TileLayout(a.single).stage_bytes);
  static bool configured = false;
  if (!configured) {  // the most gemv_stream_fits lets through
    check(cudaFuncSetAttribute(gemv_stream_kernel<CPL, kNorm, kI16>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem),
          "gemv_stream: shared memory limit");
    configured = true;
  }
  const int64_t tiles = (a.single.rows + kTileRows - 1) / kTileRows;
  launch_kernel(gemv_stream_kernel<CPL, kNorm, kI16>,
                dim3(static_cast<unsigned>(std::min<int64_t>(tiles, multiprocessor_count()))),
                dim3(kWarps * 32), smem, stream, a.overlap, "gemv_stream", a);
}

}  // namespace

bool gemv_stream_fits(const GemvArgs& a) {
  const DeviceMatrix& m = a.single;
  return !a.table && !a.gate_z && !a.trigger_after_wait && a.problems == 1 && m.format == kF &&
         m.rows >= kStreamMinRows && (m.cols == 32 * kE || m.cols == 64 * kE) && m.group_size > 0 &&
         m.cols % m.group_size == 0 && (m.cols / m.group_size) % 8 == 0 && m.row_bytes == m.cols / 2 &&
         aligned16(m.data) && aligned16(m.scales) && aligned16(m.biases) &&
         kStages * TileLayout(m).stage_bytes <= kMaxSmem;
}

void gemv_stream(const GemvArgs& a, cudaStream_t stream) {
  auto by_norm = [&](auto cpl) {
    constexpr int C = decltype(cpl)::value;
    if (a.norm_weight)
      a.i16 ? launch<C, true, true>(a, stream) : launch<C, true, false>(a, stream);
    else
      a.i16 ? launch<C, false, true>(a, stream) : launch<C, false, false>(a, stream);
  };
  if (a.single.cols == 32 * kE)
    by_norm(std::integral_constant<int, 1>{});
  else
    by_norm(std::integral_constant<int, 2>{});
}

}  // namespace qwick::cuda
