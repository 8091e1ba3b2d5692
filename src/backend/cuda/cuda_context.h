// What every part of the CUDA backend works through: the model's weights on the GPU, the streams, the
// fixed scratch buffers of a decode step and those of a prefill chunk, the debug switches
// (cuda_options.h), and the helpers that call the GEMV and GEMM kernels with this backend's settings.
// The layer functions (cuda_layers.h), the decode step (cuda_decode.h) and the Backend methods
// (cuda_backend.cpp) take it as the CPU backend's take CpuContext.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "backend/backend.h"
#include "backend/cuda/cuda_options.h"
#include "backend/cuda/cuda_weights.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/stage_timer.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/matmul_cuda/matmul_cuda.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/sample/sample_cuda.h"
#include "model/config.h"

namespace qwick {
struct Model;
}

namespace qwick::cuda {

inline constexpr int64_t kLogitRowsPerPass = 256;  // prefill with every row's logits: lm_head rows per GEMM

// Fixed buffers of one decode step (the graph captures their addresses).
struct DecodeScratch {
  int32_t* token;     // [1] the step's input; the sampler writes the next one here
  int32_t* position;  // [1] position of the input token
  SamplingState* sampling;
  float *x, *normed;                                // [H]
  float* proj;                                      // [4, proj_stride]: the stacked projections of a mixer
  float *conv, *beta, *decay, *dn_out, *dn_normed;  // DeltaNet
  float *q, *partial, *att_out;                     // attention
  float* router;                                    // [E + 1]: router logits, then the shared gate logit
  int32_t* route_counter;                           // [1] the fused router's block count (moe_decode)
  unsigned long long* moe_sync;                     // [layers][kMoeSyncWords]: layer L's MoeDecodeArgs::sync
  int32_t *ids, *gate_up_index, *down_index;
  float *weights, *gate_up, *act, *down;
  float* logits;                       // [V]
  SamplePartial* sample_partials;      // [kSampleMaxBlocks] the sampler's first pass
  int32_t* sample_counter;             // [1] its block count
  SampleCandidate* sample_candidates;  // [kSampleMaxBlocks · kSampleBlockCandidates] its top-k candidates
  int32_t* sample_candidate_counts;    // [kSampleMaxBlocks]
};

// Buffers of one prefill chunk of up to `rows` rows.
struct PrefillScratch {
  int32_t* tokens;
  float* hidden;     // [n, H]
  uint16_t* normed;  // [n, H] bf16
  float* att_in;     // [n, q_proj_rows + 2·kv rows]: q (and gate) | k | v
  uint16_t *q16, *att16;
  float* dn_in;                         // [n, conv channels + Vt + 2·Hv]: qkv | z | b | a
  float *conv, *beta, *decay, *dn_out;  // DeltaNet
  float* dn_chunked;                    // deltanet_chunked_scan's workspace
  uint16_t* dn16;
  float* router;  // [n, route_ld()]: logits, then the shared gate's logit
  int32_t* ids;
  float* weights;
  MoeGrouping grouping;
  float *gate_up, *down, *shared_gate_up, *shared_down;
  uint16_t *act, *shared_act;
  float* logits;  // [min(rows, kLogitRowsPerPass), V]
};

class CudaContext {
 public:
  // Selects GPU 0, makes the streams, uploads the weights and allocates the decode step's scratch.
  CudaContext(const Model& model, const BackendOptions& backend_options);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  const ModelConfig& cfg;
  const int64_t max_context;
  const CudaOptions options;  // BackendOptions::cuda_off
  const bool int16;           // GemvArgs::i16, MoeDecodeArgs::i16: int16 decode activations unless exact
  const KvDtype kv_dtype;     // BackendOptions::kv_dtype: bf16 or q8
  cudaStream_t stream = nullptr;
  cudaStream_t side = nullptr;                 // prefill work beside stream's (the shared expert)
  cudaEvent_t fork = nullptr, join = nullptr;  // side starts after / stream waits for side
  CudaModelWeights weights;
  StageTimer timer;
  DecodeScratch d{};
  PrefillScratch p{};
  int attention_splits = 1;    // decode attention: context ranges per kv head
  bool chunk_overlap = false;  // prefill_overlap() of the chunk running

