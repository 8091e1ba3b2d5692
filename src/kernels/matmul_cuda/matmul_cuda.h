// Matrix products on the GPU against weights in their file format (see model/weight_matrix.h).
//
//   gemv  decode: y = W·x for one f32 activation row, f32 accumulation. The block stages x in shared
//         memory (fusing the op that produced it: RMSNorm, gated RMSNorm); a group of lanes owns four
//         weight rows (two or one for matrices too short to fill the GPU) and streams them with
//         16-byte loads (32 weights of 4-bit, 16 of 8-bit, 8 of bf16 per lane), dequantizing in
//         registers (gemv_core.cuh).
//   gemm  prefill: Y = X·Wᵀ for many bf16 activation rows on the tensor cores (bf16 in, f32
//         accumulate); the full-precision W never exists. Two kernels, chosen by shape:
//           wgmma (gemm_wgmma_cuda.cu): 128 outputs × 64/128/144/256 slots per block on warpgroup
//             products, X and the raw W codes streamed through a cp.async pipeline, W the register
//             operand, dequantized by each thread straight into its fragment (bf16 weights with
//             enough rows: gemm_tma, the same tiles with TMA copies and both operands in shared
//             memory); every GEMM whose parts are a multiple of 128 rows
//           simple (gemm_cuda.cu): 64 × 64 tiles, load-barrier-compute, W dequantized into shared
//             memory; the others (expert widths not a multiple of 128)
//
// Both take a table of matrices so one launch serves many problems: the routed experts of a decode
// step (gemv, `index` names each problem's matrix) or the expert groups of a prefill chunk (gemm,
// a device-built tile list names each tile's group and rows). Tests: tests/cuda/gemv_cuda_test.cpp and
// compares both against matmul_rows_reference over formats, real and odd shapes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "model/weight_matrix.h"

