// AVX-512 vector primitives (see vector_ops.h); tails handled with masked loads.
#include <immintrin.h>

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
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

void axpy_bf16(float* y, float a, const uint16_t* x, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask_for(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, load_bf16(x + i, m), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

float deltanet_row(float* s, const float* k, const float* q, float decay, float beta, float v, int64_t n) {
  const float u = decay * dot(s, k, n);
  const __m512 dv = _mm512_set1_ps(decay), delta = _mm512_set1_ps(beta * (v - u));
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask_for(n - i);
    const __m512 si = _mm512_fmadd_ps(delta, _mm512_maskz_loadu_ps(m, k + i), _mm512_mul_ps(dv, _mm512_maskz_loadu_ps(m, s + i)));
    _mm512_mask_storeu_ps(s + i, m, si);
    acc = _mm512_fmadd_ps(si, _mm512_maskz_loadu_ps(m, q + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

}  // namespace

const VectorOps kVectorOpsAvx512 = {dot, dot_bf16, axpy, axpy_bf16, deltanet_row};

}  // namespace qwick
