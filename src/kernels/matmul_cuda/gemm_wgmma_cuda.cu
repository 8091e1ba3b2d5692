// The prefill GEMM on Hopper's warpgroup tensor-core path (matmul_cuda.h: gemm_wgmma), same
// contract as the other two kernels, with the operands swapped: W is wgmma's A operand, decoded by each
// thread straight into its registers, and the activations X are the B operand in shared memory.
//
//   tiles     128 outputs (W rows) × BT slots per block, two warpgroups of 64 W rows each, issuing
//             wgmma m64nBTk16 over 64-wide k slices: BT = 64, 128 or 144 with two blocks per SM (144:
//             expert groups, whose rows at a 4096-row chunk are 128 ± 11, so most fit one tile), 256
//             (plain GEMMs of enough rows, one block per SM: each decoded W value then serves twice the
//             slots); tiles holding fewer slots take the narrowest product that covers them; a plain
//             bf16 GEMM of one wave takes one 128-slot block per SM, with more stages
//   pipeline  S slices in flight through cp.async: the X tile (gathered through x_rows; slots past
//             the tile repeat its last one) already in wgmma's swizzled layout, and W in its file
//             format, raw codes plus the scale and bias words of the slice
//   dequant   by every thread, for its own two W rows (wgmma's A fragment rows g and g + 8), from the
//             raw codes in shared memory into bf16 pairs in registers: no decoded W tile, and no
//             barrier between decode and product
//   SwiGLU    (GemmArgs::act) a block's 128 W rows are 8-row runs of gate and up rows of 64 outputs
//             (gemm_tile.cuh: tile_matrix), so a thread's rows g and g + 8 are one output's gate and up
//             and it computes silu(gate) · up
//   output    staged through shared memory (the stages, once the products are done) and written as
//             coalesced 16-byte pieces: f32 rows of y, or the bf16 activations
//
// Per slice kt: wait for its copies, barrier (so the stage slice kt - 2 used is free: every warpgroup
// waited for its products during slice kt - 1); start the copies of slice kt + S - 2 into it; decode
// the four k16 steps' A fragments and issue their products. The A registers of a slice stay in use
// until its products are done: 64- and 128-slot tiles (two blocks per SM, 128 registers) have one set,
// so the decode first waits for the products of slice kt - 1 and overlaps those of the other three
// warpgroups on the SM; 256-slot tiles have two and wait after issuing, for slice kt - 1's, so the
// decode also overlaps the warpgroup's own products.
//
// The codes become bf16 as decode_bf16 makes them (gemm_tile.cuh: dequant4_pair), so a GEMM over a
// bf16 copy gives the same W values; only the order of the f32 sums differs.
//
// Tests: tests/cuda/gemm_cuda_test.cpp (Gemm.*) and moe_cuda_test.cpp
// (Moe.GroupingGroupedGemmAndCombine) run every case through both kernels.
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/warpgroup_mma.cuh"
#include "kernels/matmul_cuda/dequant.cuh"
#include "kernels/matmul_cuda/gemm_epilogue.cuh"
#include "kernels/matmul_cuda/gemm_tile.cuh"

