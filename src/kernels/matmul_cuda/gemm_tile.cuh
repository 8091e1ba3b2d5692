// What the prefill GEMMs (gemm_cuda.cu on mma.sync, gemm_wgmma_cuda.cu on wgmma) share: the tile
// shape of a launch, which slots and matrix rows a block covers, the quantization-group words of a k
// slice staged next to the codes, decoding 4-bit codes into bf16 pairs, and the f32 output store.
#pragma once

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/tensor_core.cuh"
#include "kernels/matmul_cuda/matmul_cuda.h"

namespace qwick::cuda {

// The tile of block (blockIdx.x, blockIdx.y): slots [s0, s1) (the tile list's entry, or BM rows of
// a plain GEMM), output columns from n0 (BN of them), which are rows from r0 of matrix m.
struct GemmBlock {
  int64_t s0 = 0, s1 = 0, n0 = 0, r0 = 0;
  DeviceMatrix m;
  DeviceMatrix up;  // SwiGLU launches (GemmArgs::act): m is gate; tile_matrix says which rows come from up
};
// False when the tile list is shorter than the grid and this block has no tile. Every GEMM kernel
// starts here (GemmArgs::overlap: the tile list and X come from the kernels before).
template <int BM, int BN>
__device__ __forceinline__ bool gemm_block(const GemmArgs& a, GemmBlock* b) {
  wait_and_let_next_start();
  int group = 0;
  if (a.tiles) {
    if (static_cast<int64_t>(blockIdx.y) >= *a.tile_count) return false;
    const GemmTile tile = a.tiles[blockIdx.y];
    group = tile.group, b->s0 = tile.begin, b->s1 = tile.end;
  } else {
    b->s0 = static_cast<int64_t>(blockIdx.y) * BM;
    b->s1 = min(a.n, b->s0 + BM);
  }
  b->n0 = static_cast<int64_t>(blockIdx.x) * BN;
  if (a.act) {  // BN/2 gate rows and the same BN/2 up rows: outputs [n0/2, n0/2 + BN/2) of the act
    b->r0 = b->n0 / 2;
    b->m = a.table[group * a.table_stride + a.table_base];
    b->up = a.table[group * a.table_stride + a.table_base + 1];
    return true;
  }
  const int part = a.part_rows > 0 ? static_cast<int>(b->n0 / a.part_rows) : 0;
  b->r0 = b->n0 - part * a.part_rows;
  b->m = a.table ? a.table[group * a.table_stride + a.table_base + part] : a.single;
  return true;
}

// Slots per tile and row tiles of a launch with 128 outputs per block: a tile list's tile_rows (64, 128
// or 144); for plain GEMMs tile_rows when forced, else the most of `max_rows` (128 or 256), 128 and 64 that
// still give the launch min_blocks_256 (256-slot tiles, one block per SM) or min_blocks (128) blocks: short
// chunks and narrow matrices would otherwise leave SMs idle. row_tiles 0: nothing to do.
struct RowTiling {
  int rows = 64;
  unsigned tiles = 0;
};
inline RowTiling row_tiling(const GemmArgs& a, int64_t min_blocks, int max_rows = 128,
                            int64_t min_blocks_256 = 0) {
  static_assert(kGemmTileRows == 64, "tile lists of kGemmTileRows take 64-slot tiles");
  if (a.tiles)
    return {a.tile_rows == 128 || a.tile_rows == 144 ? a.tile_rows : 64,
            a.max_tiles > 0 ? static_cast<unsigned>(a.max_tiles) : 0u};
  if (a.n <= 0) return {};
  const auto blocks = [&](int rows) {
    return static_cast<int64_t>(blocks_for(a.n, rows)) * blocks_for(a.N, 128);
  };
  int rows = 64;
  if (a.tile_rows != 0)
    rows = a.tile_rows == 256 && max_rows == 256   ? 256
           : a.tile_rows == 144 && max_rows == 256 ? 144
           : a.tile_rows == 64                     ? 64
                                                   : 128;
  else if (max_rows == 256 && blocks(256) >= min_blocks_256)
    rows = 256;
  else if (blocks(128) >= min_blocks)
    rows = 128;
  return {rows, blocks_for(a.n, rows)};
}

// Row `slot` of the X operand at k = 0, for a valid slot (through x_rows for expert groups).
__device__ __forceinline__ int64_t x_row_start(const GemmArgs& a, int64_t slot) {  // in elements from x
  return (a.x_rows ? a.x_rows[slot] : slot) * a.ldx;
}
__device__ __forceinline__ const uint16_t* x_row(const GemmArgs& a, int64_t slot) {
  return a.x + x_row_start(a, slot);
}

// base + kScale · i for a 32-bit unsigned index, in one wide multiply-add: a fresh register pair for a
// copy's source, where a 64-bit pointer kept and advanced per copy costs two adds and ties the copy to
// its registers.
template <int kScale>
__device__ __forceinline__ const void* wide_address(const void* base, uint32_t i) {
  uint64_t r;
  asm("mad.wide.u32 %0, %1, %2, %3;\n"
      : "=l"(r)
      : "r"(i), "n"(kScale), "l"(reinterpret_cast<uint64_t>(base)));
  return reinterpret_cast<const void*>(r);
}

// Quantization-group words of a 64-wide k slice. The slice touches at most two groups of a row
// (groups are multiples of 32 wide); 4-byte copies need 4-byte alignment, so the stage keeps, per W
// row r, sb[4r], sb[4r+1] = the scales of the even element at or before the slice's first group and
// of the next two, sb[4r+2], sb[4r+3] = the biases likewise. A thread copies word i % 4 of N rows of
// one matrix (rows i / 4 + j · threads / 4 of a block's W rows), so they share the source and bound:
// three registers fewer than a source and bound per row, which kept the 144-slot wgmma kernel from
// spilling inside its main loop.
template <int N>
struct GroupWords {
  // A row past the matrix: its first element lies past every array (first + q0 cannot overflow: a
  // row has fewer than 2^16 groups).
  static constexpr int kNoRow = 0x7fff0000;
  const uint16_t* src = nullptr;  // scales or biases, from the element of word i % 4's pair
  int first[N > 0 ? N : 1];       // each row's first group element, or kNoRow
  int end = 0;                    // copies from elements at or past this would leave the array

