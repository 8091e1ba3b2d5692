// The q8 KV cache's row format (`--kv-type q8`), one definition for the CPU cache and the CUDA kernels.
//
// A row is one position's keys (or values) of one kv head, head_dim values x. It is stored as bytes
// u = round(x / scale) + 128 (offset by 128, so the GPU turns a byte into an f16 with one permute and
// one subtraction) and one f32 scale = max|x| / 127; a row of zeros has scale 0 and bytes 128. Each
// value is off by at most scale / 2 (0.4 % of the row's largest), against bf16's 0.2 % of each value:
// half the bytes of bf16, which long-context decode, bound by reading the cache, turns into speed.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define QWICK_KV_Q8_FN __host__ __device__ __forceinline__
#else
#define QWICK_KV_Q8_FN inline
#endif

namespace qwick {

constexpr int kKvQ8Offset = 128;

// The scale of a row whose largest magnitude is `amax`.
QWICK_KV_Q8_FN float kv_q8_scale(float amax) {
  return amax / 127.0f;
}

// x's byte in a row of scale `scale` (IEEE division and round-to-nearest-even on both sides, so the
// CPU and the GPU store the same bytes for the same values).
QWICK_KV_Q8_FN uint8_t kv_q8_code(float x, float scale) {
  if (!(scale > 0.0f)) return kKvQ8Offset;
  const float r = rintf(x / scale);
  return static_cast<uint8_t>(static_cast<int>(fminf(fmaxf(r, -127.0f), 127.0f)) + kKvQ8Offset);
}

// Codes a row of n values into `codes` and returns its scale (the CPU cache and the tests; the GPU's
// attention_prep finds the row's largest magnitude across a warp).
QWICK_KV_Q8_FN float kv_q8_code_row(const float* x, int n, uint8_t* codes) {
  float amax = 0.0f;
  for (int d = 0; d < n; ++d) amax = fmaxf(amax, fabsf(x[d]));
  const float scale = kv_q8_scale(amax);
  for (int d = 0; d < n; ++d) codes[d] = kv_q8_code(x[d], scale);
  return scale;
}

// The value a byte stands for.
QWICK_KV_Q8_FN float kv_q8_value(uint8_t u, float scale) {
  return static_cast<float>(static_cast<int>(u) - kKvQ8Offset) * scale;
}

}  // namespace qwick

#undef QWICK_KV_Q8_FN