namespace qwick::cuda {
namespace {

constexpr int kBK = 64;                     // k slice: one 128-byte swizzled row of bf16 X
constexpr int kThreads = kEpilogueThreads;  // the two warpgroups

template <WeightFormat F>
struct RawW {  // a W row of one slice in the file format
  static constexpr int kRowBytes = F == WeightFormat::kAffine4 ? 32 : F == WeightFormat::kAffine8 ? 64 : 128;
  static constexpr int kChunks = kRowBytes / 16;  // 16-byte chunks per row
};

// One stage: the X tile (BT slots × 128 bytes, swizzled), the raw W rows, the group words. As many
// stages as leave room for the blocks per SM (227 KB per SM, 1 KB of it reserved per block, 1 KB of
// alignment slack), at most 6: two blocks of 64- or 128-slot tiles, one of 256 (whose accumulators
// take 128 registers a thread). A launch of one wave may take one 64- or 128-slot block an SM with more
// stages instead (gemm_wgmma: the bf16 router).
template <WeightFormat F, int BT, int Blocks>
struct Layout {
  static_assert(Blocks == 1 || (Blocks == 2 && BT != 256), "256-slot tiles take one block an SM");
  static constexpr int kBlocksPerSM = Blocks;
  static constexpr int kXBytes = BT * 128;
  static constexpr int kRawBytes = kBW * RawW<F>::kRowBytes;
  static constexpr int kSBBytes = F == WeightFormat::kBF16 ? 0 : kBW * 16;
  static constexpr int kStageBytes = kXBytes + kRawBytes + kSBBytes;
  static_assert(kStageBytes % 1024 == 0, "swizzled tiles need 1024-byte aligned stages");
  static constexpr int kFit = (227 * 1024 / kBlocksPerSM - 2048) / kStageBytes;
  static constexpr int kStages = kFit < 6 ? kFit : 6;
  static_assert(kStages >= 3, "the pipeline keeps a slice in the tensor cores and one loading");
  static constexpr int kBytes = kStages * kStageBytes + 1024;
};

// floor(n / d) as one multiply-high, with magic = ceil(2^32 / d): exact while n · d < 2^32 (here n
// is a column index and d a group size, both far below 2^16).
__device__ __forceinline__ int div_magic(int n, uint32_t magic) {
  return static_cast<int>(__umulhi(static_cast<uint32_t>(n), magic));
}

// Where a raw W row's 16-byte chunk c lies in shared memory. bf16 rows are 128 bytes, so the 8 rows a
// warp's fragment loads read (r0 = g of a 16-row run, g = lane / 4) would all start in bank 0: chunk c of
// row r goes to chunk c ^ (r % 8), and each of the warp's word loads meets 32 banks. Narrower rows
// (4 and 8 bits) keep their order.
template <WeightFormat F>
__host__ __device__ constexpr int raw_chunk(int r, int c) {
  return F == WeightFormat::kBF16 ? c ^ (r & 7) : c;
}

// A thread's A fragment of k16 step kk (tile rows r0 and r0 + 8, warpgroup_mma.cuh's layout, both
// with r % 8 = g) from the slice's raw rows `row0`, `row1` in shared memory; s2[i], b2[i] are row i's
// scale and bias pairs for this step (unused for bf16).
template <WeightFormat F>
__device__ __forceinline__ void fragment(const uint8_t* row0, const uint8_t* row1, int kk, int g, int t,
                                         const uint32_t (&s2)[2], const uint32_t (&b2)[2], uint32_t (&f)[4]) {
  const uint8_t* rows[2] = {row0, row1};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if constexpr (F == WeightFormat::kAffine4) {  // step kk: words 2kk (k 0..7) and 2kk + 1 (k 8..15)
      const uint2 w = reinterpret_cast<const uint2*>(rows[i])[kk];
      f[i] = dequant4_pair(w.x, w.x >> 4, t, s2[i], b2[i]);
      f[2 + i] = dequant4_pair(w.y, w.y >> 4, t, s2[i], b2[i]);
    } else if constexpr (F == WeightFormat::kAffine8) {  // step kk: words 4kk .. 4kk + 3
      const uint32_t* w = reinterpret_cast<const uint32_t*>(rows[i]) + 4 * kk + (t >> 1);
      const int sh = 16 * (t & 1);
      const float sc = __uint_as_float(s2[i] << 16), bi = __uint_as_float(b2[i] << 16);
#pragma unroll
      for (int h = 0; h < 2; ++h) f[2 * h + i] = dequant8_pair(w[2 * h], sh, sc, bi);
    } else {  // step kk: chunks 2kk and 2kk + 1 (words 8kk .. 8kk + 7), already bf16 pairs
      const uint32_t* w = reinterpret_cast<const uint32_t*>(rows[i]) + t;
      f[i] = w[4 * raw_chunk<F>(g, 2 * kk)];
      f[2 + i] = w[4 * raw_chunk<F>(g, 2 * kk + 1)];
    }
  }
}

template <WeightFormat F, int BT, int Blocks>
__global__ void __launch_bounds__(kThreads, Blocks) gemm_wgmma_kernel(GemmArgs a) {
  using L = Layout<F, BT, Blocks>;
  using R = RawW<F>;
  constexpr int S = L::kStages;
  static_assert(S * L::kStageBytes >= BT * kLdY * 4, "the output tile reuses the stages");
  extern __shared__ uint8_t smem_unaligned[];
  // The stages from a 1024-byte aligned start: as shared addresses (copies and descriptors) and as a
  // generic pointer (ordinary loads and the output tile).
  const uint32_t unaligned = smem_addr(smem_unaligned);
  const uint32_t pad = (1024 - (unaligned & 1023)) & 1023;
  const uint32_t stages = unaligned + pad;
  uint8_t* const generic = smem_unaligned + pad;

  GemmBlock blk;
  if (!gemm_block<BT, kBW>(a, &blk)) return;
  const DeviceMatrix& m = blk.m;
  const int groups = F == WeightFormat::kBF16 ? 0 : static_cast<int>(m.cols / m.group_size);
  const uint32_t magic = F == WeightFormat::kBF16
                             ? 0
                             : static_cast<uint32_t>(((uint64_t{1} << 32) + m.group_size - 1) / m.group_size);
  const int KT = static_cast<int>(a.K / kBK);
  // Slots the products cover: a tile list entry or the last tile of a plain GEMM may hold fewer than
  // BT, then the narrowest product that holds them (m64n64k16, m64n128k16) and only their X copies.
  const int64_t slots = blk.s1 - blk.s0;
  const int width = slots <= 64 ? 64 : slots <= 128 ? 128 : BT;

  // Everything a thread copies keeps its place in every slice: sources advance by a slice per load,
  // destinations are fixed offsets within a stage. Slots past the tile copy its last slot and rows past
  // the matrix its last row: what they add up lands in accumulators that are never stored, and no copy
  // needs a predicate. Thread i's X rows are i / 8 + 32j (those at or past the product's width are not
  // copied), so their swizzle is the same for every j.
  constexpr int kXPerThread = (BT * 8 + kThreads - 1) / kThreads, kWPerThread = kBW * R::kChunks / kThreads;
  constexpr int kSBPerThread = F == WeightFormat::kBF16 ? 0 : kBW * 4 / kThreads;
  // Its X sources are 16-byte chunk indices from x_slice, the slice's column 0 of row 0. (As 64-bit
  // pointers advanced in place, ptxas kept most in unpaired registers and moved each into one pair
  // before its cp.async, so every copy waited for the one before to read that pair, and the advances
  // took two instructions a source.)
  uint32_t x_chunk[kXPerThread];
#pragma unroll
  for (int j = 0; j < kXPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    x_chunk[j] = static_cast<uint32_t>(x_row_start(a, min(blk.s0 + (i >> 3), blk.s1 - 1)) / 8 + (i & 7));
  }
  const uint16_t* x_slice = a.x;
  const uint32_t x_dst = swizzle128(threadIdx.x >> 3, threadIdx.x & 7);
  const uint8_t* w_src[kWPerThread];
#pragma unroll
  for (int j = 0; j < kWPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads, r = i / R::kChunks, c = i % R::kChunks;
    const DeviceMatrix mr = tile_matrix(a, blk, r);
    w_src[j] = mr.data + min(tile_row(a, blk, r), mr.rows - 1) * mr.row_bytes + c * 16;
  }
  // Thread i's W chunks are rows i / kChunks + j · kThreads / kChunks, whose r % 8 is the same for every j.
  const uint32_t w_dst = (threadIdx.x / R::kChunks * R::kChunks +
                          raw_chunk<F>(threadIdx.x / R::kChunks, threadIdx.x % R::kChunks)) *
                         16;
  GroupWords<kSBPerThread> words;
  if constexpr (kSBPerThread > 0) {  // rows 64 apart: one matrix (gate or up, or one part)
    int64_t rows[kSBPerThread];
#pragma unroll
    for (int j = 0; j < kSBPerThread; ++j) rows[j] = tile_row(a, blk, (threadIdx.x + j * kThreads) >> 2);
    words.init(tile_matrix(a, blk, threadIdx.x >> 2), rows, threadIdx.x);
  }

  int load_slice = 0, load_stage = 0;
  auto load_next = [&] {
    const uint32_t base = stages + load_stage * L::kStageBytes, raw = base + L::kXBytes;
#pragma unroll
    for (int j = 0; j < kXPerThread; ++j) {
      if (j * (kThreads / 8) + (threadIdx.x >> 3) < width)
        cp_async16_shared(base + x_dst + j * (kThreads / 8) * 128, wide_address<16>(x_slice, x_chunk[j]),
                          true);
    }
    x_slice += kBK;
#pragma unroll
    for (int j = 0; j < kWPerThread; ++j) {
      cp_async16_shared(raw + w_dst + j * kThreads * 16,
                        wide_address<R::kRowBytes>(w_src[j], static_cast<uint32_t>(load_slice)), true);
    }
    if constexpr (F != WeightFormat::kBF16) {
      const int q0 = div_magic(load_slice * kBK, magic);
#pragma unroll
      for (int j = 0; j < kSBPerThread; ++j)
        words.load(j, raw + L::kRawBytes + (threadIdx.x + j * kThreads) * 4, q0);
    }
    ++load_slice;
    load_stage = load_stage + 1 == S ? 0 : load_stage + 1;
  };

  // This thread's W rows: A rows g and g + 8 of its warpgroup's 64, tile rows r0 and r0 + 8.
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int r0 = wg * 64 + warp * 16 + g;
  // Bit i: parity of row r0 + 8i's first group element. Opaque to the compiler, which would otherwise
  // recompute it in every slice.
  uint32_t parity = 0;
#pragma unroll
  for (int i = 0; i < 2; ++i)
    parity |= static_cast<uint32_t>((tile_row(a, blk, r0 + 8 * i) * groups) & 1) << i;
  asm volatile("" : "+r"(parity));
  // A plain GEMM's last block may have no weights for the second warpgroup (N = 32 for DeltaNet's b
  // and a): it skips its decode and products.
  const bool has_rows = tile_row(a, blk, wg * 64) < tile_matrix(a, blk, wg * 64).rows;

  float acc[BT / 2];
#pragma unroll
  for (int i = 0; i < BT / 2; ++i) acc[i] = 0.0f;

#pragma unroll
  for (int s = 0; s < S - 2; ++s) {
    if (s < KT) load_next();
    cp_async_commit();
  }
  // 256-slot tiles (one block per SM) keep the A registers of two slices: the decode of a slice then
  // overlaps this warpgroup's own products of the one before. Narrower tiles have the registers for
  // one: their decode waits for those products, and overlaps the other warpgroups' on the SM.
  constexpr int kFragSets = BT == 256 ? 2 : 1;
  uint32_t frag[kFragSets][4][4];
  int use_stage = 0;
  auto slice = [&](int kt, uint32_t(&f)[4][4]) {
    cp_async_wait<S - 3>();
    fence_proxy_async();  // this thread's copies of slice kt, before the tensor cores read them
    __syncthreads();      // slice kt is in for everyone; the products of slice kt - 2 are done
    if (load_slice < KT) load_next();
    cp_async_commit();

    if (has_rows) {
      const uint8_t* const raw = generic + use_stage * L::kStageBytes + L::kXBytes;
      const uint32_t x_tile = stages + use_stage * L::kStageBytes;
      // Group pairs of both rows for steps 0-1 and 2-3 (groups are multiples of 32 wide and start at
      // multiples of 32, so a group boundary inside the slice falls between steps 1 and 2).
      uint32_t s2[2][2] = {}, b2[2][2] = {};
      if constexpr (F != WeightFormat::kBF16) {
        const int k0 = kt * kBK, q0 = div_magic(k0, magic), dq = div_magic(k0 + kBK / 2, magic) - q0;
        const uint4* sb = reinterpret_cast<const uint4*>(raw + L::kRawBytes);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const uint4 w = sb[r0 + 8 * i];
          const int idx = static_cast<int>((parity >> i) ^ static_cast<uint32_t>(q0)) & 1;
          group_pair_of(w, idx, &s2[0][i], &b2[0][i]);
          group_pair_of(w, idx + dq, &s2[1][i], &b2[1][i]);
        }
      }
      if constexpr (kFragSets == 1) wgmma_wait<0>();  // the previous slice's products read f
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk)
        fragment<F>(raw + r0 * R::kRowBytes, raw + (r0 + 8) * R::kRowBytes, kk, g, t, s2[kk >> 1],
                    b2[kk >> 1], f[kk]);
      wgmma_fence();
      // Each branch commits its own products (a commit after the branches costs an empty product).
      if (width == 64) {
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) wgmma_m64n64k16(acc, f[kk], wgmma_desc(x_tile + 32 * kk));
        wgmma_commit();
      } else if (width == 128) {
        if constexpr (BT >= 128) {
#pragma unroll
          for (int kk = 0; kk < kBK / 16; ++kk) wgmma_m64n128k16(acc, f[kk], wgmma_desc(x_tile + 32 * kk));
          wgmma_commit();
        }
      } else if constexpr (BT == 144) {
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) wgmma_m64n144k16(acc, f[kk], wgmma_desc(x_tile + 32 * kk));
        wgmma_commit();
      } else if constexpr (BT == 256) {
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) wgmma_m64n256k16(acc, f[kk], wgmma_desc(x_tile + 32 * kk));
        wgmma_commit();
      }
      // Two register sets: the products of slice kt - 1 are done with theirs (which slice kt + 1
      // decodes into) and with their stage.
      if constexpr (kFragSets == 2) wgmma_wait<1>();
      // 8-bit weights gave wrong sums on the H200 (every shape, 128-slot tiles only, the kernel at the
      // 128-register cap) unless each slice's products are waited for here or the kernel runs one
      // block per SM. Cause not found: its SASS writes no operand register while a product is in
      // flight, and no copy targets a stage in flight. 8-bit prefill weights are rare (MLX 4-bit
      // checkpoints use them for the router, which runs in f32), so they take this safe order.
      if constexpr (F == WeightFormat::kAffine8) wgmma_wait<0>();
    }
    use_stage = use_stage + 1 == S ? 0 : use_stage + 1;
  };
  for (int kt = 0; kt < KT; kt += kFragSets) {
    slice(kt, frag[0]);
    if constexpr (kFragSets == 2)
      if (kt + 1 < KT) slice(kt + 1, frag[kFragSets - 1]);
  }
  wgmma_wait<0>();
  wgmma_fence_operands(acc);
  cp_async_wait<0>();
  __syncthreads();  // every product and copy is done: the stages become the output tile
  if (a.act)
    store_act<BT>(a, blk, acc, has_rows, wg * 32 + 8 * warp + g, t, generic);
  else
    store_tile<BT>(a, blk, acc, has_rows, r0, t, generic);
}

