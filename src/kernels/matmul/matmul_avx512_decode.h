// Weight-row decoding shared by the AVX-512 matmul kernels (matmul_avx512.cpp, matmul_bf16_avx512.cpp).
// Internal to those translation units: the functions have internal linkage, and the header may only be
// included where AVX-512 code generation is enabled (cmake/simd.cmake).
#pragma once

#include <immintrin.h>

#include "kernels/matmul/matmul.h"

namespace qwick {
namespace {

inline float bf16_scalar(const uint8_t* p) {
  const unsigned bits = static_cast<unsigned>(p[0]) << 16 | static_cast<unsigned>(p[1]) << 24;
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(bits))));
}

// 16 consecutive 4-bit values (8 bytes, low nibble first) as f32, in element order.
inline __m512 q4x16(const uint8_t* p) {
  const __m128i words = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i lo = _mm_and_si128(words, _mm_set1_epi16(0x0F));
  const __m128i hi = _mm_slli_epi16(_mm_and_si128(words, _mm_set1_epi16(0xF0)), 4);
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_or_si128(lo, hi)));
}

inline __m512 u8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

inline __m512 bf16x16(const uint8_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline __m512 f16x16(const uint8_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

inline __mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << remaining) - 1);
}

// Row r of w as f32 into out[0, round_up(cols, 16)), zero beyond cols.
void decode_row(const WeightMatrix& w, int64_t r, float* out) {
  const uint8_t* row = w.data + static_cast<size_t>(r) * w.row_stride;
  const int64_t K = w.cols;
  switch (w.format) {
    case WeightFormat::kAffine4:
    case WeightFormat::kAffine8: {
      const uint8_t* sp = w.scales + static_cast<size_t>(r) * w.group_stride;
      const uint8_t* bp = w.biases + static_cast<size_t>(r) * w.group_stride;
      const int64_t gs = w.group_size;
      const bool four = w.format == WeightFormat::kAffine4;
      for (int64_t g = 0; g < K / gs; ++g) {
        const __m512 s = _mm512_set1_ps(bf16_scalar(sp + 2 * g));
        const __m512 b = _mm512_set1_ps(bf16_scalar(bp + 2 * g));
        for (int64_t j = g * gs; j < (g + 1) * gs; j += 16) {
          const __m512 q = four ? q4x16(row + j / 2) : u8x16(row + j);
          _mm512_store_ps(out + j, _mm512_fmadd_ps(q, s, b));
        }
      }
      return;  // affine cols are a multiple of the group size (>= 32), so no padding is needed
    }
    case WeightFormat::kBF16:
      for (int64_t c = 0; c < K; c += 16) _mm512_store_ps(out + c, bf16x16(row + 2 * c, tail_mask(K - c)));
      return;
    case WeightFormat::kF16:
      for (int64_t c = 0; c < K; c += 16) _mm512_store_ps(out + c, f16x16(row + 2 * c, tail_mask(K - c)));
      return;
    case WeightFormat::kF32:
      for (int64_t c = 0; c < K; c += 16)
        _mm512_store_ps(out + c, _mm512_maskz_loadu_ps(tail_mask(K - c), row + 4 * c));
      return;
  }
}

}  // namespace
}  // namespace qwick
