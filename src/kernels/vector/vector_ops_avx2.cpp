// AVX2 + FMA vector primitives (see vector_ops.h); tails handled with maskload/maskstore.
#include <immintrin.h>

#include "kernels/vector/head_groups.h"
#include "kernels/vector/vector_ops.h"

namespace qwick {
namespace {

inline __m256i mask_for(int64_t remaining) {
  const int n = remaining >= 8 ? 8 : static_cast<int>(remaining);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 load_bf16x8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline float bf16(uint16_t h) {
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(static_cast<unsigned>(h) << 16))));
}

float dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i < n; i += 8) {
    const __m256i m = mask_for(n - i);
    acc0 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

float dot_bf16(const float* a, const uint16_t* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_bf16x8(b + i), acc);
  float s = hsum(acc);
  for (; i < n; ++i) s += a[i] * bf16(b[i]);
  return s;
}

void axpy(float* y, float a, const float* x, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = mask_for(n - i);
    _mm256_maskstore_ps(y + i, m,
                        _mm256_fmadd_ps(av, _mm256_maskload_ps(x + i, m), _mm256_maskload_ps(y + i, m)));
  }
}

void axpy_bf16(float* y, float a, const uint16_t* x, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, load_bf16x8(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * bf16(x[i]);
}

float deltanet_row(float* s, const float* k, const float* q, float decay, float beta, float v, int64_t n) {
  const float u = decay * dot(s, k, n);
  const __m256 dv = _mm256_set1_ps(decay), delta = _mm256_set1_ps(beta * (v - u));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = mask_for(n - i);
    const __m256 si =
        _mm256_fmadd_ps(delta, _mm256_maskload_ps(k + i, m), _mm256_mul_ps(dv, _mm256_maskload_ps(s + i, m)));
    _mm256_maskstore_ps(s + i, m, si);
    acc = _mm256_fmadd_ps(si, _mm256_maskload_ps(q + i, m), acc);
  }
  return hsum(acc);
}

// As the AVX-512 versions (see there), 8 wide, tails through maskload/maskstore.
template <int G>
void qk_heads(const float* q, int64_t q_stride, const uint16_t* k, int64_t n_ctx, int64_t hd, float scale,
              float* scores) {
  for (int64_t j = 0; j < n_ctx; ++j) {
    __m256 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) {
      const __m256 kv = load_bf16x8(k + j * hd + d);
      for (int g = 0; g < G; ++g) acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * q_stride + d), kv, acc[g]);
    }
    for (int g = 0; g < G; ++g) {
      float s = hsum(acc[g]);
      for (int64_t e = d; e < hd; ++e) s += q[g * q_stride + e] * bf16(k[j * hd + e]);
      scores[g * n_ctx + j] = s * scale;
    }
  }
}

template <int G>
void pv_heads(const float* p, int64_t n_ctx, const uint16_t* v, int64_t hd, float* out, int64_t out_stride) {
  constexpr int64_t kBlock = 64;
  for (int64_t j0 = 0; j0 < n_ctx; j0 += kBlock) {
    const int64_t j1 = j0 + kBlock < n_ctx ? j0 + kBlock : n_ctx;
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) {
      __m256 acc[G];
      for (int g = 0; g < G; ++g) acc[g] = _mm256_loadu_ps(out + g * out_stride + d);
      for (int64_t j = j0; j < j1; ++j) {
        const __m256 vv = load_bf16x8(v + j * hd + d);
        for (int g = 0; g < G; ++g) acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(p[g * n_ctx + j]), vv, acc[g]);
      }
      for (int g = 0; g < G; ++g) _mm256_storeu_ps(out + g * out_stride + d, acc[g]);
    }
    for (; d < hd; ++d)
      for (int g = 0; g < G; ++g)
        for (int64_t j = j0; j < j1; ++j) out[g * out_stride + d] += p[g * n_ctx + j] * bf16(v[j * hd + d]);
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

const VectorOps kVectorOpsAvx2 = {dot, dot_bf16, axpy, axpy_bf16, deltanet_row, qk_bf16, pv_bf16};

}  // namespace qwick