template <WeightFormat F, int BT, int Blocks>
void launch(const GemmArgs& a, unsigned row_tiles, cudaStream_t stream) {
  using L = Layout<F, BT, Blocks>;
  static const bool raised = [] {
    check(cudaFuncSetAttribute(gemm_wgmma_kernel<F, BT, Blocks>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               L::kBytes),
          "gemm_wgmma: shared memory limit");
    return true;
  }();
  (void)raised;
  const dim3 grid(blocks_for(a.N, kBW), row_tiles);
  launch_kernel(gemm_wgmma_kernel<F, BT, Blocks>, grid, dim3(kThreads), L::kBytes, stream, a.overlap,
                "gemm_wgmma", a);
}

// `deep`: one block an SM with up to 6 stages (bf16 weights, 128-slot tiles only).
template <int BT>
void launch_format(const GemmArgs& a, unsigned row_tiles, bool deep, cudaStream_t stream) {
  with_device_format(a.format, "gemm_wgmma: weights must be affine 4/8-bit or bf16 on the GPU", [&](auto f) {
    if constexpr (BT == 256)
      launch<f.value, BT, 1>(a, row_tiles, stream);
    else if constexpr (BT == 128 && f.value == WeightFormat::kBF16)
      deep ? launch<f.value, BT, 1>(a, row_tiles, stream) : launch<f.value, BT, 2>(a, row_tiles, stream);
    else
      launch<f.value, BT, 2>(a, row_tiles, stream);
  });
}

}  // namespace

