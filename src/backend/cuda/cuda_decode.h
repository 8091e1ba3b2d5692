// The decode step: every kernel of one token's forward pass, from the embedding to the token chosen
// on the device, on the context's stream.
//
// The whole step is one CUDA graph per DeltaNet state set (CudaSequence::live), captured at the first
// decode and replayed (CudaOptions::graph off: the kernels launched one by one). It reads the input
// token and the position from device memory; its last kernel, the sampler (sample_cuda.h), writes
// the chosen token into that input slot, advances the position, and stores the token in mapped host
// memory, so the host only reads it there (decode() copies the logits back instead). With the token
// chosen on the device (decode_sampled), the next step is launched before the token comes back
// (CudaOptions::step_ahead), and dropped if the caller goes another way: it wrote its DeltaNet
// states into the set the sequence does not hold and its KV rows past the sequence's end.
//
// The sampler's draws are numbered from the sequence's last prefill or reset, so the same prompt,
// sampling parameters and seed draw the same numbers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_state.h"
#include "kernels/sample/sample_cuda.h"

namespace qwick::cuda {

class CudaDecodeStep {
 public:
  CudaDecodeStep(CudaContext& ctx, CudaSequence& seq);
  ~CudaDecodeStep();
  CudaDecodeStep(const CudaDecodeStep&) = delete;
  CudaDecodeStep& operator=(const CudaDecodeStep&) = delete;

  // Appends `token` (checked by the caller) and copies its logits into `logits` [vocab].
  void decode(int32_t token, std::span<float> logits);
  // Appends `token` and returns the token the device chose in *next (Backend::decode_sampled).
  void decode_sampled(int32_t token, const SamplingParams& s, int32_t* next);

  // The step decode_sampled launched ahead is not wanted. It runs anyway, but it wrote its DeltaNet
  // states into the set the sequence does not hold and its KV rows past the sequence's end, where the
  // next step writes them again; what else it moved on the device goes back: the position counter,
  // the sampler's draw count and the input slot.
  void drop_step_ahead();
  // The device's position counter set to the sequence's position.
  void set_device_position();
  // A new sequence numbers its draws from 0.
  void restart_draws();
  // The device's input slot no longer holds a token the host knows (a prefill or restore came between).
  void forget_token() { device_token_ = -1; }

 private:
  // The step's input token into the device's slot, unless the slot holds it (the last step chose it).
  void put_token(int32_t token);
  // Enqueues one step for the token in the device's slot at the device's position, from the DeltaNet
  // states of set seq.live into the other set; commit_step then makes it the sequence's.
  void launch_step();
  void commit_step();
  // token_ready_[slot] recorded after the step, whose sampler stored its token in host_token_[slot].
  void record_token_ready(int slot);
  void set_device_draws();
  // The decode step from the DeltaNet states of set seq.live, captured into a graph.
  cudaGraphExec_t capture_step();
  // Every kernel of one decode step, in order (cuda_layers.h: each RMSNorm folded into the products
  // that read it unless CudaOptions::fusion is off).
  void enqueue_step();

  CudaContext& ctx_;
  CudaSequence& seq_;
  cudaGraphExec_t graph_[2] = {};    // the decode step from DeltaNet state set 0, and from set 1
  cudaEvent_t token_ready_[2] = {};  // a step's chosen token is in host_token_[slot]
  // Mapped host memory [2]: a step from set s stores its chosen token in slot s (two steps in flight).
  int32_t* host_token_ = nullptr;
  int32_t* mapped_token_ = nullptr;                // host_token_ as the device addresses it
  int32_t host_token_in_ = 0, host_position_ = 0;  // sources of small host-to-device copies
  int32_t device_token_ = -1;                      // the token the device's input slot holds, or -1
  bool ahead_ = false;  // a step is queued past the position for ahead_token_ (the last token returned)
  int32_t ahead_token_ = -1;
  SamplingState sampling_{};
  // The device's draw count after the committed steps, from the sequence's last prefill or reset.
  uint64_t draws_ = 0;
};

}  // namespace qwick::cuda
