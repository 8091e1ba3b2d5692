// Vector primitives for the attention and DeltaNet kernels: dot products and scaled adds over f32
// and bf16 (the KV cache) operands.
//
// Variants: reference (plain loops, the ground truth), AVX2+FMA, AVX-512; tests/unit/vector_ops_test.cpp
// compares each against the reference at odd lengths. This header is plain: SIMD units include it.
#pragma once

#include <cstdint>

namespace qwick {

struct VectorOps {
  float (*dot)(const float* a, const float* b, int64_t n);
  float (*dot_bf16)(const float* a, const uint16_t* b, int64_t n);  // b is bf16
  void (*axpy)(float* y, float a, const float* x, int64_t n);        // y += a * x
  void (*axpy_bf16)(float* y, float a, const uint16_t* x, int64_t n);
  // One Gated DeltaNet state row s (length n, fp32), updated in place:
  //   u = decay * (s · k);  delta = beta * (v - u);  s = decay * s + delta * k;  return s · q
  float (*deltanet_row)(float* s, const float* k, const float* q, float decay, float beta, float v, int64_t n);
};

extern const VectorOps kVectorOpsReference;
extern const VectorOps kVectorOpsAvx2;
extern const VectorOps kVectorOpsAvx512;

}  // namespace qwick
