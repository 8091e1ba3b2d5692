// Plain C++ two-part int8-activation matvec: the exact integer sums of matmul_i8.h, then f32 scaling.
#include <cmath>
#include <cstring>

#include "core/numeric.h"
#include "kernels/matmul/matmul_i8.h"

namespace qwick {

I8Activation quantize_activation_i8(const float* x, int64_t cols, float* storage) {
  const int64_t n_blocks = cols / 64;
  auto* q = reinterpret_cast<int8_t*>(storage);
  float* d = storage + cols / 2;
  float* sum = d + n_blocks;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* xb = x + b * 64;
    float amax = 0.0f, s = 0.0f;
    for (int i = 0; i < 64; ++i) {
      amax = std::fmax(amax, std::fabs(xb[i]));
      s += xb[i];
    }
    d[b] = amax / (127.0f * 128.0f);
    sum[b] = s;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int part = 0; part < 2; ++part) {  // 0: hi, 1: lo
      int8_t* half[2] = {q + part * cols + i8_half_offset(b, n_blocks, false),
                         q + part * cols + i8_half_offset(b, n_blocks, true)};
      for (int i = 0; i < 64; ++i) {
        // lrint rounds half to even in the default mode; f - hi is exact in f32.
        const float f = xb[i] * inv, hi = std::nearbyint(f);
        half[i % 2][i / 2] = static_cast<int8_t>(part == 0 ? std::lrint(f) : std::lrint((f - hi) * 128.0f));
      }
    }
  }
  return I8Activation{q, d, sum, cols};
}

void matmul_i8_rows_reference(const WeightMatrix& w, const I8Activation& x, float* y, int64_t row_begin,
                              int64_t row_end) {
  const int64_t n_blocks = w.cols / 64, blocks_per_group = w.group_size / 64;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w.data + static_cast<size_t>(r) * w.row_stride;
    const uint8_t* sp = w.scales + static_cast<size_t>(r) * w.group_stride;
    const uint8_t* bp = w.biases + static_cast<size_t>(r) * w.group_stride;
    float acc = 0.0f;
    for (int64_t b = 0; b < n_blocks; ++b) {
      int32_t dot = 0;
      for (int part = 0; part < 2; ++part) {
        const int8_t* even = x.q + part * x.cols + i8_half_offset(b, n_blocks, false);
        const int8_t* odd = x.q + part * x.cols + i8_half_offset(b, n_blocks, true);
        int32_t part_dot = 0;
        for (int j = 0; j < 32; ++j) {
          const uint8_t byte = row[b * 32 + j];
          part_dot += (byte & 0xF) * even[j] + (byte >> 4) * odd[j];
        }
        dot = part == 0 ? part_dot * 128 : dot + part_dot;
      }
      const int64_t g = b / blocks_per_group;
      const float scale = bf16_to_f32(load_u16(sp + 2 * g)), bias = bf16_to_f32(load_u16(bp + 2 * g));
      acc += scale * x.d[b] * static_cast<float>(dot) + bias * x.sum[b];
    }
    y[r] = acc;
  }
}

}  // namespace qwick
