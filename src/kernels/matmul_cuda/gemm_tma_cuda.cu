// The prefill GEMM for bf16 weights on Hopper's copy engine (matmul_cuda.h: gemm_tma): Y = X·Wᵀ for a
// plain GEMM with enough rows to fill the GPU, both operands read by the tensor cores straight from
// shared memory, no thread of the products doing a copy or a decode.
//
//   tiles     128 W rows (outputs) × 256 slots per block, one block an SM; two consumer warpgroups of
//             64 W rows each issue wgmma m64n256k16 with A (W) and B (X) in shared memory
//   pipeline  4 stages of one 64-wide k slice (W 16 KB, X 32 KB), each filled by two TMA boxes that
//             one producer thread (the third warpgroup) asks for; a stage's full barrier counts the
//             bytes landed, its empty barrier the consumer warps done with it
//   order     consecutive blocks take the same W tile and successive slot tiles (up to 16, a 4096-row
//             chunk), so a W tile is read from memory once and X stays in L2
//   output    the 4-bit kernel's epilogue (gemm_epilogue.cuh): f32 rows of y (or added to them), bf16
//             rows of y16, or SwiGLU of a gate|up pair stacked in 8-row runs into act
//
// Why: the 4-bit wgmma kernel (gemm_wgmma_cuda.cu) decodes W in the threads that issue the products,
// and is bound by that chain (docs/cuda.md). A bf16 copy of the dense prefill
// matrices (2.8 GB for the full model) read through this kernel leaves the warps only the products.
//
// Tests: tests/cuda/gemm_cuda_test.cpp (Gemm.TmaMatchesCpu) against the CPU matmul.
#include <cuda.h>
#include <cudaTypedefs.h>

#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/tensor_core.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/warpgroup_mma.cuh"
#include "kernels/matmul_cuda/gemm_epilogue.cuh"

namespace qwick::cuda {
namespace {

constexpr int kBT = 256;  // slots per block
constexpr int kBK = 64;   // k slice: one 128-byte swizzled row of bf16
constexpr int kStages = 4;
constexpr int kWBytes = kBW * 128, kXBytes = kBT * 128, kStageBytes = kWBytes + kXBytes;
constexpr int kThreads = kEpilogueThreads + 128;  // the consumer warpgroups, then the producer's
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;  // stages, barriers, alignment
constexpr int kGroupTiles = 16;  // slot tiles consecutive blocks walk before the next W tile
static_assert(kStages * kStageBytes >= kBT * kLdY * 4, "the output tile reuses the stages");

struct TmaGemm {
  CUtensorMap w, x;  // W rows in boxes of 128 × 64 k, X rows in boxes of 256 × 64 k
  GemmArgs a;
  int w_tiles, x_tiles;
};

// Block b's tiles: groups of kGroupTiles slot tiles, each group walking every W tile.
__device__ __forceinline__ void block_tiles(const TmaGemm& p, int* w_tile, int* x_tile) {
  const int b = static_cast<int>(blockIdx.x), per_group = kGroupTiles * p.w_tiles;
  const int first = b / per_group * kGroupTiles, size = min(p.x_tiles - first, kGroupTiles),
            i = b % per_group;
  *x_tile = first + i % size;
  *w_tile = i / size;
}

__global__ void __launch_bounds__(kThreads, 1) gemm_tma_kernel(const __grid_constant__ TmaGemm p) {
  extern __shared__ uint8_t smem_unaligned[];
  const uint32_t unaligned = smem_addr(smem_unaligned);
  const uint32_t pad = (1024 - (unaligned & 1023)) & 1023;
  const uint32_t stages = unaligned + pad;
  uint8_t* const generic = smem_unaligned + pad;
  const uint32_t full = stages + kStages * kStageBytes, empty = full + kStages * 8;  // a barrier per stage
  const GemmArgs& a = p.a;

  int w_tile, x_tile;
  block_tiles(p, &w_tile, &x_tile);
  GemmBlock blk;
  blk.s0 = int64_t{x_tile} * kBT;
  blk.s1 = min(a.n, blk.s0 + kBT);
  blk.n0 = int64_t{w_tile} * kBW;
  blk.r0 = a.act ? blk.n0 / 2 : blk.n0;  // SwiGLU: a block's 128 rows are 64 outputs' gate and up
  blk.m = a.single;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full + 8 * s, 1);
      mbarrier_init(empty + 8 * s, kEpilogueThreads / 32);
    }
    fence_mbarrier_init();
  }
  __syncthreads();
  wait_and_let_next_start();  // X comes from the kernel before
  const int KT = static_cast<int>(a.K / kBK);

  if (threadIdx.x >= kEpilogueThreads) {  // the producer: stage s takes slices s, s + 4, ...
    if (threadIdx.x == kEpilogueThreads)
      for (int kt = 0; kt < KT; ++kt) {
        const int s = kt % kStages;
        if (kt >= kStages) mbarrier_wait(empty + 8 * s, (kt / kStages - 1) & 1);
        const uint32_t base = stages + s * kStageBytes;
        mbarrier_expect_bytes(full + 8 * s, kStageBytes);
        // W from row n0 of the matrix (with SwiGLU, r0 = n0 / 2 is the block's first output).
        tma_load_2d(base, &p.w, kt * kBK, static_cast<int>(blk.n0), full + 8 * s);
        tma_load_2d(base + kWBytes, &p.x, kt * kBK, static_cast<int>(blk.s0), full + 8 * s);
      }
    return;
  }

  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  float acc[kBT / 2];
