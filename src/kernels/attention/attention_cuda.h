// Gated full attention on the GPU (model-spec.md §2.3, §2.4), KV cache [n_kv_heads, capacity, head_dim]
// per layer in bf16, or for decode and the append in q8 (kv_q8.h: a byte a value, with the rows' scales
// [n_kv_heads, capacity] beside; prefill reads a bf16 copy, kv_q8_to_bf16), f32 softmax:
//
//   attention_prep     per token: q and k RMSNorm (1 + w) per head, partial NeoX RoPE on the first
//                      rotary_dim dims, q written out (f32 for decode, bf16 for prefill), k and v
//                      rounded to bf16 (or q8) into the cache at their positions
//   attention_decode   one query row against the cache, flash-decoding: the context is cut into
//                      `splits` ranges; a block per (kv head, range) holds the kv head's G = nq/nkv
//                      query heads, so each K/V row is read once for all of them (on the tensor
//                      cores, the heads as the n side of the products); partial (max, sum,
//                      unnormalised output) per range, then a combine that also applies the sigmoid
//                      output gate (whose rows it can compute itself while the ranges run). The
//                      context length comes from the device (graph replays).
//   attention_prefill  causal attention of a chunk's rows (positions pos0 ..) over the cache on the
//                      tensor cores (flash attention: 64 query rows per head, 64-key tiles, online
//                      softmax, P·V from registers), output gate fused, bf16 out: on warpgroup
//                      products with the heads of a kv head sharing its tiles
//                      (attention_prefill_wgmma_cuda.cu), or for head_dim 32 on mma.sync
//                      (attention_prefill_cuda.cu).
//
// Tests: tests/cuda/attention_cuda_test.cpp (Attention.*) against rms_norm/apply_rope and `attend`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/matmul_cuda/matmul_cuda.h"

namespace qwick::cuda {

struct AttentionPrepArgs {
  const float* qg;  // q_proj rows [n, ld_qg]: head h at h·q_stride (q, then its gate when gated)
  int64_t ld_qg, q_stride;
  const float* k;  // [n, ld_kv], kv head j at j·head_dim
  const float* v;
  int64_t ld_kv;
  int64_t n;
  int64_t pos0;          // position of row 0 ...
  const int32_t* d_pos;  // ... plus *d_pos when non-null (decode: the device's position counter)
  int n_heads, n_kv_heads, head_dim, rotary_dim;
  const float* q_norm;  // [head_dim], 1 + w
  const float* k_norm;
  float eps;
  const float* inv_freq;  // [rotary_dim / 2]
  float* q_f32;           // one of the two: [n, n_heads, head_dim]
  uint16_t* q_bf16;
  void* k_cache;  // [n_kv_heads, capacity, head_dim]: bf16, or q8 bytes where k_scale is set
  void* v_cache;
  int64_t capacity;
  bool overlap = false;      // programmatic dependent launch (cuda_launch.h)
  float* k_scale = nullptr;  // q8: the rows' scales [n_kv_heads, capacity]
  float* v_scale = nullptr;
};
void attention_prep(const AttentionPrepArgs& a, cudaStream_t stream);

struct AttentionDecodeArgs {
  const float* q;       // [n_heads, head_dim]
  const void* k_cache;  // bf16, or q8 bytes where k_scale is set (AttentionPrepArgs)
  const void* v_cache;
  int64_t capacity;
  const int32_t* d_pos;  // the row's position: attends to [0, *d_pos]
  int n_heads, n_kv_heads, head_dim;
  float scale;
  int splits;
  float* partial;     // [n_heads, splits, head_dim + 2] scratch
  const float* gate;  // head h's gate at gate + h·gate_stride, or null (no output gate)
  int64_t gate_stride;
  float* out;  // [n_heads · head_dim]
  // Programmatic dependent launches (cuda_launch.h). The kernel then reads *d_pos and the cache rows
  // before it, which must not come from the kernels it overlaps (decode: from earlier steps), before
  // waiting for them; only the newest row (attention_prep's) and q after.
  bool overlap = false;
  // The output gate's rows computed by the combine instead of read from `gate` (left null): head h,
  // dim d is gated by row h·head_dim + d of gate_proj · x', x' = RMSNorm(gate_x) with gate_norm (and
  // eps), or gate_x as it is when gate_norm is null (attention_gate_rows_fit). The combine's blocks
  // compute their rows before they wait for the splits, so gate_x must be complete when the combine
  // launches: with overlap, the kernel before the chain that ends in this one must let its successors
  // launch only after its own wait (GemvArgs::trigger_after_wait), gate_x being that kernel's input.
  DeviceMatrix gate_proj{};
  const float* gate_x = nullptr;
  const float* gate_norm = nullptr;
  float eps = 0.0f;
  const float* k_scale = nullptr;  // q8: the rows' scales [n_kv_heads, capacity]
  const float* v_scale = nullptr;
};
// Whether the combine can compute the output gate from `gate_proj` (4-bit, 8-bit or bf16, its input
// staged in 48 KB of shared memory).
bool attention_gate_rows_fit(const DeviceMatrix& gate_proj);
// Splits that fill the device in one wave: a block per (kv head, split), one block per multiprocessor.
int attention_decode_splits(int n_kv_heads);
void attention_decode(const AttentionDecodeArgs& a, cudaStream_t stream);

struct AttentionPrefillArgs {
  const uint16_t* q;  // [n, n_heads, head_dim] bf16
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  int64_t capacity;
  int64_t n, pos0;                    // rows at positions [pos0, pos0 + n); the cache holds [0, pos0 + n)
  int n_heads, n_kv_heads, head_dim;  // head_dim in {32, 64, 128, 256}
  float scale;
  const float* gate;  // row t, head h: gate + t·ld_gate + h·gate_stride; null: no output gate
  int64_t ld_gate, gate_stride;
  uint16_t* out;         // [n, n_heads · head_dim] bf16
  bool overlap = false;  // a programmatic dependent launch (cuda_launch.h)
};
void attention_prefill(const AttentionPrefillArgs& a, cudaStream_t stream);

// Rows [0, rows) of every kv head of a q8 cache (bytes and scales [n_kv_heads, capacity, ·]) as bf16 into
// out [n_kv_heads, capacity, head_dim]: the copy prefill's attention reads, whose tensor-core tiles take
// bf16 (the values are the q8 ones, so prefill and decode attend to the same keys).
void kv_q8_to_bf16(const uint8_t* q8, const float* scale, int64_t rows, int n_kv_heads, int head_dim,
                   int64_t capacity, uint16_t* out, cudaStream_t stream);

}  // namespace qwick::cuda
