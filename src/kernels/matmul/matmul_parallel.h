// Multi-threaded matmul over the thread pool, with the SIMD kernel chosen by the CPU's features.
#pragma once

#include <span>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/matmul_i8.h"

namespace qwick {

// kExact keeps activations in f32 (the reference numerics). The fast modes differ by phase:
//   kFastDecode   products against 4-bit weights quantize the activation per 64 values to 15 bits
//                 held as two int8 parts (matmul_i8.h), row by row (so a multi-row decode step
//                 computes each row as a single-row one); the rest stays f32
//   kFastPrefill  every product runs on bf16 operands where the CPU has AVX-512 BF16
//                 (matmul_bf16.h), f32 elsewhere
// Choosing by phase rather than by row count keeps a prefill's result independent of how the
// prompt was cut into chunks (an expert that gets one row of a chunk computes as with many), so a
// restored prefix state equals a fresh prefill exactly.
enum class MatmulPrecision { kExact, kFastDecode, kFastPrefill };

MatmulRowsFn matmul_kernel(SimdLevel level);
I8RowsFn matmul_i8_kernel(SimdLevel level);
I8QuantizeFn i8_quantizer(SimdLevel level);

// One problem, rows split across the pool.
void matmul(const MatmulProblem& p, ThreadPool& pool, MatmulPrecision precision = MatmulPrecision::kExact);
// Several independent problems in one parallel region (e.g. the routed experts of a decode step),
// so the threads never wait for the slowest matrix before starting the next.
void matmul_batch(std::span<const MatmulProblem> problems, ThreadPool& pool,
                  MatmulPrecision precision = MatmulPrecision::kExact);

}  // namespace qwick
