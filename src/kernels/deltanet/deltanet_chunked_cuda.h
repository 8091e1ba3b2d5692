// The Gated DeltaNet recurrence over a prefill chunk in the chunked (WY / UT-transform) form of
// model-spec.md §2.5, so that most of its arithmetic becomes matrix products on the tensor cores.
// Same contract as deltanet_scan (deltanet_cuda.h), which stays the path for decode and short
// chunks. With the spec's S (Dk × Dv) and, per chunk of L <= 64 rows with G_i = Σ_{j<=i} log decay_j,
// D_ij = exp(G_i − G_j) for i >= j:
//
//   deltanet_chunk_prepare  a block per (chunk, key head): QKᵀ and KKᵀ once on the tensor cores
//                           (split as below), then for the value heads of the key
//                           head, two at a time: A = strict_lower((βK)Kᵀ ⊙ D), P = (QKᵀ) ⊙ D
//                           (lower, with the diagonal) and T = (I+A)⁻¹ diag(β) by forward
//                           substitution on the CUDA cores, a thread per column of T
//   deltanet_chunk_scan     a block per (value head, 32 state columns) walking the chunks in order,
//                           the state slice f32 in mma accumulators, mma.sync m16n8k8 tf32. The WY
//                           form's W = (I+A)⁻¹(βK ⊙ e^G) and U = (I+A)⁻¹(βV) give
//                              V' = U − W S = T (V − e^G ⊙ (K S));  O = e^G ⊙ (Q S) + P V';
//                              S  = e^{G_L} S + Kᵀ (e^{G_L − G} ⊙ V')
//                           so neither W nor U is formed. The products the state depends on split
//                           their tf32 operands in a high and a low part (3 products: a_hi b_hi +
//                           a_hi b_lo + a_lo b_hi), which keeps the state at the f32 scan's
//                           accuracy; Q S and P V' only make the output and are plain tf32 (about
//                           3e-4 relative, below the bf16 rounding of the next matrix product's
//                           input, and not carried to later chunks); `split_tf32 = false` makes
//                           every product of this kernel plain.
// Rows past the end of the last chunk act as β = 0, log decay = 0, zero q, k, v: they change nothing.
//
// Tests: tests/cuda/deltanet_cuda_test.cpp (DeltaNet.ChunkedScanMatchesCpu) against deltanet_scan_head.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/deltanet/deltanet_cuda.h"

namespace qwick::cuda {

constexpr int kDeltaNetChunk = 64;

// Shapes the chunked form handles: Dk 64 or 128, Dv a multiple of 32, row strides and head
// offsets 16-byte aligned (ld and ld_out multiples of 4). Otherwise use deltanet_scan.
bool deltanet_chunked_supported(const DeltaNetScanArgs& a);

// Floats of device workspace deltanet_chunked_scan needs for a chunk of n rows.
int64_t deltanet_chunked_workspace_floats(int64_t n, int Hv);

void deltanet_chunked_scan(const DeltaNetScanArgs& a, float* workspace, cudaStream_t stream,
                           bool split_tf32 = true);

}  // namespace qwick::cuda
