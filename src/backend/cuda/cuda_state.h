// Sequence state on the GPU: what a conversation carries from one token to the next, allocated up
// front for the whole context (so a captured decode graph stays valid):
//
//   attention layers  KV cache [n_kv_heads, capacity, head_dim] for K and for V, capacity = the
//                     context size: bf16 rows, or q8 bytes (kv_q8.h) with their f32 scales
//                     [n_kv_heads, capacity] beside (prefill's attention then reads a bf16 copy)
//   DeltaNet layers   conv window [K-1, channels] and recurrent state [Hv, Dv, Dk], f32, twice: a
//                     decode step reads one set and writes the other, so a step run ahead can be
//                     dropped (cuda_decode.h)
//
// A snapshot (CudaSnapshot) is the state copied within device memory.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/device_buffer.h"
#include "model/config.h"

namespace qwick::cuda {

// One attention layer's KV cache (attention_cuda.h): bf16 rows, or q8 bytes and their scales.
struct KvLayer {
  void* k;
  void* v;
  float* k_scale;
  float* v_scale;
};

class CudaSequence {
 public:
  CudaSequence(const ModelConfig& cfg, int64_t max_context, KvDtype kv_dtype);

  size_t conv_state_floats() const {
    return static_cast<size_t>(cfg_.conv_kernel - 1) * static_cast<size_t>(cfg_.conv_channels());
  }
  size_t recurrent_state_floats() const {
    return static_cast<size_t>(cfg_.lin_n_v_heads) * static_cast<size_t>(cfg_.lin_v_dim) *
           static_cast<size_t>(cfg_.lin_k_dim);
  }
  bool kv_q8() const { return kv_dtype_ == KvDtype::kQ8; }
  size_t bytes() const { return buf_.size(); }

  // Zeroes the DeltaNet states of set `live` on the stream and starts from position 0 (the KV rows
  // past the position are never read).
  void clear(cudaStream_t stream);
  // Bytes of a snapshot at `positions`: per attention layer the K then V rows [0, positions) of each
  // kv head (and a q8 cache's scales), then per DeltaNet layer the conv window and recurrent state.
  size_t snapshot_bytes(int64_t positions) const;
  // Copies the state between the live buffers and a packed snapshot region, on the stream (synchronised).
  void copy(uint8_t* packed, int64_t positions, bool to_snapshot, cudaStream_t stream) const;

  int64_t position = 0;
  std::vector<KvLayer> kv;                    // per attention layer
  std::pair<uint16_t*, uint16_t*> kv_bf16{};  // q8: K and V as bf16, for prefill's attention
  // Two sets, per DeltaNet layer: conv window, recurrent S. Set `live` holds the sequence; prefill
  // updates it in place, a decode step writes the other and commits by swapping them.
  std::array<std::vector<std::pair<float*, float*>>, 2> deltanet;
  int live = 0;
  std::vector<int> slot;  // per layer: index into kv or into a set of deltanet

 private:
  size_t kv_rows() const { return static_cast<size_t>(cfg_.n_kv_heads) * static_cast<size_t>(max_context_); }
  size_t kv_elems() const { return kv_rows() * static_cast<size_t>(cfg_.head_dim); }
  size_t kv_elem_bytes() const { return kv_value_bytes(kv_dtype_); }

  const ModelConfig& cfg_;
  int64_t max_context_;
  KvDtype kv_dtype_;
  DeviceBuffer buf_;
};

// A sequence state copied within device memory (CudaSequence::copy's layout).
class CudaSnapshot final : public SequenceSnapshot {
 public:
  int64_t position() const override { return position_; }
  size_t bytes() const override { return buffer.size(); }

  const void* owner = nullptr;
  int64_t position_ = 0;
  DeviceBuffer buffer;
};

}  // namespace qwick::cuda
