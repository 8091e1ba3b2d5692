// AVX-512 VNNI int8-activation matvec over MLX 4-bit rows (see matmul_q8.h for the layout).
// Two rows at a time share each activation load; per pair of 64-element blocks: one 64-byte weight
// load, nibble split, two vpdpbusd, one int->float convert and one FMA with the blocks' combined
// scales (weight scale x activation scale). Checked against matmul_q8_rows_reference.
#include <immintrin.h>

#include "kernels/matmul/matmul_q8.h"

namespace qwick {
namespace {

inline float bf16_at(const uint8_t* p) {
  const unsigned bits = static_cast<unsigned>(p[0]) << 16 | static_cast<unsigned>(p[1]) << 24;
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(bits))));
}

inline __m512 bf16x16(const uint8_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

// sd[b] = weight scale of block b's group * activation scale d[b], for one row's n_blocks blocks.
void block_scales(const uint8_t* scales, int group_size, const float* d, int64_t n_blocks, float* sd) {
  int64_t b = 0;
  if (group_size == 64)
    for (; b + 16 <= n_blocks; b += 16) _mm512_storeu_ps(sd + b, _mm512_mul_ps(bf16x16(scales + 2 * b), _mm512_loadu_ps(d + b)));
  const int64_t per = group_size / 64;
  for (; b < n_blocks; ++b) sd[b] = bf16_at(scales + 2 * (b / per)) * d[b];
}

// Σ_b bias(group of b) · xsum_b for one row.
float bias_term(const uint8_t* biases, int group_size, const float* xsum, int64_t n_blocks) {
  __m512 acc = _mm512_setzero_ps();
  int64_t b = 0;
  if (group_size == 64)
    for (; b + 16 <= n_blocks; b += 16) acc = _mm512_fmadd_ps(bf16x16(biases + 2 * b), _mm512_loadu_ps(xsum + b), acc);
  float s = _mm512_reduce_add_ps(acc);
  const int64_t per = group_size / 64;
  for (; b < n_blocks; ++b) s += bf16_at(biases + 2 * (b / per)) * xsum[b];
  return s;
}

// One pair of blocks: 64 packed bytes against 128 bytes of de-interleaved activation; lanes 0-7
// hold block 2p's partial sums, lanes 8-15 block 2p+1's, scaled by sd[0] and sd[1].
inline __m512 pair_fma(const uint8_t* w, const __m512i xe, const __m512i xo, const float* sd, __m512 acc) {
  const __m512i mask = _mm512_set1_epi8(0x0F);
  const __m512i v = _mm512_loadu_si512(w);
  const __m512i lo = _mm512_and_si512(v, mask);
  const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
  const __m512i dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xe), hi, xo);
  const __m512 scale = _mm512_mask_broadcastss_ps(_mm512_set1_ps(sd[0]), static_cast<__mmask16>(0xFF00), _mm_load_ss(sd + 1));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc);
}

// The lone last block (odd block count): 32 bytes against [even 32 | odd 32].
inline float single_block(const uint8_t* w, const int8_t* xq, float sd) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  const __m256i lo = _mm256_and_si256(v, mask), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
  const __m256i xe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  const __m256i xo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32));
  const __m256i dot = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, xe), hi, xo);
  const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(dot), _mm256_extracti128_si256(dot, 1));
  const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  return static_cast<float>(_mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xB1)))) * sd;
}

}  // namespace

void matmul_q8_rows_avx512(const WeightMatrix& w, const Q8Activation& x, float* y, int64_t row_begin,
                           int64_t row_end) {
  const int64_t n_blocks = w.cols / 64, n_pairs = n_blocks / 2, per = w.group_size / 64;
  constexpr int64_t kChunk = 64;  // blocks per pass, so the scale buffers stay on the stack at any width
  float sd0[kChunk], sd1[kChunk];
  for (int64_t r = row_begin; r < row_end; r += 2) {
    const bool two = r + 1 < row_end;
    const uint8_t* w0 = w.data + static_cast<size_t>(r) * w.row_stride;
    const uint8_t* w1 = two ? w0 + w.row_stride : w0;
    const uint8_t* s0 = w.scales + static_cast<size_t>(r) * w.group_stride;
    const uint8_t* s1 = two ? s0 + w.group_stride : s0;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    float tail0 = 0.0f, tail1 = 0.0f;
    for (int64_t c0 = 0; c0 < n_blocks; c0 += kChunk) {  // chunk starts are group-aligned
      const int64_t nb = n_blocks - c0 < kChunk ? n_blocks - c0 : kChunk;
      block_scales(s0 + 2 * (c0 / per), w.group_size, x.d + c0, nb, sd0);
      block_scales(s1 + 2 * (c0 / per), w.group_size, x.d + c0, nb, sd1);
      const int64_t p_end = (c0 + nb) / 2 < n_pairs ? (c0 + nb) / 2 : n_pairs;
      for (int64_t p = c0 / 2; p < p_end; ++p) {
        const __m512i xe = _mm512_load_si512(x.q + p * 128);
        const __m512i xo = _mm512_load_si512(x.q + p * 128 + 64);
        acc0 = pair_fma(w0 + p * 64, xe, xo, sd0 + (2 * p - c0), acc0);
        acc1 = pair_fma(w1 + p * 64, xe, xo, sd1 + (2 * p - c0), acc1);
      }
      if (n_blocks % 2 == 1 && c0 + nb == n_blocks) {
        const int64_t b = n_blocks - 1;
        tail0 = single_block(w0 + b * 32, x.q + b * 64, sd0[b - c0]);
        tail1 = single_block(w1 + b * 32, x.q + b * 64, sd1[b - c0]);
      }
    }
    const uint8_t* b0 = w.biases + static_cast<size_t>(r) * w.group_stride;
    y[r] = _mm512_reduce_add_ps(acc0) + tail0 + bias_term(b0, w.group_size, x.sum, n_blocks);
    if (two) y[r + 1] = _mm512_reduce_add_ps(acc1) + tail1 + bias_term(b0 + w.group_stride, w.group_size, x.sum, n_blocks);
  }
}

}  // namespace qwick
