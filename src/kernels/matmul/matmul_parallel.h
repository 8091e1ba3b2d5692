// Multi-threaded matmul over the thread pool, with the SIMD kernel chosen by the CPU's features.
#pragma once

#include <span>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/matmul_q8.h"

namespace qwick {

// kExact keeps activations in f32 (the reference numerics). kFast lets single-row products against
// 4-bit weights quantize the activation to int8 per 64 values (matmul_q8.h), as llama.cpp does, and
// multi-row products run on bf16 operands where the CPU has AVX-512 BF16 (matmul_bf16.h).
enum class MatmulPrecision { kExact, kFast };

MatmulRowsFn matmul_kernel(SimdLevel level);
Q8RowsFn matmul_q8_kernel(SimdLevel level);

// One problem, rows split across the pool.
void matmul(const MatmulProblem& p, ThreadPool& pool, MatmulPrecision precision = MatmulPrecision::kExact);
// Several independent problems in one parallel region (e.g. the routed experts of a decode step),
// so the threads never wait for the slowest matrix before starting the next.
void matmul_batch(std::span<const MatmulProblem> problems, ThreadPool& pool,
                  MatmulPrecision precision = MatmulPrecision::kExact);

}  // namespace qwick
