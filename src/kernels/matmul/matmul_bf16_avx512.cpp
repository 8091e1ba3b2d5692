// AVX-512 BF16 matmul for prefill: a 16-row weight tile decoded to f32 and rounded to bf16 (zero-
// padded to 32 columns), then a 4-row x 4-token register-blocked vdpbf16ps kernel over the prepared
// bf16 activation rows. Checked against matmul_rows_bf16_reference.
#include <immintrin.h>

#include "kernels/matmul/matmul_avx512_decode.h"
#include "kernels/matmul/matmul_bf16.h"

namespace qwick {
namespace {

inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// acc[i][t] over 4 bf16 tile rows (stride kp) and T prepared activation rows (stride kp).
template <int T>
void tile_kernel(const uint16_t* tile, int64_t kp, const uint16_t* x, float* y, size_t ldy, int nr) {
  __m512 acc[4][T];
  for (int i = 0; i < 4; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kp; k += 32) {
    __m512bh xv[T];
    for (int t = 0; t < T; ++t) xv[t] = (__m512bh)_mm512_load_si512(x + t * kp + k);
    for (int i = 0; i < 4; ++i) {
      const __m512bh wv = (__m512bh)_mm512_load_si512(tile + i * kp + k);
      for (int t = 0; t < T; ++t) acc[i][t] = _mm512_dpbf16_ps(acc[i][t], wv, xv[t]);
    }
  }
  for (int i = 0; i < nr; ++i)
    for (int t = 0; t < T; ++t)
      y[static_cast<size_t>(t) * ldy + static_cast<size_t>(i)] = _mm512_reduce_add_ps(acc[i][t]);
}

// 32 f32 -> 32 bf16 (round to nearest even), element order kept.
inline void store_bf16x32(uint16_t* out, __m512 lo, __m512 hi) {
  _mm512_store_si512(out, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

}  // namespace

void convert_rows_bf16_avx512(const float* x, size_t ldx, size_t n, int64_t cols, uint16_t* out) {
  const int64_t stride = bf16_row_stride(cols);
  for (size_t t = 0; t < n; ++t) {
    const float* row = x + t * ldx;
    for (int64_t c = 0; c < stride; c += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(tail_mask(cols - c), row + c);
      const __m512 hi =
          c + 16 < cols ? _mm512_maskz_loadu_ps(tail_mask(cols - c - 16), row + c + 16) : _mm512_setzero_ps();
      store_bf16x32(out + t * static_cast<size_t>(stride) + c, lo, hi);
    }
  }
}

void matmul_rows_bf16_avx512(const MatmulProblem& p, const uint16_t* xb, int64_t row_begin, int64_t row_end,
                             float* scratch) {
  const WeightMatrix& w = *p.w;
  const int64_t kp = bf16_row_stride(w.cols);
  float* row = scratch;                                    // one decoded f32 row [kp]
  auto* tile = reinterpret_cast<uint16_t*>(scratch + kp);  // kMatmulTileRows bf16 rows [kp]
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kMatmulTileRows) {
    const int64_t nrows = min64(kMatmulTileRows, row_end - r0);
    for (int64_t i = 0; i < nrows; ++i) {
      decode_row(w, r0 + i, row);  // zero beyond cols up to a multiple of 16
      for (int64_t c = 0; c < kp; c += 32) {
        const __m512 lo = _mm512_load_ps(row + c);
        const __m512 hi =
            c + 16 < (w.cols + 15) / 16 * 16 ? _mm512_load_ps(row + c + 16) : _mm512_setzero_ps();
        store_bf16x32(tile + i * kp + c, lo, hi);
      }
    }
    size_t t = 0;
    for (; t + 4 <= p.n; t += 4)
      for (int64_t i = 0; i < nrows; i += 4)
        tile_kernel<4>(tile + i * kp, kp, xb + t * static_cast<size_t>(kp),
                       p.y + t * p.ldy + static_cast<size_t>(r0 + i), p.ldy,
                       static_cast<int>(min64(4, nrows - i)));
    for (; t < p.n; ++t)
      for (int64_t i = 0; i < nrows; i += 4)
        tile_kernel<1>(tile + i * kp, kp, xb + t * static_cast<size_t>(kp),
                       p.y + t * p.ldy + static_cast<size_t>(r0 + i), p.ldy,
                       static_cast<int>(min64(4, nrows - i)));
  }
}

}  // namespace qwick
