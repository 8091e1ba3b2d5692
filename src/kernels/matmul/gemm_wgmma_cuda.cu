// The prefill GEMM on Hopper's warpgroup tensor-core path (matmul_cuda.h: gemm_wgmma), same
// contract as the other two kernels:
//
//   tiles     BM (64 or 128) slots × 128 outputs per block, one warpgroup per 64 slots, each issuing
//             wgmma m64n128k16 over 64-wide k slices
//   pipeline  kStages slices in flight through cp.async: the X tile (gathered through x_rows, zero
//             filled past the tile's rows) already in wgmma's swizzled layout, and W in its file
//             format, raw codes plus the scale and bias words of the slice
//   dequant   once per block and slice, by every thread, from the raw codes into a swizzled bf16 W
//             tile in shared memory (two of them, alternating), while the tensor cores still work
//             on the previous slice
//   SwiGLU    (GemmArgs::act) a block's 128 W rows are 64 gate rows and the same 64 up rows, so each
//             thread holds both products of its outputs and stores silu(gate) · up as bf16
//
// Per slice kt: wait for its copies, barrier; start the copies of slice kt + kStages - 2 (into the
// stage slice kt - 2 used, whose product has finished); dequantize W(kt); barrier; issue the four
// k16 products of slice kt; wait until the product of slice kt - 1 is done. So the decode of one
// slice overlaps the product of the one before, and a stage or W tile is rewritten only after the
// product that read it has finished.
//
// The codes become bf16 as in the mma.sync kernel (gemm_tile.cuh: dequant4_pair), so both kernels
// give the same W values; only the order of the f32 sums differs.
//
// Tests: tests/cuda/cuda_kernels_test.cpp (Gemm.*, Moe.GroupingGroupedGemmAndCombine) run every case
// through all three kernels.
#include "kernels/cuda_launch.h"
#include "kernels/matmul/dequant.cuh"
#include "kernels/matmul/gemm_tile.cuh"
#include "kernels/warpgroup_mma.cuh"

