// The simple prefill GEMM on the tensor cores: Y[slot, n] = Σ_k X[row(slot), k] · W[n, k], bf16
// operands, f32 accumulation (see matmul_cuda.h for the table and tile conventions, and for when the
// wgmma kernel runs instead), and gemm(), which picks the kernel by shape.
//
// One block computes a 64 (slots) × 64 (outputs) tile with 4 warps in a 2 × 2 layout, each warp a
// 32 × 32 sub-tile = 2 × 4 mma.sync.m16n8k16 per 16-wide k step. Per 64-wide k slice:
//   X tile  64 rows × 64 bf16, gathered through x_rows (expert groups), zero beyond the tile's rows
//   W tile  64 rows × 64, dequantized from 4/8-bit (or copied from bf16) into shared memory as bf16
// Both tiles are stored [row][k] with 8 elements of padding so fragment loads are conflict-free.
//
// Fragment layouts of m16n8k16 (g = lane / 4, t = lane % 4), each register a bf16 pair along k:
//   A (16×16, row major)   a0 = A[g][2t..], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   B (16×8, from W[n][k]) b0 = W[g][2t..], b1 = W[g][2t+8..]
//   C (16×8, f32)          c0,c1 = C[g][2t, 2t+1], c2,c3 = C[g+8][2t, 2t+1]
//
// Test: tests/cuda/gemm_cuda_test.cpp (Gemm.*) against matmul_rows_reference on bf16-rounded
// inputs, over formats, real and odd shapes, and grouped tile lists.
#include "kernels/cuda/cuda_launch.h"
#include "kernels/matmul_cuda/dequant.cuh"
#include "kernels/matmul_cuda/gemm_tile.cuh"

namespace qwick::cuda {
namespace {

constexpr int kTile = 64;    // slots and outputs per block
constexpr int kK = 64;       // k slice
constexpr int kLd = kK + 8;  // padded row of a shared tile, in bf16
constexpr int kThreads = 128;

// This thread's share of W rows [r0, r0 + 64) × columns [k0, k0 + 64), as bf16 into ws.
template <WeightFormat F>
__device__ __forceinline__ void load_w_tile(const DeviceMatrix& m, int64_t r0, int64_t k0, uint16_t* ws) {
  constexpr int E = ChunkTraits<F>::kElems;
  constexpr int kChunksPerRow = kK / E;
  for (int i = threadIdx.x; i < kTile * kChunksPerRow; i += kThreads) {
    const int r = i / kChunksPerRow, c = i % kChunksPerRow;
    const int64_t row = r0 + r, col = k0 + c * E;
    uint32_t packed[E / 2];
    if (row < m.rows) {
      const uint4 w = *reinterpret_cast<const uint4*>(m.data + row * m.row_bytes + col_byte<F>(col));
      float s = 0.0f, b = 0.0f;
      if constexpr (F != WeightFormat::kBF16) group_params(m, row, col, &s, &b);
#pragma unroll
      for (int j = 0; j < E / 2; ++j) {
        if constexpr (F == WeightFormat::kBF16)
          packed[j] = chunk_code<F>(w, 2 * j) | (chunk_code<F>(w, 2 * j + 1) << 16);
        else
          packed[j] = pack_bf16x2(chunk_value<F>(w, 2 * j, s, b), chunk_value<F>(w, 2 * j + 1, s, b));
      }
    } else {
#pragma unroll
      for (int j = 0; j < E / 2; ++j) packed[j] = 0;
    }
    uint4* dst = reinterpret_cast<uint4*>(ws + r * kLd + c * E);
#pragma unroll
    for (int j = 0; j < E / 8; ++j)
      dst[j] = make_uint4(packed[4 * j], packed[4 * j + 1], packed[4 * j + 2], packed[4 * j + 3]);
  }
}

template <WeightFormat F>
__global__ void __launch_bounds__(kThreads) gemm_kernel(GemmArgs a) {
  __shared__ __align__(16) uint16_t xs[kTile * kLd];
  __shared__ __align__(16) uint16_t ws[kTile * kLd];

  GemmBlock blk;
  if (!gemm_block<kTile, kTile>(a, &blk)) return;
  const DeviceMatrix& m = blk.m;
  const int64_t s0 = blk.s0, s1 = blk.s1, r0 = blk.r0;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
  float acc[2][4][4] = {};

  for (int64_t k0 = 0; k0 < a.K; k0 += kK) {
    // X tile: 64 rows × 8 chunks of 8 bf16.
    for (int i = threadIdx.x; i < kTile * 8; i += kThreads) {
      const int r = i >> 3, c = i & 7;
      const int64_t slot = s0 + r;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (slot < s1) v = *reinterpret_cast<const uint4*>(x_row(a, slot) + k0 + c * 8);
      *reinterpret_cast<uint4*>(xs + r * kLd + c * 8) = v;
    }
    load_w_tile<F>(m, r0, k0, ws);
    __syncthreads();

#pragma unroll
    for (int kk = 0; kk < kK; kk += 16) {
      uint32_t af[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const uint16_t* base = xs + (wm + mt * 16 + g) * kLd + kk + 2 * t;
        af[mt][0] = *reinterpret_cast<const uint32_t*>(base);
        af[mt][1] = *reinterpret_cast<const uint32_t*>(base + 8 * kLd);
        af[mt][2] = *reinterpret_cast<const uint32_t*>(base + 8);
        af[mt][3] = *reinterpret_cast<const uint32_t*>(base + 8 * kLd + 8);
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const uint16_t* base = ws + (wn + nt * 8 + g) * kLd + kk + 2 * t;
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(base);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(base + 8);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
          mma_bf16(acc[mt][nt], af[mt][0], af[mt][1], af[mt][2], af[mt][3], b0, b1);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t slot = s0 + wm + mt * 16 + g + 8 * h;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
        store_pair(a, blk, slot, wn + nt * 8 + 2 * t, acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
    }
  }
}

}  // namespace

void gemm(const GemmArgs& a, cudaStream_t stream) {
  if (a.y16 && a.accumulate) check(cudaErrorInvalidValue, "gemm: bf16 output does not accumulate");
  // Each block's outputs come from one part (gemm_tile.cuh: gemm_block).
  if (a.part_rows % kTile != 0) check(cudaErrorInvalidValue, "gemm: parts must be multiples of 64 rows");
  if (a.act || a.part_rows % 128 == 0) return gemm_wgmma(a, stream);
  gemm_simple(a, stream);
}

void gemm_simple(const GemmArgs& a, cudaStream_t stream) {
  if (a.act) check(cudaErrorInvalidValue, "gemm: the SwiGLU epilogue is the wgmma kernel's");
  if (a.part_rows % kTile != 0) check(cudaErrorInvalidValue, "gemm: parts must be multiples of 64 rows");
  if (a.tiles && a.tile_rows > kTile)
    check(cudaErrorInvalidValue, "gemm: this kernel takes tiles of 64 rows");
  const unsigned tiles = a.tiles ? static_cast<unsigned>(a.max_tiles) : blocks_for(a.n, kTile);
  if (tiles == 0) return;
  const dim3 grid(blocks_for(a.N, kTile), tiles);
  with_device_format(a.format, "gemm: weights must be affine 4/8-bit or bf16 on the GPU", [&](auto f) {
    launch_kernel(gemm_kernel<f.value>, grid, dim3(kThreads), 0, stream, a.overlap, "gemm", a);
  });
}

}  // namespace qwick::cuda
