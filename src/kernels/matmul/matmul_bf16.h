// Matrix products with bf16 operands and f32 accumulation, for prefill (several activation rows).
//
// The activation rows are rounded to bf16 once per product; each 16-row weight tile is decoded from
// its file format to f32 and rounded to bf16, then multiplied with vdpbf16ps (AVX-512 BF16), which
// does twice the multiply-adds of an f32 FMA per instruction. Error against the f32 product: both
// operands rounded to bf16 (8 significant bits, unit roundoff 2⁻⁸), at most about 2·2⁻⁸ relative
// per product term.
//
// Layout of prepared activations: n rows of round_up(cols, 32) bf16 values, zero-padded.
// Checked by tests/unit/matmul_test.cpp: AVX-512 against matmul_rows_bf16_reference (same operands,
// f32 rounding may differ), and the reference against the f32 matmul within the rounding bound.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/matmul/matmul.h"

namespace qwick {

inline int64_t bf16_row_stride(int64_t cols) {
  return (cols + 31) / 32 * 32;
}

// x [n, ldx] f32 -> out [n, bf16_row_stride(cols)] bf16 (round to nearest even).
void convert_rows_bf16_reference(const float* x, size_t ldx, size_t n, int64_t cols, uint16_t* out);
void convert_rows_bf16_avx512(const float* x, size_t ldx, size_t n, int64_t cols, uint16_t* out);

// y[t, r] for t < p.n, r in [row_begin, row_end), reading the prepared rows `xb` (p.x is ignored).
void matmul_rows_bf16_reference(const MatmulProblem& p, const uint16_t* xb, int64_t row_begin,
                                int64_t row_end, float* scratch);
void matmul_rows_bf16_avx512(const MatmulProblem& p, const uint16_t* xb, int64_t row_begin, int64_t row_end,
                             float* scratch);

}  // namespace qwick
