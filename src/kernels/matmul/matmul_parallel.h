// Multi-threaded matmul over the thread pool, with the SIMD kernel chosen by the CPU's features.
#pragma once

#include <span>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/matmul/matmul.h"

namespace qwick {

MatmulRowsFn matmul_kernel(SimdLevel level);

// One problem, rows split across the pool.
void matmul(const MatmulProblem& p, ThreadPool& pool);
// Several independent problems in one parallel region (e.g. the routed experts of a decode step),
// so the threads never wait for the slowest matrix before starting the next.
void matmul_batch(std::span<const MatmulProblem> problems, ThreadPool& pool);

}  // namespace qwick
