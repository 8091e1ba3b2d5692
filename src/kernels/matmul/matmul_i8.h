// Matrix-vector product of MLX 4-bit weights with an activation quantized to two int8 parts
// (decode's hot path).
//
// The activation row x [K] is quantized once per product, per 64-element block b, to 15 bits split
// into a high and a low int8 part:
//   f_i = x_i · 127 / max|x|,  hi_i = round(f_i),  lo_i = round(128 · (f_i − hi_i))  (|lo_i| <= 64)
//   x_i ≈ d_b · (128·hi_i + lo_i),  d_b = max|x| / (127·128),  xsum_b = Σ x_i  (f32)
// so that, for weight row r with affine groups (scale s, bias b) covering block b,
//   y_r = Σ_b [ s · d_b · (128·Σ q_i·hi_i + Σ q_i·lo_i)  +  b · xsum_b ]      (inner sums exact)
// Each element is within d_b / 2 = max|x| / 32512 of x_i, finer than bf16's 2⁻⁹ relative for all
// but the smallest elements of a block. One int8 part alone (per 64 values, as llama.cpp's q8) was
// the dominant error of the fast decode on the reference fixtures: rounding to 1/254 of the block's
// largest value moved the 4-bit checkpoints' logits by 6e-2 to 1.1e-1 relative, against about 2e-2
// for the bf16 prefill (docs/cpu.md). The integer dot products run as u8 × s8 → s32 (AVX-512 VNNI
// vpdpbusd; AVX2 maddubs+madd) directly on the packed nibbles, twice per weight load (hi, then lo
// into the shifted sum); the low nibbles of a block's 32 bytes are its even elements and the high
// nibbles its odd ones, so each part is stored de-interleaved to match. (Separate scales for the
// even and odd halves were tried: slower, and no measurable gain on the fixtures.)
//
// Layout of each prepared part (hi at q, lo at q + K), per pair of blocks (2p, 2p+1), 128 bytes:
//   [ even(2p) 32 | even(2p+1) 32 | odd(2p) 32 | odd(2p+1) 32 ]      even(b) = elements 0,2,..,62
// and, when the block count is odd, the last block alone as [ even 32 | odd 32 ].
//
// Weights must be affine 4-bit with group_size a multiple of 64. The combined integer sum is at most
// 64·15·16320 < 2²⁴, exact in f32. tests/unit/matmul_i8_test.cpp checks the SIMD kernels against
// matmul_i8_rows_reference (same integers, so only f32 rounding differs) and the reference against
// the f32 matmul within the rounding bound.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/weight_matrix.h"

namespace qwick {

struct I8Activation {
  const int8_t* q = nullptr;   // 2K bytes: the hi part, then the lo part, each in the layout above
  const float* d = nullptr;    // [K / 64] block units d_b
  const float* sum = nullptr;  // [K / 64] block sums of x
  int64_t cols = 0;
};

// Floats of storage for q's 2K bytes plus d and sum, for a K-wide activation.
inline size_t i8_activation_floats(int64_t cols) {
  return static_cast<size_t>(cols / 2 + 2 * (cols / 64) + 16);
}
// Offset within one part of block b's even (odd = false) or odd half, in the layout above.
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