namespace qwick::cuda {

// A WeightMatrix whose bytes live on the GPU, rows packed back to back. Dense matrices are bf16
// (f32/f16 files are converted at upload); affine ones keep their 4/8-bit codes and bf16 scales.
struct DeviceMatrix {
  WeightFormat format = WeightFormat::kBF16;
  int group_size = 0;
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;  // [rows, row_bytes]
  int64_t row_bytes = 0;
  const uint16_t* scales = nullptr;  // [rows, cols / group_size] bf16
  const uint16_t* biases = nullptr;
};

inline constexpr int kGemvMaxStack = 8;
// The gated norm's heads: a lane holds four values of each (gemv_core.cuh's stage_gated_norm).
inline constexpr int kGemvGatedNormMaxHead = 128;
inline bool gemv_gated_norm_fits(int64_t head_dim) {
  return head_dim > 0 && head_dim <= kGemvGatedNormMaxHead && head_dim % 4 == 0;
}

struct GemvArgs {
  DeviceMatrix single;                  // the matrix when `table` is null
  const DeviceMatrix* table = nullptr;  // device array
  const int32_t* index = nullptr;       // device [problems]: table entry of problem p; null: entry p
  int problems = 1;
  WeightFormat format = WeightFormat::kBF16;  // of every matrix involved
  int64_t max_rows = 0, max_cols = 0;         // over every matrix involved (grid)
  // A stack (table without index, at most kGemvMaxStack problems): each problem's rows, so the grid
  // covers exactly their rows; left 0, every problem gets max_rows' worth of blocks.
  int64_t stack_rows[kGemvMaxStack] = {};
  const float* x = nullptr;  // problem p reads x + p * x_stride (x_stride 0: one shared x)
  int64_t x_stride = 0;
  float* y = nullptr;  // problem p writes y + p * y_stride
  int64_t y_stride = 0;
  bool accumulate = false;  // y += W·x instead of y = W·x
  // The input, transformed as it is read (see gemv_core.cuh); by default x as stored:
  //   norm_weight               RMSNorm: W·(x · rsqrt(mean(x²) + eps) · norm_weight)
  //   norm_weight and gate_z    gated RMSNorm per head of head_dim values (z read like x)
  const float* norm_weight = nullptr;
  const float* gate_z = nullptr;
  int head_dim = 0;  // gemv_gated_norm_fits; x, gate_z and norm_weight 16-byte aligned
  float eps = 0.0f;
  // int16 activations (gemv_core.cuh's stage_i16_quad, dp2a dots) where the weights are 4-bit (and a
  // gated norm's heads a multiple of 32 values); elsewhere it has no effect. Off: f32 (--exact).
  bool i16 = false;
  bool overlap = false;  // may start before the previous kernel ends (launch_kernel in cuda_launch.h)
  // With overlap: let the next kernel launch only once every block has waited for the kernel before
  // (not at its start), so the kernels launched after this one may read what that kernel wrote without
  // waiting (the decode attention's combine reads the layer's input for the output gate).
  bool trigger_after_wait = false;
  // A single 4-bit matrix of many rows (the lm_head) through gemv_stream where gemv_stream_fits.
  bool stream = false;
};
void gemv(const GemvArgs& args, cudaStream_t stream);
// y = W·x for a single 4-bit matrix of at least 32K rows, its tiles copied into shared memory by the
// copy engine ahead of use (gemv_stream_cuda.cu): f32 or RMSNorm input, stored or accumulated; inputs
// of 1024 or 2048 values in groups a multiple of 8 a row, rows contiguous, 16-byte aligned (it
// lets the next kernel start at once: not with trigger_after_wait).
bool gemv_stream_fits(const GemvArgs& args);
void gemv_stream(const GemvArgs& args, cudaStream_t stream);

// A tile of the grouped GEMM: rows (slots) [begin, end) of group `group`, at most GemmArgs::tile_rows:
// kGemmTileRows for both kernels, 128 or 144 for the wgmma one.
struct GemmTile {
  int32_t group, begin, end;
};
inline constexpr int kGemmTileRows = 64;

struct GemmArgs {
  DeviceMatrix single;                  // the matrix when `table` is null
  const DeviceMatrix* table = nullptr;  // entry = group * table_stride + table_base + part
  int table_stride = 1, table_base = 0;
  // Output columns [p * part_rows, (p+1) * part_rows) come from part p (a multiple of 64); 0: one part.
  int64_t part_rows = 0;
  WeightFormat format = WeightFormat::kBF16;
  int64_t K = 0;                // inputs (columns of every matrix); a multiple of 64
  int64_t N = 0;                // output columns
  const uint16_t* x = nullptr;  // bf16 [*, ldx]; slot s reads row x_rows[s] (x_rows null: row s)
  int64_t ldx = 0;
  const int32_t* x_rows = nullptr;
  float* y = nullptr;  // f32 [slots, ldy]
  int64_t ldy = 0;
  bool accumulate = false;
  // bf16 output rows [slots, ldy] instead of y (every kernel; not with accumulate): the routed experts'
  // down projection, which the combine reads back, then moves half the bytes.
  uint16_t* y16 = nullptr;
  // SwiGLU in the epilogue instead of y (the wgmma kernel only): parts 0 and 1 of the table are gate
  // and up, N = 2 · part_rows with part_rows a multiple of 64, and act[s][i] = bf16(silu(gate_i · x_s) ·
  // (up_i · x_s)): the gate|up outputs never leave the registers.
  uint16_t* act = nullptr;
  int64_t ld_act = 0;
  int64_t n = 0;                        // slots, when `tiles` is null (one group, plain GEMM)
  const GemmTile* tiles = nullptr;      // device tile list, `*tile_count` valid entries
  const int32_t* tile_count = nullptr;  // device
  int64_t max_tiles = 0;                // grid bound for the tile list
  // Plain GEMMs: 0 picks the tile's slots by shape, 64, 128 or (the wgmma kernel) 144 or 256 forces them.
  // Tile lists: the most slots a tile holds, kGemmTileRows, or (the wgmma kernel) 128 or 144: an
  // expert's rows at a 4096-row chunk, 128 on average, then mostly fit one tile.
  int tile_rows = 0;
  bool overlap = false;  // may start before the previous kernel ends (launch_kernel in cuda_launch.h)
};
void gemm(const GemmArgs& args, cudaStream_t stream);
// The arguments of a plain GEMM with one matrix: y[s] = m · x[s] for n slots, x bf16 rows of ldx, y f32
// rows of ldy (the default kernel and tiling).
inline GemmArgs gemm_args(const DeviceMatrix& m, const uint16_t* x, int64_t ldx, int64_t n, float* y,
                          int64_t ldy) {
  GemmArgs a;
  a.single = m;
  a.format = m.format;
  a.K = m.cols;
  a.N = m.rows;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.n = n;
  return a;
}
// Each kernel alone: gemm() runs the wgmma one when part_rows % 128 == 0 and for every SwiGLU
// launch, the simple one otherwise.
void gemm_wgmma(const GemmArgs& args, cudaStream_t stream);
void gemm_simple(const GemmArgs& args, cudaStream_t stream);
// The bf16 GEMM on TMA copies with both operands of the products in shared memory (gemm_tma_cuda.cu):
// a plain GEMM of one bf16 matrix (no table, tile list, x_rows or parts). With `act`, the matrix is a
// SwiGLU pair stacked in 8-row runs (decode_bf16 with `part`), N its rows, a multiple of 128. gemm_wgmma
// hands it such GEMMs (tile_rows 0) when gemm_tma_fills: their 256-slot tiles make about a wave of
// blocks or more (at least 7/8 of the SMs).
void gemm_tma(const GemmArgs& args, cudaStream_t stream);
bool gemm_tma_fills(int64_t N, int64_t n);

// m's values as bf16 rows [m.rows, m.cols] into `out` (16-byte aligned), decoded as the wgmma GEMM
// decodes them (decode_bf16_cuda.cu): a GEMM over the copy sums the same products as one over m.
// The prefill's bf16 copies of the dense matrices. `part` 0 or 1: m is the gate or the up matrix of a
// SwiGLU pair, written to their stacked copy (2 · m.rows rows at out) in 8-row runs of gate and up rows,
// the order gemm_tma's SwiGLU epilogue reads.
void decode_bf16(const DeviceMatrix& m, uint16_t* out, cudaStream_t stream, int part = -1);

}  // namespace qwick::cuda