namespace qwick::cuda {
namespace {

constexpr int kBN = 128;  // outputs per block
constexpr int kBK = 64;   // k slice: one 128-byte swizzled row of bf16

template <WeightFormat F>
struct RawW {  // a W row of one slice in the file format
  static constexpr int kRowBytes = F == WeightFormat::kAffine4 ? 32 : F == WeightFormat::kAffine8 ? 64 : 128;
  static constexpr int kChunks = kRowBytes / 16;  // 16-byte chunks per row, kBK / kChunks values each
};

template <WeightFormat F, int BM, int S>
struct Layout {
  static constexpr int kThreads = BM / 64 * 128;
  static constexpr int kWTileBytes = kBN * 128;  // dequantized bf16 W of a slice
  static constexpr int kXBytes = BM * 128;
  static constexpr int kRawBytes = kBN * RawW<F>::kRowBytes;
  static constexpr int kSBBytes = F == WeightFormat::kBF16 ? 0 : kBN * 16;
  static constexpr int kStageBytes = kXBytes + kRawBytes + kSBBytes;
  static_assert(kStageBytes % 1024 == 0, "swizzled tiles need 1024-byte aligned stages");
  static constexpr int kBytes = 2 * kWTileBytes + S * kStageBytes + 1024;  // + alignment slack
};

// Blocks per SM the shared memory allows (227 KB per SM, 1 KB of it reserved per block), at most 2.
template <WeightFormat F, int BM, int S>
constexpr int kMinBlocks = (227 * 1024) / (Layout<F, BM, S>::kBytes + 1024) >= 2 ? 2 : 1;

// floor(n / d) as one multiply-high, with magic = ceil(2^32 / d): exact while n · d < 2^32 (here n
// is a column index and d a group size, both far below 2^16).
__device__ __forceinline__ int div_magic(int n, uint32_t magic) {
  return static_cast<int>(__umulhi(static_cast<uint32_t>(n), magic));
}

template <WeightFormat F, int BM, int S>
__global__ void __launch_bounds__(Layout<F, BM, S>::kThreads, (kMinBlocks<F, BM, S>))
    gemm_wgmma_kernel(GemmArgs a) {
  using L = Layout<F, BM, S>;
  using R = RawW<F>;
  constexpr int kThreads = L::kThreads;
  constexpr int kOut = kBK / R::kChunks / 8;  // 16-byte bf16 chunks one raw chunk becomes
  extern __shared__ uint8_t smem_unaligned[];
  // Two W tiles, then the stages, from a 1024-byte aligned start: as shared addresses (copies and
  // descriptors) and as a generic pointer (ordinary loads and stores).
  const uint32_t unaligned = smem_addr(smem_unaligned);
  const uint32_t pad = (1024 - (unaligned & 1023)) & 1023;
  const uint32_t w_tiles = unaligned + pad, stages = w_tiles + 2 * L::kWTileBytes;
  uint8_t* const generic = smem_unaligned + pad;  // = w_tiles
  auto at = [&](uint32_t shared) { return generic + (shared - w_tiles); };

  GemmBlock blk;
  if (!gemm_block<BM, kBN>(a, &blk)) return;
  const DeviceMatrix& m = blk.m;
  const int groups = F == WeightFormat::kBF16 ? 0 : static_cast<int>(m.cols / m.group_size);
  const uint32_t magic = F == WeightFormat::kBF16
                             ? 0
                             : static_cast<uint32_t>(((uint64_t{1} << 32) + m.group_size - 1) / m.group_size);
  const int KT = static_cast<int>(a.K / kBK);

  // Everything a thread copies and decodes keeps its place in every slice: sources advance by a
  // slice per load, destinations are fixed offsets within a stage or tile. Invalid rows copy 0 bytes
  // (their sources are never read).
  constexpr int kXPerThread = BM * 8 / kThreads, kWPerThread = kBN * R::kChunks / kThreads;
  constexpr int kSBPerThread = F == WeightFormat::kBF16 ? 0 : kBN * 4 / kThreads;
  const uint16_t* x_src[kXPerThread];
  uint32_t x_dst[kXPerThread], x_valid = 0;
#pragma unroll
  for (int j = 0; j < kXPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    const int64_t slot = blk.s0 + (i >> 3);
    const bool valid = slot < blk.s1;
    x_valid |= static_cast<uint32_t>(valid) << j;
    x_src[j] = (valid ? x_row(a, slot) : a.x) + (i & 7) * 8;
    x_dst[j] = swizzle128(i >> 3, i & 7);
  }
  const uint8_t* w_src[kWPerThread];
  uint32_t w_valid = 0, w_parity = 0;  // bit j: chunk j's row exists; parity of its first group element
  uint32_t st_off[kWPerThread][kOut];  // where chunk j's decoded 16-byte pieces go in a W tile
#pragma unroll
  for (int j = 0; j < kWPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads, r = i / R::kChunks, c = i % R::kChunks;
    const DeviceMatrix mr = tile_matrix<kBN>(a, blk, r);
    const int64_t row = tile_row<kBN>(a, blk, r);
    w_valid |= static_cast<uint32_t>(row < mr.rows) << j;
    w_src[j] = mr.data + (row < mr.rows ? row * mr.row_bytes + c * 16 : 0);
    w_parity |= static_cast<uint32_t>((row * groups) & 1) << j;
#pragma unroll
    for (int o = 0; o < kOut; ++o) st_off[j][o] = swizzle128(r, kOut * c + o);
  }
  GroupWords words[kSBPerThread > 0 ? kSBPerThread : 1];
#pragma unroll
  for (int j = 0; j < kSBPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    words[j].init(tile_matrix<kBN>(a, blk, i >> 2), tile_row<kBN>(a, blk, i >> 2), i);
  }

  int load_slice = 0, load_stage = 0;
  auto load_next = [&] {
    const uint32_t base = stages + load_stage * L::kStageBytes, raw = base + L::kXBytes;
#pragma unroll
    for (int j = 0; j < kXPerThread; ++j) {
      cp_async16_shared(base + x_dst[j], x_src[j], (x_valid >> j) & 1);
      x_src[j] += kBK;
    }
#pragma unroll
    for (int j = 0; j < kWPerThread; ++j) {
      cp_async16_shared(raw + (threadIdx.x + j * kThreads) * 16, w_src[j], (w_valid >> j) & 1);
      w_src[j] += R::kRowBytes;
    }
    if constexpr (F != WeightFormat::kBF16) {
      const int q0 = div_magic(load_slice * kBK, magic);
#pragma unroll
      for (int j = 0; j < kSBPerThread; ++j)
        words[j].load(raw + L::kRawBytes + (threadIdx.x + j * kThreads) * 4, q0);
    }
    ++load_slice;
    load_stage = load_stage + 1 == S ? 0 : load_stage + 1;
  };

  // W of slice kt from its stage's raw codes into a tile as bf16, each thread the chunks it copied.
  // Lanes of a quarter warp read 128 contiguous raw bytes and write 8 distinct chunk columns.
  auto dequantize = [&](int kt, uint32_t stage, uint32_t tile) {
    const uint8_t* const raw = at(stage + L::kXBytes);
    const uint32_t* const sb = reinterpret_cast<const uint32_t*>(raw + L::kRawBytes);
    uint8_t* const out = at(tile);
    const int k0 = kt * kBK;
    const int q0 = F == WeightFormat::kBF16 ? 0 : div_magic(k0, magic);
#pragma unroll
    for (int j = 0; j < kWPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads, r = i / R::kChunks, c = i % R::kChunks;
      const uint4 v = *reinterpret_cast<const uint4*>(raw + i * 16);
      if constexpr (F == WeightFormat::kBF16) {
        *reinterpret_cast<uint4*>(out + st_off[j][0]) = v;
      } else {
        uint32_t s2, b2;
        const int dq = div_magic(k0 + c * (kBK / R::kChunks), magic) - q0;
        group_pair(sb, r, (w_parity >> j) & 1, q0, dq, &s2, &b2);
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        if constexpr (F == WeightFormat::kAffine4) {
#pragma unroll
          for (int q = 0; q < 4; ++q) {  // word q: values 8q .. 8q + 7 of the chunk
            const uint32_t hi = w[q] >> 4;
            *reinterpret_cast<uint4*>(out + st_off[j][q]) =
                make_uint4(dequant4_pair(w[q], hi, 0, s2, b2), dequant4_pair(w[q], hi, 1, s2, b2),
                           dequant4_pair(w[q], hi, 2, s2, b2), dequant4_pair(w[q], hi, 3, s2, b2));
          }
        } else {
          const float sc = __uint_as_float(s2 << 16), bi = __uint_as_float(b2 << 16);
          uint32_t p[8];
#pragma unroll
          for (int q = 0; q < 8; ++q) {
            const uint32_t word = w[q >> 1], sh = 16 * (q & 1);
            p[q] = pack_bf16x2(static_cast<float>((word >> sh) & 0xffu) * sc + bi,
                               static_cast<float>((word >> (sh + 8)) & 0xffu) * sc + bi);
          }
          *reinterpret_cast<uint4*>(out + st_off[j][0]) = make_uint4(p[0], p[1], p[2], p[3]);
          *reinterpret_cast<uint4*>(out + st_off[j][1]) = make_uint4(p[4], p[5], p[6], p[7]);
        }
      }
    }
  };

  const int wg = threadIdx.x >> 7;                  // this warpgroup's 64 slots of the tile
  const bool has_rows = blk.s0 + wg * 64 < blk.s1;  // tiles of a tile list may fill only the first 64
  // Descriptors of slice 0's operands; a stage, a tile and a k16 step move the address field only.
  const uint64_t desc_x = wgmma_desc(stages + wg * 64 * 128), desc_w = wgmma_desc(w_tiles);
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;

#pragma unroll
  for (int s = 0; s < S - 2; ++s) {
    if (s < KT) load_next();
    cp_async_commit();
  }
  int use_stage = 0;
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<S - 3>();
    fence_proxy_async();  // this thread's copies of slice kt, before the tensor cores read them
    __syncthreads();      // slice kt is in for everyone; the product of slice kt - 2 is done
    if (load_slice < KT) load_next();
    cp_async_commit();
    const uint32_t stage = stages + use_stage * L::kStageBytes, tile = w_tiles + (kt & 1) * L::kWTileBytes;
    dequantize(kt, stage, tile);
    fence_proxy_async();
    __syncthreads();

    if (has_rows) {
      const uint64_t dx = desc_x + ((use_stage * L::kStageBytes) >> 4),
                     dw = desc_w + ((kt & 1) * L::kWTileBytes >> 4);
      wgmma_fence();
      wgmma_fence_operands(acc);
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) wgmma_m64n128k16(acc, dx + 2 * kk, dw + 2 * kk);  // 32 bytes on
      wgmma_commit();
      wgmma_wait<1>();
      wgmma_fence_operands(acc);
    }
    use_stage = use_stage + 1 == S ? 0 : use_stage + 1;
  }
  wgmma_wait<0>();
  wgmma_fence_operands(acc);
  cp_async_wait<0>();

  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t slot = blk.s0 + wg * 64 + warp * 16 + g + 8 * h;
    if (a.act) {  // column c < 64 is gate row r0 + c, column c + 64 the up row of the same output
      if (slot >= blk.s1) continue;
      uint16_t* out = a.act + slot * a.ld_act + blk.r0;
#pragma unroll
      for (int j = 0; j < kBN / 16; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = 8 * j + 2 * t + e;
          if (blk.r0 + c < m.rows)
            out[c] = f32_to_bf16(siluf_(acc[4 * j + 2 * h + e]) * acc[4 * (j + kBN / 16) + 2 * h + e]);
        }
      continue;
    }
#pragma unroll
    for (int j = 0; j < 16; ++j)
      store_pair(a, blk, slot, 8 * j + 2 * t, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
  }
}

