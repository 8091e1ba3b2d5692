// AVX-512 VNNI two-part int8-activation matvec over MLX 4-bit rows (see matmul_i8.h for the
// layout). Four rows at a time share each activation load; per pair of 64-element blocks: one 64-byte
// weight load, nibble split, two vpdpbusd for the hi part, a shift by 7, two more for the lo part into
// the same sums, one int->float convert and one FMA with the blocks' combined scales (weight scale x
// activation unit). Checked against matmul_i8_rows_reference; the quantizer at the end against
// quantize_activation_i8.
#include <immintrin.h>

#include "kernels/matmul/matmul_i8.h"
#include "kernels/matmul/prefetch_rows.h"

namespace qwick {
namespace {

inline float bf16_at(const uint8_t* p) {
  const unsigned bits = static_cast<unsigned>(p[0]) << 16 | static_cast<unsigned>(p[1]) << 24;
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(bits))));
}

// Up to 16 bf16 values (lanes beyond `m` zero) as f32.
inline __m512 bf16x16(const uint8_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

inline __mmask16 first(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// sd[b] = weight scale of block b's group * activation scale d[b], for one row's n_blocks blocks.
void block_scales(const uint8_t* scales, int group_size, const float* d, int64_t n_blocks, float* sd) {
  if (group_size == 64) {
    for (int64_t b = 0; b < n_blocks; b += 16) {
      const __mmask16 m = first(n_blocks - b);
      _mm512_mask_storeu_ps(sd + b, m,
                            _mm512_mul_ps(bf16x16(scales + 2 * b, m), _mm512_maskz_loadu_ps(m, d + b)));
    }
    return;
  }
  const int64_t per = group_size / 64;
  for (int64_t b = 0; b < n_blocks; ++b) sd[b] = bf16_at(scales + 2 * (b / per)) * d[b];
}

// Σ_b bias(group of b) · xsum_b for one row.
float bias_term(const uint8_t* biases, int group_size, const float* xsum, int64_t n_blocks) {
  if (group_size == 64) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < n_blocks; b += 16) {
      const __mmask16 m = first(n_blocks - b);
      acc = _mm512_fmadd_ps(bf16x16(biases + 2 * b, m), _mm512_maskz_loadu_ps(m, xsum + b), acc);
    }
    return _mm512_reduce_add_ps(acc);
  }
  const int64_t per = group_size / 64;
  float s = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) s += bf16_at(biases + 2 * (b / per)) * xsum[b];
  return s;
}

// One pair of blocks' de-interleaved activation: even and odd halves of the hi and lo parts.
struct PairActivation {
  __m512i hi_even, hi_odd, lo_even, lo_odd;
};

// One pair of blocks: 64 packed bytes against the pair's activation; lanes 0-7 hold block 2p's
// partial sums, lanes 8-15 block 2p+1's, scaled by sd[0] and sd[1].
inline __m512 pair_fma(const uint8_t* w, const PairActivation& x, const float* sd, __m512 acc) {
  const __m512i mask = _mm512_set1_epi8(0x0F);
  const __m512i v = _mm512_loadu_si512(w);
  const __m512i even = _mm512_and_si512(v, mask);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
  const __m512i hi =
      _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), even, x.hi_even), odd, x.hi_odd);
  const __m512i dot =
      _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_slli_epi32(hi, 7), even, x.lo_even), odd, x.lo_odd);
  const __m512 scale =
      _mm512_mask_broadcastss_ps(_mm512_set1_ps(sd[0]), static_cast<__mmask16>(0xFF00), _mm_load_ss(sd + 1));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc);
}

// The lone last block (odd block count): 32 bytes against [even 32 | odd 32] of each part (the lo
// part `lo_offset` bytes after the hi part).
inline float single_block(const uint8_t* w, const int8_t* xq, int64_t lo_offset, float sd) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  const __m256i even = _mm256_and_si256(v, mask), odd = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
  const auto load = [&](int64_t at) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + at)); };
  const __m256i hi =
      _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), even, load(0)), odd, load(32));
  const __m256i dot = _mm256_dpbusd_epi32(
      _mm256_dpbusd_epi32(_mm256_slli_epi32(hi, 7), even, load(lo_offset)), odd, load(lo_offset + 32));
  const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(dot), _mm256_extracti128_si256(dot, 1));
  const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  return static_cast<float>(_mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xB1)))) * sd;
}

}  // namespace