  __device__ __forceinline__ void init(const DeviceMatrix& m, const int64_t (&rows)[N > 0 ? N : 1], int i) {
    const int64_t groups = m.cols / m.group_size;
    src = (i & 2 ? m.biases : m.scales) + 2 * (i & 1);
#pragma unroll
    for (int j = 0; j < N; ++j) first[j] = rows[j] < m.rows ? static_cast<int>(rows[j] * groups) : kNoRow;
    end = static_cast<int>(m.rows * groups) - 2 * (i & 1);
  }
  // Row j's word for the slice whose first group is q0, to shared address `dst`.
  __device__ __forceinline__ void load(int j, uint32_t dst, int q0) const {
    const int e = (first[j] + q0) & ~1;
    const bool valid = e < end;
    cp_async4_shared(dst, wide_address<2>(src, valid ? static_cast<uint32_t>(e) : 0u), valid);
  }
};

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
__device__ __forceinline__ uint32_t bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// The scale and bias, each broadcast to both halves of a bf16 pair, of the group at half `idx` (0..2)
// of a row's four group words (scales in w.x, w.y, biases in w.z, w.w; see GroupWords).
__device__ __forceinline__ void group_pair_of(const uint4& w, int idx, uint32_t* s2, uint32_t* b2) {
  const uint32_t sel = 0x1010u + 0x2222u * static_cast<uint32_t>(idx);  // bytes 2idx, 2idx + 1, twice
  *s2 = prmt(w.x, w.y, sel);
  *b2 = prmt(w.z, w.w, sel);
}
// The same for the group holding a column of W row r, from the staged words `sb`: `parity` is that of
// the row's first group element, q0 the slice's first group and dq the column's group relative to it.
__device__ __forceinline__ void group_pair(const uint32_t* sb, int r, int parity, int q0, int dq,
                                           uint32_t* s2, uint32_t* b2) {
  group_pair_of(*reinterpret_cast<const uint4*>(sb + 4 * r), ((parity + q0) & 1) + dq, s2, b2);
}

// (a & b) | c in one instruction (written out: the compiler splits it in two when b and c are both
// constants).
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// The two codes of byte `byte` of w (low nibble first) as a dequantized bf16 pair, w_hi = w >> 4.
// A code c in the mantissa of 0x4300 (= 128) is the bf16 value 128 + c exactly; subtracting 128 is
// exact too, and one bf16 fma applies scale and bias (rounded once, as an f32 value rounded to bf16).
__device__ __forceinline__ uint32_t dequant4_pair(uint32_t w, uint32_t w_hi, int byte, uint32_t s2,
                                                  uint32_t b2) {
  constexpr uint32_t kOne = 0x3f803f80u, kMinus128 = 0xc300c300u;
  // byte of w -> bits 0..7, the same byte of w >> 4 -> bits 16..23; keep the low nibbles.
  const uint32_t x =
      and_or(prmt(w, w_hi, static_cast<uint32_t>(byte | ((byte + 4) << 8))), 0x000f000fu, 0x43004300u);
  return bf16x2_fma(bf16x2_fma(x, kOne, kMinus128), s2, b2);
}

// The 8-bit codes at bits sh..sh+15 of w (the lower one first) as a dequantized bf16 pair: code ·
// scale + bias in f32, rounded to bf16.
__device__ __forceinline__ uint32_t dequant8_pair(uint32_t w, int sh, float scale, float bias) {
  return pack_bf16x2(static_cast<float>((w >> sh) & 0xffu) * scale + bias,
                     static_cast<float>((w >> (sh + 8)) & 0xffu) * scale + bias);
}

// Row r of a block's 128 W rows, as (matrix, row); the row lies past the matrix when r has no
// weights. SwiGLU launches alternate 8-row runs of gate and up rows of the same 64 outputs, so wgmma's
// accumulator rows g and g + 8 of a thread are one output's gate and up (gemm_wgmma_cuda.cu).
// (By value: a reference choosing between the two members put the block in local memory.)
__device__ __forceinline__ DeviceMatrix tile_matrix(const GemmArgs& a, const GemmBlock& b, int r) {
  return a.act && (r & 8) ? b.up : b.m;
}
__device__ __forceinline__ int64_t tile_row(const GemmArgs& a, const GemmBlock& b, int r) {
  return b.r0 + (a.act ? (r >> 4) * 8 + (r & 7) : r);
}

// Stores (or adds) the output of slot row `slot`, block column c (f32, or bf16 into y16), skipping
// slots past s1 and columns past the matrix or the output.
__device__ __forceinline__ void store_out(const GemmArgs& a, const GemmBlock& b, int64_t slot, int c,
                                          float v) {
  if (slot >= b.s1 || b.r0 + c >= b.m.rows || b.n0 + c >= a.N) return;
  if (a.y16) {
    a.y16[slot * a.ldy + b.n0 + c] = f32_to_bf16(v);
    return;
  }
  float* y = a.y + slot * a.ldy + b.n0 + c;
  *y = a.accumulate ? *y + v : v;
}
// The same for block columns c, c + 1.
__device__ __forceinline__ void store_pair(const GemmArgs& a, const GemmBlock& b, int64_t slot, int c,
                                           float v0, float v1) {
  store_out(a, b, slot, c, v0);
  store_out(a, b, slot, c + 1, v1);
}

}  // namespace qwick::cuda
