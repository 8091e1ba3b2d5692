// Matrix products against weights in their file format: y = W·x for one or many activation rows.
//
// Contract: for t < n and r in [row_begin, row_end),
//     y[t * ldy + r] = Σ_c W[r, c] · x[t * ldx + c]          (f32 activations, f32 accumulation)
// W is dequantized inside the kernel a tile of rows at a time (never to a full-size buffer):
// the row tile is decoded to f32 in per-thread scratch, then multiplied with blocks of activation
// rows, so one decode serves every row of a prefill chunk.
//
// Variants: reference (plain C++, the ground truth), AVX2+FMA, AVX-512. Each is tested against the
// reference over a table of shapes, formats and odd sizes (tests/unit/matmul_test.cpp).
//
// This header is plain data and declarations: the SIMD translation units include it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/weight_matrix.h"

namespace qwick {

struct MatmulProblem {
  const WeightMatrix* w = nullptr;
  const float* x = nullptr;  // [n, ldx]
  size_t ldx = 0;
  size_t n = 0;
  float* y = nullptr;  // [n, ldy]
  size_t ldy = 0;
};

// Rows decoded per tile; thread tasks are multiples of this.
inline constexpr int64_t kMatmulTileRows = 16;

// Floats of 64-byte aligned scratch a kernel needs for a matrix with `cols` inputs: a decoded tile
// of f32 rows (or of bf16 rows plus one f32 row), each padded to 32 columns.
inline size_t matmul_scratch_floats(int64_t cols) {
  return static_cast<size_t>(kMatmulTileRows + 1) * static_cast<size_t>((cols + 31) / 32 * 32);
}

// Single-threaded kernels over a row range.
using MatmulRowsFn = void (*)(const MatmulProblem& p, int64_t row_begin, int64_t row_end, float* scratch);
void matmul_rows_reference(const MatmulProblem& p, int64_t row_begin, int64_t row_end, float* scratch);
void matmul_rows_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, float* scratch);
void matmul_rows_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end, float* scratch);

// Row r of W as f32 (reference decode; `out` holds cols floats). Used for embedding lookups.
void dequantize_row(const WeightMatrix& w, int64_t row, float* out);

}  // namespace qwick
