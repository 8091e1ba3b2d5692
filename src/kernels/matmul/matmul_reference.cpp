// Plain C++ matmul: decode one weight row to f32, then a sequential dot product per activation row.

#include "core/numeric.h"
#include "kernels/matmul/matmul.h"

namespace qwick {

void dequantize_row(const WeightMatrix& w, int64_t row, float* out) {
  const uint8_t* p = w.data + static_cast<size_t>(row) * w.row_stride;
  const int64_t K = w.cols;
  switch (w.format) {
    case WeightFormat::kF32:
      for (int64_t c = 0; c < K; ++c) out[c] = load_f32(p + 4 * c);
      return;
    case WeightFormat::kBF16:
      for (int64_t c = 0; c < K; ++c) out[c] = bf16_to_f32(load_u16(p + 2 * c));
      return;
    case WeightFormat::kF16:
      for (int64_t c = 0; c < K; ++c) out[c] = f16_to_f32(load_u16(p + 2 * c));
      return;
    case WeightFormat::kAffine4:
    case WeightFormat::kAffine8: {
      const uint8_t* sp = w.scales + static_cast<size_t>(row) * w.group_stride;
      const uint8_t* bp = w.biases + static_cast<size_t>(row) * w.group_stride;
      for (int64_t c = 0; c < K; ++c) {
        const int64_t g = c / w.group_size;
        const float scale = bf16_to_f32(load_u16(sp + 2 * g));
        const float bias = bf16_to_f32(load_u16(bp + 2 * g));
        const unsigned q = w.format == WeightFormat::kAffine4 ? (p[c / 2] >> (4 * (c & 1))) & 0xFu : p[c];
        out[c] = static_cast<float>(q) * scale + bias;
      }
      return;
    }
  }
}

void matmul_rows_reference(const MatmulProblem& p, int64_t row_begin, int64_t row_end, float* scratch) {
  const int64_t K = p.w->cols;
  for (int64_t r = row_begin; r < row_end; ++r) {
    dequantize_row(*p.w, r, scratch);
    for (size_t t = 0; t < p.n; ++t) {
      const float* x = p.x + t * p.ldx;
      float acc = 0.0f;
      for (int64_t c = 0; c < K; ++c) acc += scratch[c] * x[c];
      p.y[t * p.ldy + static_cast<size_t>(r)] = acc;
    }
  }
}

}  // namespace qwick