#pragma unroll
  for (int i = 0; i < kBT / 2; ++i) acc[i] = 0.0f;
  for (int kt = 0; kt < KT; ++kt) {
    const int s = kt % kStages;
    mbarrier_wait(full + 8 * s, (kt / kStages) & 1);
    const uint32_t base = stages + s * kStageBytes;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk)
      wgmma_m64n256k16_ss(acc, wgmma_desc(base + wg * 64 * 128 + 32 * kk),
                          wgmma_desc(base + kWBytes + 32 * kk));
    wgmma_commit();
    // The products of slice kt - 1 are done: their stage may take slice kt + 3.
    wgmma_wait<1>();
    if (kt > 0 && lane == 0) mbarrier_arrive(empty + 8 * ((kt - 1) % kStages));
  }
  wgmma_wait<0>();
  wgmma_fence_operands(acc);
  sync_epilogue();  // both warpgroups' products are done with the stages: they become the output tile
  if (a.act)
    store_act<kBT>(a, blk, acc, true, wg * 32 + 8 * warp + (lane >> 2), lane & 3, generic);
  else
    store_tile<kBT>(a, blk, acc, true, wg * 64 + warp * 16 + (lane >> 2), lane & 3, generic);
}

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found),
          "gemm_tma: cuTensorMapEncodeTiled");
    if (found != cudaDriverEntryPointSuccess)
      check(cudaErrorNotSupported, "gemm_tma: cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// bf16 rows [rows, cols] `row_bytes` apart, in boxes of box_rows × 64 columns with the 128-byte swizzle.
CUtensorMap rows_map(const void* base, int64_t cols, int64_t rows, int64_t row_bytes, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {kBK, static_cast<cuuint32_t>(box_rows)}, steps[2] = {1, 1};
  const CUresult r =
      encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
                     steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    check(cudaErrorInvalidValue, "gemm_tma: cuTensorMapEncodeTiled rejected the operand");
  return map;
}

}  // namespace

bool gemm_tma_fills(int64_t N, int64_t n) {
  return int64_t{blocks_for(N, kBW)} * blocks_for(n, kBT) * 8 >= int64_t{multiprocessor_count()} * 7;
}

void gemm_tma(const GemmArgs& a, cudaStream_t stream) {
  const DeviceMatrix& m = a.single;
  if (a.format != WeightFormat::kBF16 || m.format != WeightFormat::kBF16 || a.table || a.tiles || a.x_rows ||
      a.part_rows != 0)
    check(cudaErrorInvalidValue, "gemm_tma: a plain GEMM of one bf16 matrix");
  if (a.act && (a.N != m.rows || a.N % kBW != 0 || a.ld_act < a.N / 2))
    check(cudaErrorInvalidValue, "gemm_tma: SwiGLU over a stacked gate|up matrix of 128k rows");
  if (a.K % kBK != 0 || a.K != m.cols || a.N > m.rows)
    check(cudaErrorInvalidValue, "gemm_tma: K a multiple of 64, the matrix's columns, N at most its rows");
  if (a.ldx % 8 != 0 || !aligned16(a.x) || m.row_bytes % 16 != 0 || !aligned16(m.data))
    check(cudaErrorInvalidValue, "gemm_tma: X and W rows must start at 16-byte boundaries");
  if (a.y16 && a.accumulate) check(cudaErrorInvalidValue, "gemm_tma: bf16 output does not accumulate");
  if (a.n <= 0 || a.N <= 0) return;
  static const bool raised = [] {
    check(cudaFuncSetAttribute(gemm_tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
          "gemm_tma: shared memory limit");
    return true;
  }();
  (void)raised;
  TmaGemm p;
  p.w = rows_map(m.data, a.K, m.rows, m.row_bytes, kBW);
  p.x = rows_map(a.x, a.K, a.n, a.ldx * 2, kBT);
  p.a = a;
  p.w_tiles = static_cast<int>(blocks_for(a.N, kBW));
  p.x_tiles = static_cast<int>(blocks_for(a.n, kBT));
  launch_kernel(gemm_tma_kernel, dim3(static_cast<unsigned>(p.w_tiles * p.x_tiles)), dim3(kThreads),
                kSmemBytes, stream, a.overlap, "gemm_tma", p);
}

}  // namespace qwick::cuda
