// Vector primitives for the attention and DeltaNet kernels: dot products and scaled adds over f32
// and bf16 (the KV cache) operands, and the two halves of grouped-query attention over a bf16 cache.
//
// Variants: reference (plain loops, the ground truth), AVX2+FMA, AVX-512; tests/unit/kernels_test.cpp
// (VectorOps.*) compares each against the reference at odd lengths. This header is plain: SIMD units include
// it.
#pragma once

#include <cstdint>

namespace qwick {

struct VectorOps {
  float (*dot)(const float* a, const float* b, int64_t n);
  float (*dot_bf16)(const float* a, const uint16_t* b, int64_t n);  // b is bf16
  void (*axpy)(float* y, float a, const float* x, int64_t n);       // y += a * x
  void (*axpy_bf16)(float* y, float a, const uint16_t* x, int64_t n);
  // One Gated DeltaNet state row s (length n, fp32), updated in place:
  //   u = decay * (s · k);  delta = beta * (v - u);  s = decay * s + delta * k;  return s · q
  float (*deltanet_row)(float* s, const float* k, const float* q, float decay, float beta, float v,
                        int64_t n);
  // Attention of the n_heads query heads that share one kv head, over a bf16 cache of n_ctx rows of
  // head_dim (attend_group): every cache row is read once for all the heads.
  //   qk_bf16  scores[g·n_ctx + j] = scale · q_g·k_j          (q_g at q + g·q_stride)
  //   pv_bf16  out_g += Σ_j p[g·n_ctx + j] · v_j              (out_g at out + g·out_stride)
  void (*qk_bf16)(const float* q, int64_t q_stride, int n_heads, const uint16_t* k, int64_t n_ctx,
                  int64_t head_dim, float scale, float* scores);
  void (*pv_bf16)(const float* p, int n_heads, int64_t n_ctx, const uint16_t* v, int64_t head_dim, float* out,
                  int64_t out_stride);
};

extern const VectorOps kVectorOpsReference;
extern const VectorOps kVectorOpsAvx2;
extern const VectorOps kVectorOpsAvx512;

}  // namespace qwick
