// The model's weights on the GPU, uploaded once in their file format (see DeviceMatrix in
// kernels/matmul_cuda/matmul_cuda.h): affine 4/8-bit codes with bf16 scales and biases, dense matrices
// as bf16 (f32 and f16 files are converted to bf16 at upload), the small f32 vectors as the CPU
// backend holds them. One struct per layer kind, mirroring model/weights.h; the gemv/gemm tables
// (several matrices read by one launch) are device arrays of DeviceMatrix.
#pragma once

#include <cuda_runtime.h>

#include <variant>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "kernels/matmul_cuda/matmul_cuda.h"
#include "model/model.h"

namespace qwick::cuda {

// With the output gate, q_proj's rows are uploaded apart: every head's query rows (q), then every
// head's gate rows (gate); the file interleaves them per head (model-spec.md §2.3).
struct CudaAttentionWeights {
  DeviceMatrix q, k, v, o;        // shapes as AttentionWeights, but q the query rows only
  DeviceMatrix gate;              // [n_heads · head_dim, hidden] (rows 0 without the output gate)
  DeviceMatrix in_proj;           // q|gate|k|v as one matrix (rows 0: their formats differ)
  const DeviceMatrix* qkv_table;  // device [4]: q, k, v, gate (one gemv launch)
  const float* q_norm;            // [head_dim], 1 + w
  const float* k_norm;
  DeviceMatrix in_proj16{}, o16{};  // bf16 copies for prefill (add_prefill_copies); rows 0 without
};

struct CudaDeltaNetWeights {
  DeviceMatrix qkv, z, b, a, out;     // shapes as DeltaNetWeights
  DeviceMatrix in_proj;               // qkv|z|b|a as one matrix (rows 0: their formats differ)
  const DeviceMatrix* proj_table;     // device [4]: qkv, b, a, z (the decode step may carry z)
  const float* conv;                  // [channels, K]
  const float* a_neg;                 // [Hv]
  const float* dt_bias;               // [Hv]
  const float* norm;                  // [Dv]
  DeviceMatrix in_proj16{}, out16{};  // bf16 copies for prefill (add_prefill_copies); rows 0 without
};

struct CudaMoeWeights {
  DeviceMatrix router, shared_gate;  // [E, hidden], [1, hidden]
  const DeviceMatrix* route_table;   // device [2]: router, shared_gate
  DeviceMatrix route16;              // [E + 1, hidden] bf16: the router's rows, then shared_gate's (prefill)
  DeviceMatrix shared_gate_proj, shared_up, shared_down;
  // bf16 copies for prefill (add_prefill_copies): gate and up stacked in 8-row runs, down; rows 0 without
  DeviceMatrix shared_gate_up16, shared_down16;
  const DeviceMatrix* experts;  // device [(E + 1) · 3]: gate, up, down of expert e at 3e; shared at 3E
  WeightFormat expert_format;   // of every routed expert matrix
  int expert_group_size = 0;    // of every routed expert matrix (0: they differ)
};

struct CudaLayerWeights {
  const float* input_norm;  // [hidden], 1 + w
  const float* post_norm;
  std::variant<CudaDeltaNetWeights, CudaAttentionWeights> mixer;
  CudaMoeWeights moe;
};

struct CudaModelWeights {
  DeviceMatrix embed, lm_head;
  const float* final_norm;
  const float* rope_inv_freq;  // [rotary_dim / 2], as RopeTable computes it
  std::vector<CudaLayerWeights> layers;
  int64_t bytes = 0;  // device bytes of all of the above

  DeviceBuffer storage, tables, copies;
};

// Uploads every matrix and vector the forward pass reads. Throws Error naming the tensor when a
// matrix's shape does not suit the kernels (inputs a multiple of 64, groups a multiple of 32).
CudaModelWeights upload_weights(const Model& model, cudaStream_t stream);

// bf16 copies of each mixer's stacked input projections and output projection and of the shared
// expert, decoded on the GPU from the uploaded codes (decode_bf16) into `copies`: the prefill reads them
// through gemm_tma, whose warps then only issue products (2.8 GB for the full model). A matrix already
// in bf16 is its own copy; an input projection whose parts could not be stacked gets none, nor a
// shared gate and up whose shapes differ or whose rows are not a multiple of 64. Makes none when they
// would take more than `budget` bytes (the prefill then reads the codes, as without copies).
void add_prefill_copies(CudaModelWeights& w, size_t budget, cudaStream_t stream);

// One matrix on its own (tests), through the same upload path.
struct UploadedMatrix {
  DeviceBuffer storage;
  DeviceMatrix m;
};
UploadedMatrix upload_matrix(const WeightMatrix& w, cudaStream_t stream);

// True when the matrices can share one gemv/gemm launch (same format).
bool same_format(const DeviceMatrix& a, const DeviceMatrix& b);

}  // namespace qwick::cuda