void gemm_wgmma(const GemmArgs& a, cudaStream_t stream) {
  if (a.format == WeightFormat::kBF16 && !a.table && !a.tiles && !a.x_rows && a.part_rows == 0 &&
      a.tile_rows == 0 && gemm_tma_fills(a.N, a.n))
    return gemm_tma(a, stream);
  // Two 64- or 128-slot blocks fit an SM, one 256-slot block. A block's slices take about the same time
  // at 64 or 128 slots (their copies' latency), so 128-slot tiles pay while they still give every
  // other SM a block: at 4096 rows the router (N = 257) 65 → 54 µs, the shared expert's 512-row
  // gate_proj 45 → 33 µs.
  const RowTiling t = row_tiling(a, multiprocessor_count() / 2, 256, multiprocessor_count());
  // 16-byte copies of X rows, addressed by 32-bit chunk indices: up to 64 GB of x.
  if (a.ldx % 8 != 0 || !aligned16(a.x))
    check(cudaErrorInvalidValue, "gemm_wgmma: X rows must start at 16-byte boundaries");
  if (a.act && (a.part_rows <= 0 || a.part_rows % 64 != 0 || a.N != 2 * a.part_rows || !a.table))
    check(cudaErrorInvalidValue, "gemm_wgmma: the SwiGLU epilogue takes gate|up parts of 64k rows");
  if (t.tiles == 0) return;
  // A plain bf16 GEMM of one wave at one block an SM (the prefill router: 96 blocks at 4096 rows) takes
  // that block with 6 stages. A bf16 slice is four times a 4-bit one's bytes, so at two blocks an SM
  // (3 stages each) a block keeps one slice in flight and waits on its copy's round trip: the router
  // took ~55 µs at 4096 rows so.
  const bool deep = a.format == WeightFormat::kBF16 && !a.tiles &&
                    int64_t{blocks_for(a.N, kBW)} * t.tiles <= multiprocessor_count();
  if (t.rows == 256)
    launch_format<256>(a, t.tiles, false, stream);
  else if (t.rows == 144)
    launch_format<144>(a, t.tiles, false, stream);
  else if (t.rows == 128)
    launch_format<128>(a, t.tiles, deep, stream);
  else
    launch_format<64>(a, t.tiles, false, stream);
}

}  // namespace qwick::cuda
