// AVX2 + FMA matmul: the same tiling as matmul_avx512.cpp with 8-wide vectors and a 4-row x 2-token
// register block (16 ymm registers). Checked against matmul_rows_reference.
//
// Included headers are restricted to intrinsics and plain structs (cmake/simd.cmake).
#include <immintrin.h>

#include "kernels/matmul/matmul.h"
#include "kernels/matmul/prefetch_rows.h"

namespace qwick {
namespace {

inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

inline float bf16_scalar(const uint8_t* p) {
  const unsigned bits = static_cast<unsigned>(p[0]) << 16 | static_cast<unsigned>(p[1]) << 24;
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(bits))));
}

inline float f16_scalar(const uint8_t* p) {
  const int bits = static_cast<int>(p[0]) | static_cast<int>(p[1]) << 8;
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)));
}

// 8 consecutive 4-bit values (4 bytes, low nibble first) as f32, in element order.
inline __m256 q4x8(const uint8_t* p) {
  const __m128i words = _mm_cvtepu8_epi16(_mm_loadu_si32(p));
  const __m128i lo = _mm_and_si128(words, _mm_set1_epi16(0x0F));
  const __m128i hi = _mm_slli_epi16(_mm_and_si128(words, _mm_set1_epi16(0xF0)), 4);
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_or_si128(lo, hi)));
}

inline __m256 u8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

inline __m256 bf16x8(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Lanes [0, n) set, for n in [0, 8].
inline __m256i lane_mask(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Row r of w as f32 into out[0, round_up(cols, 16)), zero beyond cols.
void decode_row(const WeightMatrix& w, int64_t r, float* out, int64_t kp) {
  const uint8_t* row = w.data + static_cast<size_t>(r) * w.row_stride;
  const int64_t K = w.cols;
  int64_t c = 0;
  switch (w.format) {
    case WeightFormat::kAffine4:
    case WeightFormat::kAffine8: {
      const uint8_t* sp = w.scales + static_cast<size_t>(r) * w.group_stride;
      const uint8_t* bp = w.biases + static_cast<size_t>(r) * w.group_stride;
      const int64_t gs = w.group_size;
      const bool four = w.format == WeightFormat::kAffine4;
      for (int64_t g = 0; g < K / gs; ++g) {
        const __m256 s = _mm256_set1_ps(bf16_scalar(sp + 2 * g));
        const __m256 b = _mm256_set1_ps(bf16_scalar(bp + 2 * g));
        for (int64_t j = g * gs; j < (g + 1) * gs; j += 8) {
          const __m256 q = four ? q4x8(row + j / 2) : u8x8(row + j);
          _mm256_store_ps(out + j, _mm256_fmadd_ps(q, s, b));
        }
      }
      c = K;
      break;
    }
    case WeightFormat::kBF16:
      for (; c + 8 <= K; c += 8) _mm256_store_ps(out + c, bf16x8(row + 2 * c));
      for (; c < K; ++c) out[c] = bf16_scalar(row + 2 * c);
      break;
    case WeightFormat::kF16:
      for (; c + 8 <= K; c += 8)
        _mm256_store_ps(out + c,
                        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c))));
      for (; c < K; ++c) out[c] = f16_scalar(row + 2 * c);
      break;
    case WeightFormat::kF32:
      for (; c + 8 <= K; c += 8)
        _mm256_store_ps(out + c, _mm256_loadu_ps(reinterpret_cast<const float*>(row + 4 * c)));
      for (; c < K; ++c) out[c] = _mm_cvtss_f32(_mm_load_ss(reinterpret_cast<const float*>(row + 4 * c)));
      break;
  }
  for (; c < kp; ++c) out[c] = 0.0f;
}

template <int T>
void tile_kernel(const float* tile, int64_t kp, int64_t K, const float* x, size_t ldx, float* y, size_t ldy,
                 int nr) {
  __m256 acc[4][T];
  for (int i = 0; i < 4; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm256_setzero_ps();
  const int64_t kfull = K / 8 * 8;
  for (int64_t k = 0; k < kfull; k += 8) {
    __m256 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(x + static_cast<size_t>(t) * ldx + k);
    for (int i = 0; i < 4; ++i) {
      const __m256 wv = _mm256_load_ps(tile + i * kp + k);
      for (int t = 0; t < T; ++t) acc[i][t] = _mm256_fmadd_ps(wv, xv[t], acc[i][t]);
    }
  }
  if (kfull < K) {
    const __m256i m = lane_mask(K - kfull);
    __m256 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm256_maskload_ps(x + static_cast<size_t>(t) * ldx + kfull, m);
    for (int i = 0; i < 4; ++i) {
      const __m256 wv = _mm256_load_ps(tile + i * kp + kfull);
      for (int t = 0; t < T; ++t) acc[i][t] = _mm256_fmadd_ps(wv, xv[t], acc[i][t]);
    }
  }
  for (int i = 0; i < nr; ++i)
    for (int t = 0; t < T; ++t) y[static_cast<size_t>(t) * ldy + static_cast<size_t>(i)] = hsum(acc[i][t]);
}

}  // namespace

void matmul_rows_avx2(const MatmulProblem& p, int64_t row_begin, int64_t row_end, float* scratch) {
  const WeightMatrix& w = *p.w;
  const int64_t K = w.cols;
  const int64_t kp = (K + 15) / 16 * 16;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kMatmulTileRows) {
    const int64_t nrows = min64(kMatmulTileRows, row_end - r0);
    if (r0 + nrows < row_end) prefetch_rows(w, r0 + nrows, min64(kMatmulTileRows, row_end - r0 - nrows));
    for (int64_t i = 0; i < nrows; ++i) decode_row(w, r0 + i, scratch + i * kp, kp);
    size_t t = 0;
    for (; t + 2 <= p.n; t += 2) {
      const float* x = p.x + t * p.ldx;
      for (int64_t i = 0; i < nrows; i += 4)
        tile_kernel<2>(scratch + i * kp, kp, K, x, p.ldx, p.y + t * p.ldy + static_cast<size_t>(r0 + i),
                       p.ldy, static_cast<int>(min64(4, nrows - i)));
    }
    for (; t < p.n; ++t) {
      const float* x = p.x + t * p.ldx;
      for (int64_t i = 0; i < nrows; i += 4)
        tile_kernel<1>(scratch + i * kp, kp, K, x, p.ldx, p.y + t * p.ldy + static_cast<size_t>(r0 + i),
                       p.ldy, static_cast<int>(min64(4, nrows - i)));
    }
  }
}

}  // namespace qwick