void matmul_i8_rows_avx512(const WeightMatrix& w, const I8Activation& x, float* y, int64_t row_begin,
                           int64_t row_end) {
  constexpr int kRows = 4;  // rows sharing each activation load; more rows, more loads in flight
  const int64_t n_blocks = w.cols / 64, n_pairs = n_blocks / 2, per = w.group_size / 64;
  constexpr int64_t kChunk = 64;  // blocks per pass, so the scale buffers stay on the stack at any width
  float sd[kRows][kChunk];
  for (int64_t r = row_begin; r < row_end; r += kRows) {
    const int nr = row_end - r < kRows ? static_cast<int>(row_end - r) : kRows;
    const uint8_t* wr[kRows];
    const uint8_t* sr[kRows];
    for (int i = 0; i < kRows; ++i) {
      const int64_t row = r + (i < nr ? i : nr - 1);  // missing rows repeat the last (results unused)
      wr[i] = w.data + static_cast<size_t>(row) * w.row_stride;
      sr[i] = w.scales + static_cast<size_t>(row) * w.group_stride;
    }
    if (r + 2 * kRows <= row_end) prefetch_rows(w, r + kRows, kRows);
    __m512 acc[kRows];
    float tail[kRows];
    for (int i = 0; i < kRows; ++i) {
      acc[i] = _mm512_setzero_ps();
      tail[i] = 0.0f;
    }
    for (int64_t c0 = 0; c0 < n_blocks; c0 += kChunk) {  // chunk starts are group-aligned
      const int64_t nb = n_blocks - c0 < kChunk ? n_blocks - c0 : kChunk;
      for (int i = 0; i < kRows; ++i) block_scales(sr[i] + 2 * (c0 / per), w.group_size, x.d + c0, nb, sd[i]);
      const int64_t p_end = (c0 + nb) / 2 < n_pairs ? (c0 + nb) / 2 : n_pairs;
      for (int64_t p = c0 / 2; p < p_end; ++p) {
        const int8_t* xp = x.q + p * 128;
        const PairActivation xa{_mm512_load_si512(xp), _mm512_load_si512(xp + 64),
                                _mm512_load_si512(xp + x.cols), _mm512_load_si512(xp + x.cols + 64)};
        for (int i = 0; i < kRows; ++i) acc[i] = pair_fma(wr[i] + p * 64, xa, sd[i] + (2 * p - c0), acc[i]);
      }
      if (n_blocks % 2 == 1 && c0 + nb == n_blocks) {
        const int64_t b = n_blocks - 1;
        for (int i = 0; i < kRows; ++i)
          tail[i] = single_block(wr[i] + b * 32, x.q + b * 64, x.cols, sd[i][b - c0]);
      }
    }
    for (int i = 0; i < nr; ++i) {
      const uint8_t* bias = w.biases + static_cast<size_t>(r + i) * w.group_stride;
      y[r + i] = _mm512_reduce_add_ps(acc[i]) + tail[i] + bias_term(bias, w.group_size, x.sum, n_blocks);
    }
  }
}

// Per 64-element block: four loads, |x| max and sum by reduction; per 16 values one multiply, a
// round-to-nearest-even conversion (as lrint) for hi, and the scaled remainder converted the same way
// for lo; the even and odd elements gathered with two-source permutes, then narrowed to int8 (values
// are within ±127, so the saturation never acts).
I8Activation quantize_activation_i8_avx512(const float* x, int64_t cols, float* storage) {
  const int64_t n_blocks = cols / 64;
  auto* q = reinterpret_cast<int8_t*>(storage);
  float* d = storage + cols / 2;
  float* sum = d + n_blocks;
  const __m512i even_idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_idx = _mm512_add_epi32(even_idx, _mm512_set1_epi32(1));
  const __m512 scale_lo = _mm512_set1_ps(128.0f);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* xb = x + b * 64;
    const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16), v2 = _mm512_loadu_ps(xb + 32),
                 v3 = _mm512_loadu_ps(xb + 48);
    const float amax =
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)),
                                           _mm512_max_ps(_mm512_abs_ps(v2), _mm512_abs_ps(v3))));
    d[b] = amax / (127.0f * 128.0f);
    sum[b] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(v0, v1), _mm512_add_ps(v2, v3)));
    const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    const __m512 f[4] = {_mm512_mul_ps(v0, inv), _mm512_mul_ps(v1, inv), _mm512_mul_ps(v2, inv),
                         _mm512_mul_ps(v3, inv)};
    __m512i hi[4], lo[4];
    for (int j = 0; j < 4; ++j) {
      hi[j] = _mm512_cvtps_epi32(f[j]);
      lo[j] = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_sub_ps(f[j], _mm512_cvtepi32_ps(hi[j])), scale_lo));
    }
    for (int part = 0; part < 2; ++part) {
      const __m512i* i = part == 0 ? hi : lo;
      int8_t* even = q + part * cols + i8_half_offset(b, n_blocks, false);
      int8_t* odd = q + part * cols + i8_half_offset(b, n_blocks, true);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(even),
                       _mm512_cvtsepi32_epi8(_mm512_permutex2var_epi32(i[0], even_idx, i[1])));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(even + 16),
                       _mm512_cvtsepi32_epi8(_mm512_permutex2var_epi32(i[2], even_idx, i[3])));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(odd),
                       _mm512_cvtsepi32_epi8(_mm512_permutex2var_epi32(i[0], odd_idx, i[1])));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(odd + 16),
                       _mm512_cvtsepi32_epi8(_mm512_permutex2var_epi32(i[2], odd_idx, i[3])));
    }
  }
  return I8Activation{q, d, sum, cols};
}

}  // namespace qwick