  void sync() { check(cudaStreamSynchronize(stream), "cuda stream"); }
  // The bf16 copies of the dense matrices (add_prefill_copies), after the weights and the sequence
  // state, where they leave room for the prefill's scratch (1.4 GB at 4096-row chunks of the full
  // model) and more: a GPU that holds the model without them runs without them.
  void make_prefill_copies();
  // The prefill scratch for chunks of up to `rows` rows (kept, and grown when a longer chunk comes).
  void ensure_prefill_rows(int64_t rows);
  size_t scratch_bytes() const { return decode_buf_.size() + prefill_buf_.size(); }

  // d.proj's row stride: the widest projection a mixer stacks there.
  int64_t proj_stride() const;
  int64_t imax() const { return std::max(cfg.expert_dim, cfg.shared_expert_dim); }
  // Row stride of the prefill router's output: E logits and the shared gate's, rounded up to whole
  // 16-byte pieces so the GEMM stores rows as such.
  int64_t route_ld() const { return (int64_t{cfg.n_experts} + 1 + 3) / 4 * 4; }

  // The norm weight when the decode projections fuse it (they then read the residual d.x), else null
  // (an rms_norm kernel writes d.normed first: CudaOptions::fusion off).
  const float* fused_norm(const float* weight) const { return options.fusion ? weight : nullptr; }
  const float* mixer_input(const float* norm) const { return norm ? d.x : d.normed; }

  // Prefill kernels on stream as programmatic dependent launches (set per chunk): serial while stages
  // are timed (the timer's events between them keep each stage's own time), and for chunks under
  // kOverlapMinRows: 512- and 1K-row chunks lost 3-4 % with them, 2K gained 1 %, 4K and 32K 0.3-0.4 %.
  // (Likely, not measured: most launches of short chunks are under a wave, and blocks placed early
  // pile up on the SMs that free first instead of spreading over all of them.)
  static constexpr int64_t kOverlapMinRows = 2048;
  bool prefill_overlap() const { return chunk_overlap; }

  // ---- the GEMV calls (decode) ----
  // GemvArgs with this backend's settings; gemv_args(m) also names one matrix.
  GemvArgs gemv_settings() const;
  GemvArgs gemv_args(const DeviceMatrix& m) const;
  // y = m · x, or y += m · x; with `norm`, x is the residual stream and the product reads
  // RMSNorm(x) with that weight (fused into the gemv's load). `streamed`: GemvArgs::stream.
  void gemv_one(const DeviceMatrix& m, const float* x, float* y, bool accumulate, const float* norm = nullptr,
                bool streamed = false);
  GemvArgs gemv_of(const DeviceMatrix& m, const float* x, float* y, bool accumulate, const float* norm) const;
  // Problem p: mats[p] · x -> y + p·y_stride, one launch when the formats agree (the first entries of
  // `table`); `norm` as gemv_one; trigger_after_wait as GemvArgs's.
  void gemv_stack(std::initializer_list<DeviceMatrix> mats, const DeviceMatrix* table, const float* x,
                  float* y, int64_t y_stride, const float* norm = nullptr, bool trigger_after_wait = false);

  // ---- the GEMM calls (prefill) ----
  // The mixer's input projections of the normed rows p.normed, side by side in y ([n, ld], ld their
  // rows together; returns ld): one GEMM over their stacked matrix, or one per part when their
  // formats differ. The rows go to y in f32, or to y16 in bf16 where that is set.
  int64_t project_in(const DeviceMatrix& stacked, const DeviceMatrix& stacked16,
                     std::initializer_list<DeviceMatrix> parts, float* y, int64_t n, uint16_t* y16 = nullptr);
  // Whether an n-row GEMM reads the bf16 copy `copy` (add_prefill_copies; rows 0 without): where
  // gemm_tma takes it.
  bool reads_copy(const DeviceMatrix& copy, int64_t n) const {
    return copy.rows > 0 && gemm_tma_fills(copy.rows, n);
  }
  // The matrix an n-row GEMM of m reads: its copy where reads_copy, else m.
  DeviceMatrix prefill_matrix(const DeviceMatrix& m, const DeviceMatrix& copy, int64_t n) const {
    return reads_copy(copy, n) ? copy : m;
  }
  // On stream `s`, or `stream` when s is null (not the legacy default stream; then as a programmatic
  // dependent launch with prefill_overlap()).
  void gemm_one(const DeviceMatrix& m, const uint16_t* x, int64_t ldx, int64_t n, float* y, int64_t ldy,
                bool accumulate, cudaStream_t s = nullptr);

 private:
  void allocate_decode();

  DeviceBuffer decode_buf_, prefill_buf_;
  int64_t prefill_rows_ = 0;
};

}  // namespace qwick::cuda
