#include "kernels/matmul/matmul_parallel.h"

#include <algorithm>
#include <vector>

#include "core/aligned_buffer.h"

namespace qwick {
namespace {

float* thread_scratch(int64_t cols) {
  thread_local AlignedBuffer<float> scratch;
  scratch.reserve(matmul_scratch_floats(cols));
  return scratch.data();
}

struct RowBlock {
  const MatmulProblem* problem;
  int q8;  // index into Q8Inputs when the int8-activation kernel runs this block, else -1
  int64_t begin, end;
};

// Quantized activations of one matmul_batch call, one per distinct input row. Buffers are kept
// from call to call, so a decode step allocates nothing once warm.
struct Q8Inputs {
  size_t used = 0;
  std::vector<const float*> sources;
  std::vector<Q8Activation> views;
  std::vector<AlignedBuffer<float>> storage;

  int get(const float* x, int64_t cols) {
    for (size_t i = 0; i < used; ++i)
      if (sources[i] == x && views[i].cols == cols) return static_cast<int>(i);
    if (used == storage.size()) {
      storage.emplace_back();
      sources.push_back(nullptr);
      views.emplace_back();
    }
    storage[used].reserve(q8_activation_floats(cols));
    sources[used] = x;
    views[used] = quantize_activation_q8(x, cols, storage[used].data());
    return static_cast<int>(used++);
  }
};

}  // namespace

MatmulRowsFn matmul_kernel(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return matmul_rows_avx512;
    case SimdLevel::kAvx2: return matmul_rows_avx2;
    case SimdLevel::kScalar: break;
  }
  return matmul_rows_reference;
}

Q8RowsFn matmul_q8_kernel(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return matmul_q8_rows_avx512;
    case SimdLevel::kAvx2: return matmul_q8_rows_avx2;
    case SimdLevel::kScalar: break;
  }
  return matmul_q8_rows_reference;
}

void matmul(const MatmulProblem& p, ThreadPool& pool, MatmulPrecision precision) {
  matmul_batch(std::span<const MatmulProblem>(&p, 1), pool, precision);
}

void matmul_batch(std::span<const MatmulProblem> problems, ThreadPool& pool, MatmulPrecision precision) {
  const SimdLevel level = active_simd_level();
  const MatmulRowsFn kernel = matmul_kernel(level);
  const Q8RowsFn q8_kernel = matmul_q8_kernel(level);
  int64_t total_rows = 0;
  for (const auto& p : problems) total_rows += p.n > 0 ? p.w->rows : 0;
  if (total_rows == 0) return;
  // About four blocks per thread for balance, never below one decoded tile.
  const int64_t target = std::max<int64_t>(kMatmulTileRows, total_rows / (4 * pool.size()) / kMatmulTileRows *
                                                                kMatmulTileRows);
  // Per calling thread, reused across calls; the tasks below reach them through these references
  // (a thread_local named inside the lambda would be the worker's own, empty instance).
  thread_local Q8Inputs q8_storage;
  thread_local std::vector<RowBlock> block_storage;
  Q8Inputs& q8_inputs = q8_storage;
  std::vector<RowBlock>& blocks = block_storage;
  q8_inputs.used = 0;
  blocks.clear();
  for (const auto& p : problems) {
    if (p.n == 0) continue;
    const bool q8 = precision == MatmulPrecision::kFast && p.n == 1 && q8_supported(*p.w);
    const int act = q8 ? q8_inputs.get(p.x, p.w->cols) : -1;
    for (int64_t r = 0; r < p.w->rows; r += target) blocks.push_back({&p, act, r, std::min(p.w->rows, r + target)});
  }
  pool.parallel_for(blocks.size(), [&](size_t i, int) {
    const RowBlock& b = blocks[i];
    if (b.q8 >= 0)
      q8_kernel(*b.problem->w, q8_inputs.views[static_cast<size_t>(b.q8)], b.problem->y, b.begin, b.end);
    else
      kernel(*b.problem, b.begin, b.end, thread_scratch(b.problem->w->cols));
  });
}

}  // namespace qwick
