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
  int64_t begin, end;
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

void matmul(const MatmulProblem& p, ThreadPool& pool) { matmul_batch(std::span<const MatmulProblem>(&p, 1), pool); }

void matmul_batch(std::span<const MatmulProblem> problems, ThreadPool& pool) {
  const MatmulRowsFn kernel = matmul_kernel(active_simd_level());
  int64_t total_rows = 0;
  for (const auto& p : problems) total_rows += p.n > 0 ? p.w->rows : 0;
  if (total_rows == 0) return;
  // About four blocks per thread for balance, never below one decoded tile.
  const int64_t target = std::max<int64_t>(kMatmulTileRows, total_rows / (4 * pool.size()) / kMatmulTileRows *
                                                                kMatmulTileRows);
  std::vector<RowBlock> blocks;
  for (const auto& p : problems) {
    if (p.n == 0) continue;
    for (int64_t r = 0; r < p.w->rows; r += target) blocks.push_back({&p, r, std::min(p.w->rows, r + target)});
  }
  pool.parallel_for(blocks.size(), [&](size_t i, int) {
    const RowBlock& b = blocks[i];
    kernel(*b.problem, b.begin, b.end, thread_scratch(b.problem->w->cols));
  });
}

}  // namespace qwick
