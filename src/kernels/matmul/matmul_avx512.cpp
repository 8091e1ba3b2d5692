// AVX-512 matmul: decode a 16-row weight tile to f32 (zero-padded to a multiple of 16 columns), then
// a 4-row x 4-token register-blocked FMA kernel over it. Checked against matmul_rows_reference.
//
// Included headers are restricted to intrinsics and plain structs (cmake/simd.cmake).
#include <immintrin.h>

#include "kernels/matmul/matmul.h"

namespace qwick {
namespace {

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

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

inline __m512 q8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

inline __m512 bf16x16(const uint8_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline __m512 f16x16(const uint8_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }

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
          const __m512 q = four ? q4x16(row + j / 2) : q8x16(row + j);
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

// acc[i][t] over 4 decoded rows (stride kp) and T activation rows; writes y for rows < nr.
template <int T>
void tile_kernel(const float* tile, int64_t kp, int64_t K, const float* x, size_t ldx, float* y, size_t ldy,
                 int nr) {
  __m512 acc[4][T];
  for (int i = 0; i < 4; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm512_setzero_ps();
  const int64_t kfull = K / 16 * 16;
  for (int64_t k = 0; k < kfull; k += 16) {
    __m512 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm512_loadu_ps(x + static_cast<size_t>(t) * ldx + k);
    for (int i = 0; i < 4; ++i) {
      const __m512 wv = _mm512_load_ps(tile + i * kp + k);
      for (int t = 0; t < T; ++t) acc[i][t] = _mm512_fmadd_ps(wv, xv[t], acc[i][t]);
    }
  }
  if (kfull < K) {
    const __mmask16 m = tail_mask(K - kfull);
    __m512 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x + static_cast<size_t>(t) * ldx + kfull);
    for (int i = 0; i < 4; ++i) {
      const __m512 wv = _mm512_load_ps(tile + i * kp + kfull);
      for (int t = 0; t < T; ++t) acc[i][t] = _mm512_fmadd_ps(wv, xv[t], acc[i][t]);
    }
  }
  for (int i = 0; i < nr; ++i)
    for (int t = 0; t < T; ++t) y[static_cast<size_t>(t) * ldy + static_cast<size_t>(i)] = _mm512_reduce_add_ps(acc[i][t]);
}

}  // namespace

void matmul_rows_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end, float* scratch) {
  const WeightMatrix& w = *p.w;
  const int64_t K = w.cols;
  const int64_t kp = (K + 15) / 16 * 16;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kMatmulTileRows) {
    const int64_t nrows = min64(kMatmulTileRows, row_end - r0);
    for (int64_t i = 0; i < nrows; ++i) decode_row(w, r0 + i, scratch + i * kp);
    size_t t = 0;
    for (; t + 4 <= p.n; t += 4) {
      const float* x = p.x + t * p.ldx;
      for (int64_t i = 0; i < nrows; i += 4)
        tile_kernel<4>(scratch + i * kp, kp, K, x, p.ldx, p.y + t * p.ldy + static_cast<size_t>(r0 + i), p.ldy,
                       static_cast<int>(min64(4, nrows - i)));
    }
    for (; t < p.n; ++t) {
      const float* x = p.x + t * p.ldx;
      for (int64_t i = 0; i < nrows; i += 4)
        tile_kernel<1>(scratch + i * kp, kp, K, x, p.ldx, p.y + t * p.ldy + static_cast<size_t>(r0 + i), p.ldy,
                       static_cast<int>(min64(4, nrows - i)));
    }
  }
}

}  // namespace qwick
