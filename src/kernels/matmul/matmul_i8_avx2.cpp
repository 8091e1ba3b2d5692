// AVX2 two-part int8-activation matvec over MLX 4-bit rows (see matmul_i8.h): per 64-element block,
// nibble split; per part two u8 x s8 maddubs into s16 (at most 2·15·127·2 = 7620 after the add, no
// overflow) and a madd to s32; the hi sums shifted by 7 plus the lo sums, converted, and one FMA with
// the block's combined scale. Two rows at a time. Checked against matmul_i8_rows_reference.
#include <immintrin.h>

#include "kernels/matmul/matmul_i8.h"
#include "kernels/matmul/prefetch_rows.h"

namespace qwick {
namespace {

inline float bf16_at(const uint8_t* p) {
  const unsigned bits = static_cast<unsigned>(p[0]) << 16 | static_cast<unsigned>(p[1]) << 24;
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(bits))));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Where block b's even half starts in the prepared activation (odd half: +64 in a pair, +32 alone).
inline int64_t even_offset(int64_t b, int64_t n_blocks) {
  if (b % 2 == 1) return (b / 2) * 128 + 32;
  return b + 1 < n_blocks ? (b / 2) * 128 : b * 64;
}

// One part's integer dot of a block as eight s32 partial sums.
inline __m256i part_dot(__m256i even, __m256i odd, const int8_t* xe, const int8_t* xo) {
  const __m256i s16 =
      _mm256_add_epi16(_mm256_maddubs_epi16(even, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xe))),
                       _mm256_maddubs_epi16(odd, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xo))));
  return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
}

// One block's integer dot (the lo part `lo_offset` bytes after the hi part), FMA'd with its combined
// scale.
inline __m256 block_fma(const uint8_t* w, const int8_t* xe, const int8_t* xo, int64_t lo_offset, float scale,
                        __m256 acc) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  const __m256i even = _mm256_and_si256(v, mask), odd = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
  const __m256i dot = _mm256_add_epi32(_mm256_slli_epi32(part_dot(even, odd, xe, xo), 7),
                                       part_dot(even, odd, xe + lo_offset, xo + lo_offset));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(scale), acc);
}

}  // namespace

void matmul_i8_rows_avx2(const WeightMatrix& w, const I8Activation& x, float* y, int64_t row_begin,
                         int64_t row_end) {
  const int64_t n_blocks = w.cols / 64, per = w.group_size / 64;
  for (int64_t r = row_begin; r < row_end; r += 2) {
    const bool two = r + 1 < row_end;
    if (r + 4 <= row_end) prefetch_rows(w, r + 2, 2);
    const uint8_t* w0 = w.data + static_cast<size_t>(r) * w.row_stride;
    const uint8_t* w1 = two ? w0 + w.row_stride : w0;
    const uint8_t* s0 = w.scales + static_cast<size_t>(r) * w.group_stride;
    const uint8_t* s1 = two ? s0 + w.group_stride : s0;
    const uint8_t* b0 = w.biases + static_cast<size_t>(r) * w.group_stride;
    const uint8_t* b1 = two ? b0 + w.group_stride : b0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float bias0 = 0.0f, bias1 = 0.0f;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const int64_t e = even_offset(b, n_blocks);
      const int8_t* xe = x.q + e;
      const int8_t* xo = x.q + e + (b % 2 == 1 || b + 1 < n_blocks ? 64 : 32);
      const int64_t g = b / per;
      acc0 = block_fma(w0 + b * 32, xe, xo, x.cols, bf16_at(s0 + 2 * g) * x.d[b], acc0);
      acc1 = block_fma(w1 + b * 32, xe, xo, x.cols, bf16_at(s1 + 2 * g) * x.d[b], acc1);
      bias0 += bf16_at(b0 + 2 * g) * x.sum[b];
      bias1 += bf16_at(b1 + 2 * g) * x.sum[b];
    }
    y[r] = hsum(acc0) + bias0;
    if (two) y[r + 1] = hsum(acc1) + bias1;
  }
}

}  // namespace qwick
