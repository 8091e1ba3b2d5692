// Software prefetch of weight rows for the x86 matmul kernels (matmul_i8_*, matmul_avx2/avx512.cpp):
// they request the next group of rows while computing the current one. The hardware prefetcher alone
// left int8-activation decode at ~28 GB/s on the 2-core Zen 5 machine; with this, ~34-39 GB/s
// (docs/performance.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/weight_matrix.h"

namespace qwick {

// Rows [row, row + n) of w: codes (or values) and, for affine formats, scales and biases, a prefetch per
// 64-byte line. Volatile asm: a loop
// of _mm_prefetch alone has no observable effect, and GCC deletes it.
inline void prefetch_rows(const WeightMatrix& w, int64_t row, int64_t n) {
  const auto line = [](const uint8_t* p) { asm volatile("prefetcht0 %0" ::"m"(*p)); };
  const size_t codes = static_cast<size_t>(row) * w.row_stride,
               groups = static_cast<size_t>(row) * w.group_stride;
  for (size_t off = 0; off < static_cast<size_t>(n) * w.row_stride; off += 64) line(w.data + codes + off);
  if (!w.is_affine()) return;
  for (size_t off = 0; off < static_cast<size_t>(n) * w.group_stride; off += 64) {
    line(w.scales + groups + off);
    line(w.biases + groups + off);
  }
}

}  // namespace qwick
