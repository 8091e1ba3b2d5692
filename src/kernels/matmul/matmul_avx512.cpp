// AVX-512 matmul: decode a 16-row weight tile to f32 (zero-padded to a multiple of 16 columns), then
// a 4-row x 4-token register-blocked FMA kernel over it. Checked against matmul_rows_reference.
//
// Included headers are restricted to intrinsics and plain structs (cmake/simd.cmake).
#include <immintrin.h>

#include "kernels/matmul/matmul_avx512_decode.h"
#include "kernels/matmul/prefetch_rows.h"

namespace qwick {
namespace {

inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
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
    for (int t = 0; t < T; ++t)
      y[static_cast<size_t>(t) * ldy + static_cast<size_t>(i)] = _mm512_reduce_add_ps(acc[i][t]);
}

}  // namespace

void matmul_rows_avx512(const MatmulProblem& p, int64_t row_begin, int64_t row_end, float* scratch) {
  const WeightMatrix& w = *p.w;
  const int64_t K = w.cols;
  const int64_t kp = (K + 15) / 16 * 16;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kMatmulTileRows) {
    const int64_t nrows = min64(kMatmulTileRows, row_end - r0);
    if (r0 + nrows < row_end) prefetch_rows(w, r0 + nrows, min64(kMatmulTileRows, row_end - r0 - nrows));
    for (int64_t i = 0; i < nrows; ++i) decode_row(w, r0 + i, scratch + i * kp);
    size_t t = 0;
    for (; t + 4 <= p.n; t += 4) {
      const float* x = p.x + t * p.ldx;
      for (int64_t i = 0; i < nrows; i += 4)
        tile_kernel<4>(scratch + i * kp, kp, K, x, p.ldx, p.y + t * p.ldy + static_cast<size_t>(r0 + i),
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
