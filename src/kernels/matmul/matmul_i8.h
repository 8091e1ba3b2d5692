// Matrix-vector product of MLX 4-bit weights with an int8-quantized activation (decode's hot path).
//
// The activation row x [K] is quantized once per product, per 64-element block b:
//   d_b = max|x| / 127,  xq_i = round(x_i / d_b)  (int8),  xsum_b = Σ x_i  (f32, exact part of the bias)
// so that, for weight row r with affine groups (scale s, bias b) covering block b,
//   y_r = Σ_b [ s · d_b · Σ_{i∈b} q_i·xq_i  +  b · xsum_b ]        (inner sum in exact integers)
// The integer dot products run as u8 × s8 → s32 (AVX-512 VNNI vpdpbusd; AVX2 maddubs+madd) directly on
// the packed nibbles: the low nibbles of a block's 32 bytes are its even elements and the high
// nibbles its odd ones, so the quantized activation is stored de-interleaved to match. (Separate
// scales for the even and odd halves were tried: slower, and no measurable gain on the fixtures.)
//
// Layout of the prepared activation, per pair of blocks (2p, 2p+1), 128 bytes:
//   [ even(2p) 32 | even(2p+1) 32 | odd(2p) 32 | odd(2p+1) 32 ]      even(b) = xq of elements 0,2,..,62
// and, when the block count is odd, the last block alone as [ even 32 | odd 32 ].
//
// Weights must be affine 4-bit with group_size a multiple of 64. Error against the f32 product is
// that of 8-bit activations (about 0.5 % of the block's largest |x|·|w| per element, random sign);
// tests/unit/matmul_i8_test.cpp checks the SIMD kernels against matmul_i8_rows_reference (same
// integers, so only f32 rounding differs) and the reference against the f32 matmul.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/weight_matrix.h"

namespace qwick {

struct I8Activation {
  const int8_t* q = nullptr;   // K bytes in the layout above
  const float* d = nullptr;    // [K / 64] block scales
  const float* sum = nullptr;  // [K / 64] block sums of x
  int64_t cols = 0;
};

// Bytes of q plus floats of d and sum a K-wide activation needs.
inline size_t i8_activation_floats(int64_t cols) {
  return static_cast<size_t>(cols / 4 + 2 * (cols / 64) + 16);
}
// Offset in q of block b's even (odd = false) or odd half, in the layout above.
inline size_t i8_half_offset(int64_t b, int64_t n_blocks, bool odd) {
  if (b % 2 == 1 || b + 1 < n_blocks) {  // part of a pair
    const size_t pair = static_cast<size_t>(b / 2) * 128;
    return pair + (odd ? 64 : 0) + (b % 2 == 1 ? 32 : 0);
  }
  return static_cast<size_t>(b) * 64 + (odd ? 32 : 0);  // the lone last block
}
// Quantizes x [cols] (cols a multiple of 64) into `storage` (i8_activation_floats floats, 64-byte
// aligned) and returns the view. The AVX-512 version gives the same q and d; its block sums add in
// another order (f32 rounding apart, equal).
using I8QuantizeFn = I8Activation (*)(const float* x, int64_t cols, float* storage);
I8Activation quantize_activation_i8(const float* x, int64_t cols, float* storage);
I8Activation quantize_activation_i8_avx512(const float* x, int64_t cols, float* storage);

// y[r] = W[r]·x for r in [row_begin, row_end). Requires w.format == kAffine4, group_size % 64 == 0.
using I8RowsFn = void (*)(const WeightMatrix& w, const I8Activation& x, float* y, int64_t row_begin,
                          int64_t row_end);
void matmul_i8_rows_reference(const WeightMatrix& w, const I8Activation& x, float* y, int64_t row_begin,
                              int64_t row_end);
void matmul_i8_rows_avx2(const WeightMatrix& w, const I8Activation& x, float* y, int64_t row_begin,
                         int64_t row_end);
void matmul_i8_rows_avx512(const WeightMatrix& w, const I8Activation& x, float* y, int64_t row_begin,
                           int64_t row_end);

inline bool i8_supported(const WeightMatrix& w) {
  return w.format == WeightFormat::kAffine4 && w.group_size % 64 == 0;
}

}  // namespace qwick