template <WeightFormat F, int BM, int S>
void launch(const GemmArgs& a, unsigned row_tiles, cudaStream_t stream) {
  using L = Layout<F, BM, S>;
  static const bool raised = [] {
    check(cudaFuncSetAttribute(gemm_wgmma_kernel<F, BM, S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               L::kBytes),
          "gemm_wgmma: shared memory limit");
    return true;
  }();
  (void)raised;
  const dim3 grid(blocks_for(a.N, kBN), row_tiles);
  gemm_wgmma_kernel<F, BM, S><<<grid, L::kThreads, L::kBytes, stream>>>(a);
}

// 64-slot tiles: 4 stages, two blocks per SM. 128-slot tiles: 3 stages, still two blocks per SM (a
// fourth stage leaves room for one, measured 25 % slower).
template <int BM>
void launch_format(const GemmArgs& a, unsigned row_tiles, cudaStream_t stream) {
  constexpr int S = BM == 128 ? 3 : 4;
  switch (a.format) {
    case WeightFormat::kAffine4:
      launch<WeightFormat::kAffine4, BM, S>(a, row_tiles, stream);
      break;
    case WeightFormat::kAffine8:
      launch<WeightFormat::kAffine8, BM, S>(a, row_tiles, stream);
      break;
    default:
      launch<WeightFormat::kBF16, BM, S>(a, row_tiles, stream);
      break;
  }
}

}  // namespace

void gemm_wgmma(const GemmArgs& a, cudaStream_t stream) {
  const RowTiling t = row_tiling(a, multiprocessor_count());  // two 128-slot blocks fit an SM
  if (a.act && (a.part_rows <= 0 || a.part_rows % 64 != 0 || a.N != 2 * a.part_rows || !a.table))
    check(cudaErrorInvalidValue, "gemm_wgmma: the SwiGLU epilogue takes gate|up parts of 64k rows");
  if (t.tiles == 0) return;
  if (t.rows == 128)
    launch_format<128>(a, t.tiles, stream);
  else
    launch_format<64>(a, t.tiles, stream);
  check_launch("gemm_wgmma");
}

}  // namespace qwick::cuda
