// AVX-512 vector primitives (see vector_ops.h); tails handled with masked loads.
#include <immintrin.h>

#include "kernels/vector/head_groups.h"
#include "kernels/vector/vector_ops.h"

namespace qwick {
namespace {

inline __mmask16 mask_for(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << remaining) - 1);
}

inline __m512 load_bf16(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

float dot(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = mask_for(n - i);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

float dot_bf16(const float* a, const uint16_t* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), load_bf16(b + i, 0xFFFF), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), load_bf16(b + i + 16, 0xFFFF), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = mask_for(n - i);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), load_bf16(b + i, m), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

void axpy(float* y, float a, const float* x, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask_for(n - i);
    _mm512_mask_storeu_ps(
        y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

void axpy_bf16(float* y, float a, const uint16_t* x, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask_for(n - i);
    _mm512_mask_storeu_ps(y + i, m,
                          _mm512_fmadd_ps(av, load_bf16(x + i, m), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

float deltanet_row(float* s, const float* k, const float* q, float decay, float beta, float v, int64_t n) {
  const float u = decay * dot(s, k, n);
  const __m512 dv = _mm512_set1_ps(decay), delta = _mm512_set1_ps(beta * (v - u));
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask_for(n - i);
    const __m512 si = _mm512_fmadd_ps(delta, _mm512_maskz_loadu_ps(m, k + i),
                                      _mm512_mul_ps(dv, _mm512_maskz_loadu_ps(m, s + i)));
    _mm512_mask_storeu_ps(s + i, m, si);
    acc = _mm512_fmadd_ps(si, _mm512_maskz_loadu_ps(m, q + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// G heads (G <= 8) against every key row: each 16-wide slice of a row is converted once and meets
// the G query slices in G independent accumulators.
template <int G>
void qk_heads(const float* q, int64_t q_stride, const uint16_t* k, int64_t n_ctx, int64_t hd, float scale,
              float* scores) {
  for (int64_t j = 0; j < n_ctx; ++j) {
    __m512 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; d += 16) {
      const __mmask16 m = mask_for(hd - d);
      const __m512 kv = load_bf16(k + j * hd + d, m);
      for (int g = 0; g < G; ++g)
        acc[g] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + g * q_stride + d), kv, acc[g]);
    }
    for (int g = 0; g < G; ++g) scores[g * n_ctx + j] = _mm512_reduce_add_ps(acc[g]) * scale;
  }
}

// G heads' outputs: per block of 64 value rows (in L1) and 16-wide slice, the G partial sums stay in
// registers across the block; each row is added in order, as the reference does.
template <int G>
void pv_heads(const float* p, int64_t n_ctx, const uint16_t* v, int64_t hd, float* out, int64_t out_stride) {
  constexpr int64_t kBlock = 64;
  for (int64_t j0 = 0; j0 < n_ctx; j0 += kBlock) {
    const int64_t j1 = j0 + kBlock < n_ctx ? j0 + kBlock : n_ctx;
    for (int64_t d = 0; d < hd; d += 16) {
      const __mmask16 m = mask_for(hd - d);
      __m512 acc[G];
      for (int g = 0; g < G; ++g) acc[g] = _mm512_maskz_loadu_ps(m, out + g * out_stride + d);
      for (int64_t j = j0; j < j1; ++j) {
        const __m512 vv = load_bf16(v + j * hd + d, m);
        for (int g = 0; g < G; ++g) acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(p[g * n_ctx + j]), vv, acc[g]);
      }
      for (int g = 0; g < G; ++g) _mm512_mask_storeu_ps(out + g * out_stride + d, m, acc[g]);
    }
  }
}

void qk_bf16(const float* q, int64_t q_stride, int n_heads, const uint16_t* k, int64_t n_ctx,
             int64_t head_dim, float scale, float* scores) {
  for_head_groups(n_heads, [&](int g0, auto G) {
    qk_heads<G.value>(q + g0 * q_stride, q_stride, k, n_ctx, head_dim, scale, scores + g0 * n_ctx);
  });
}

void pv_bf16(const float* p, int n_heads, int64_t n_ctx, const uint16_t* v, int64_t head_dim, float* out,
             int64_t out_stride) {
  for_head_groups(n_heads, [&](int g0, auto G) {
    pv_heads<G.value>(p + g0 * n_ctx, n_ctx, v, head_dim, out + g0 * out_stride, out_stride);
  });
}

}  // namespace

const VectorOps kVectorOpsAvx512 = {dot, dot_bf16, axpy, axpy_bf16, deltanet_row, qk_bf16, pv_bf16};

}  // namespace qwick
