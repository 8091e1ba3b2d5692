// Plain C++ bf16-operand matmul: both operands rounded to bf16, sequential f32 accumulation.
#include "core/numeric.h"
#include "kernels/matmul/matmul_bf16.h"

namespace qwick {

void convert_rows_bf16_reference(const float* x, size_t ldx, size_t n, int64_t cols, uint16_t* out) {
  const int64_t stride = bf16_row_stride(cols);
  for (size_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < stride; ++c) out[t * stride + c] = c < cols ? f32_to_bf16(x[t * ldx + c]) : 0;
}

void matmul_rows_bf16_reference(const MatmulProblem& p, const uint16_t* xb, int64_t row_begin,
                                int64_t row_end, float* scratch) {
  const int64_t K = p.w->cols, stride = bf16_row_stride(K);
  for (int64_t r = row_begin; r < row_end; ++r) {
    dequantize_row(*p.w, r, scratch);
    for (int64_t c = 0; c < K; ++c) scratch[c] = round_to_bf16(scratch[c]);
    for (size_t t = 0; t < p.n; ++t) {
      float acc = 0.0f;
      for (int64_t c = 0; c < K; ++c) acc += scratch[c] * bf16_to_f32(xb[t * stride + c]);
      p.y[t * p.ldy + static_cast<size_t>(r)] = acc;
    }
  }
}

}  // namespace qwick
