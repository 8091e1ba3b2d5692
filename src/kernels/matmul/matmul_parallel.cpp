#include "kernels/matmul/matmul_parallel.h"

#include <algorithm>
#include <vector>

#include "core/aligned_buffer.h"
#include "kernels/matmul/matmul_bf16.h"

namespace qwick {
namespace {

float* thread_scratch(int64_t cols) {
  thread_local AlignedBuffer<float> scratch;
  scratch.reserve(matmul_scratch_floats(cols));
  return scratch.data();
}

enum class Path { kF32, kI8, kBF16 };

struct RowBlock {
  const MatmulProblem* problem;
  Path path;
  int input;  // index into the prepared inputs of its path
  int64_t begin, end;
};

// Activations converted for a kernel (int8 or bf16), one per distinct input of a matmul_batch call
// (the experts of a layer share theirs). Buffers are kept from call to call, so a warm decode step
// allocates nothing.
template <typename View>
struct PreparedInputs {
  struct Entry {
    const float* x;
    size_t n;
    int64_t cols;
    View view;
    AlignedBuffer<float> storage;
  };
  size_t used = 0;
  std::vector<Entry> entries;

  template <typename Prepare>
  int get(const MatmulProblem& p, size_t floats, Prepare prepare) {
    for (size_t i = 0; i < used; ++i)
      if (entries[i].x == p.x && entries[i].n == p.n && entries[i].cols == p.w->cols)
        return static_cast<int>(i);
    if (used == entries.size()) entries.emplace_back();
    Entry& e = entries[used];
    e.storage.reserve(floats);
    e.x = p.x;
    e.n = p.n;
    e.cols = p.w->cols;
    e.view = prepare(e.storage.data());
    return static_cast<int>(used++);
  }
};

}  // namespace

MatmulRowsFn matmul_kernel(SimdLevel level) {
  return by_simd_level<MatmulRowsFn>(level, matmul_rows_avx512, matmul_rows_avx2, matmul_rows_reference);
}

I8RowsFn matmul_i8_kernel(SimdLevel level) {
  return by_simd_level<I8RowsFn>(level, matmul_i8_rows_avx512, matmul_i8_rows_avx2, matmul_i8_rows_reference);
}

I8QuantizeFn i8_quantizer(SimdLevel level) {  // the AVX2 build runs the plain quantizer
  return by_simd_level<I8QuantizeFn>(level, quantize_activation_i8_avx512, quantize_activation_i8,
                                     quantize_activation_i8);
}

void matmul(const MatmulProblem& p, ThreadPool& pool, MatmulPrecision precision) {
  matmul_batch(std::span<const MatmulProblem>(&p, 1), pool, precision);
}

void matmul_batch(std::span<const MatmulProblem> problems, ThreadPool& pool, MatmulPrecision precision) {
  // A multi-row decode step (speculation's verify) computes each row as a single-row decode would:
  // its products against 4-bit weights run row by row on the int8 path.
  if (precision == MatmulPrecision::kFastDecode) {
    bool split = false;
    for (const auto& p : problems) split |= p.n > 1 && i8_supported(*p.w);
    if (split) {
      std::vector<MatmulProblem> rows;
      for (const auto& p : problems) {
        if (p.n <= 1 || !i8_supported(*p.w)) {
          rows.push_back(p);
          continue;
        }
        for (size_t r = 0; r < p.n; ++r)
          rows.push_back(MatmulProblem{p.w, p.x + r * p.ldx, p.ldx, 1, p.y + r * p.ldy, p.ldy});
      }
      matmul_batch(rows, pool, precision);
      return;
    }
  }
  const SimdLevel level = active_simd_level();
  const MatmulRowsFn kernel = matmul_kernel(level);
  const I8RowsFn i8_kernel = matmul_i8_kernel(level);
  const I8QuantizeFn quantize = i8_quantizer(level);
  int64_t total_rows = 0;
  for (const auto& p : problems) total_rows += p.n > 0 ? p.w->rows : 0;
  if (total_rows == 0) return;
  // About four blocks per thread for balance, never below one decoded tile.
  const int64_t target =
      std::max<int64_t>(kMatmulTileRows, total_rows / (4 * pool.size()) / kMatmulTileRows * kMatmulTileRows);
  // Per calling thread, reused across calls; the tasks below reach them through these references
  // (a thread_local named inside the lambda would be the worker's own, empty instance).
  thread_local PreparedInputs<I8Activation> i8_storage;
  thread_local PreparedInputs<const uint16_t*> bf16_storage;
  thread_local std::vector<RowBlock> block_storage;
  PreparedInputs<I8Activation>& i8_inputs = i8_storage;
  PreparedInputs<const uint16_t*>& bf16_inputs = bf16_storage;
  std::vector<RowBlock>& blocks = block_storage;
  i8_inputs.used = bf16_inputs.used = 0;
  blocks.clear();
  for (const auto& p : problems) {
    if (p.n == 0) continue;
    Path path = Path::kF32;
    int input = -1;
    if (precision == MatmulPrecision::kFastDecode && p.n == 1 && i8_supported(*p.w)) {
      path = Path::kI8;
      input = i8_inputs.get(p, i8_activation_floats(p.w->cols),
                            [&](float* storage) { return quantize(p.x, p.w->cols, storage); });
    } else if (precision == MatmulPrecision::kFastPrefill && level == SimdLevel::kAvx512) {
      path = Path::kBF16;
      const int64_t stride = bf16_row_stride(p.w->cols);
      input = bf16_inputs.get(p, static_cast<size_t>(stride) * p.n / 2 + 16, [&](float* storage) {
        auto* out = reinterpret_cast<uint16_t*>(storage);
        convert_rows_bf16_avx512(p.x, p.ldx, p.n, p.w->cols, out);
        return static_cast<const uint16_t*>(out);
      });
    }
    for (int64_t r = 0; r < p.w->rows; r += target)
      blocks.push_back({&p, path, input, r, std::min(p.w->rows, r + target)});
  }
  pool.parallel_for(blocks.size(), [&](size_t i, int) {
    const RowBlock& b = blocks[i];
    const size_t in = static_cast<size_t>(b.input);
    switch (b.path) {
      case Path::kI8:
        i8_kernel(*b.problem->w, i8_inputs.entries[in].view, b.problem->y, b.begin, b.end);
        break;
      case Path::kBF16:
        matmul_rows_bf16_avx512(*b.problem, bf16_inputs.entries[in].view, b.begin, b.end,
                                thread_scratch(b.problem->w->cols));
        break;
      case Path::kF32:
        kernel(*b.problem, b.begin, b.end, thread_scratch(b.problem->w->cols));
        break;
    }
  });
}

}  // namespace qwick
