#include "backend/cuda/cuda_decode.h"

#include <variant>

#include "backend/cuda/cuda_layers.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/norm/norm_cuda.h"

namespace qwick::cuda {

CudaDecodeStep::CudaDecodeStep(CudaContext& ctx, CudaSequence& seq) : ctx_(ctx), seq_(seq) {
  for (cudaEvent_t& e : token_ready_)
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaHostAlloc(&host_token_, 2 * sizeof(int32_t), cudaHostAllocMapped), "cudaHostAlloc");
  check(cudaHostGetDevicePointer(&mapped_token_, host_token_, 0), "cudaHostGetDevicePointer");
  check(cudaMemcpyAsync(ctx_.d.sampling, &sampling_, sizeof sampling_, cudaMemcpyHostToDevice, ctx_.stream),
        "sampling");
  ctx_.sync();
}

CudaDecodeStep::~CudaDecodeStep() {
  if (ctx_.stream) cudaStreamSynchronize(ctx_.stream);  // a step run ahead may still be running
  for (cudaGraphExec_t g : graph_)
    if (g) cudaGraphExecDestroy(g);
  if (host_token_) cudaFreeHost(host_token_);
  for (cudaEvent_t e : token_ready_)
    if (e) cudaEventDestroy(e);
}

void CudaDecodeStep::decode(int32_t token, std::span<float> logits) {
  drop_step_ahead();
  put_token(token);
  launch_step();
  commit_step();
  check(
      cudaMemcpyAsync(logits.data(), ctx_.d.logits, sizeof(float) * static_cast<size_t>(ctx_.cfg.vocab_size),
                      cudaMemcpyDeviceToHost, ctx_.stream),
      "decode: logits");
  ctx_.sync();
}

void CudaDecodeStep::decode_sampled(int32_t token, const SamplingParams& s, int32_t* next) {
  if (!draws_as(sampling_, s)) {
    drop_step_ahead();
    sampling_ = sampling_state(s, draws_);
    check(cudaMemcpyAsync(ctx_.d.sampling, &sampling_, sizeof sampling_, cudaMemcpyHostToDevice, ctx_.stream),
          "sampling");
    ctx_.sync();  // sampling_ is pageable host memory the copy reads
  }
  const int slot = seq_.live;  // where this step's token comes back
  if (ahead_ && token == ahead_token_) {
    ahead_ = false;  // the last call launched this token's step already
  } else {
    drop_step_ahead();
    put_token(token);
    launch_step();
    record_token_ready(slot);
  }
  commit_step();
  // The next step goes in before this one's token is back to the host; it reads the token from the
  // device's input slot, so the GPU runs on while the host looks at this token. A stop, a cancel or
  // anything but that token next drops it (drop_step_ahead). Not at the context's end.
  if (ctx_.options.step_ahead && seq_.position < ctx_.max_context) {
    launch_step();
    record_token_ready(seq_.live);
    ahead_ = true;
  }
  check(cudaEventSynchronize(token_ready_[slot]), "decode: token");
  *next = host_token_[slot];
  ahead_token_ = *next;
  device_token_ = ahead_ ? -1 : *next;
}

void CudaDecodeStep::drop_step_ahead() {
  if (!ahead_) return;
  ahead_ = false;
  set_device_position();
  set_device_draws();
  device_token_ = -1;
}

void CudaDecodeStep::set_device_position() {
  host_position_ = static_cast<int32_t>(seq_.position);
  check(
      cudaMemcpyAsync(ctx_.d.position, &host_position_, sizeof(int32_t), cudaMemcpyHostToDevice, ctx_.stream),
      "position");
}

void CudaDecodeStep::restart_draws() {
  draws_ = 0;
  set_device_draws();
}

void CudaDecodeStep::set_device_draws() {
  check(cudaMemcpyAsync(&ctx_.d.sampling->draws, &draws_, sizeof draws_, cudaMemcpyHostToDevice, ctx_.stream),
        "sampling draws");
}

void CudaDecodeStep::put_token(int32_t token) {
  if (token == device_token_) return;
  host_token_in_ = token;
  check(cudaMemcpyAsync(ctx_.d.token, &host_token_in_, sizeof(int32_t), cudaMemcpyHostToDevice, ctx_.stream),
        "token");
}

void CudaDecodeStep::launch_step() {
  if (ctx_.options.graph) {
    cudaGraphExec_t& graph = graph_[seq_.live];
    if (!graph) graph = capture_step();
    check(cudaGraphLaunch(graph, ctx_.stream), "cudaGraphLaunch");
  } else {
    enqueue_step();
  }
}

void CudaDecodeStep::commit_step() {
  ++seq_.position;
  seq_.live ^= 1;
  ++draws_;            // every step's sampler draws, wanted or not
  device_token_ = -1;  // until decode_sampled reads back what the step chose
}

void CudaDecodeStep::record_token_ready(int slot) {
  check(cudaEventRecord(token_ready_[slot], ctx_.stream), "decode: event");
}

cudaGraphExec_t CudaDecodeStep::capture_step() {
  cudaGraph_t graph = nullptr;
  check(cudaStreamBeginCapture(ctx_.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    enqueue_step();
  } catch (...) {
    cudaStreamEndCapture(ctx_.stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  check(cudaStreamEndCapture(ctx_.stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check(status, "cudaGraphInstantiate");
  return exec;
}

void CudaDecodeStep::enqueue_step() {
  const ModelConfig& cfg = ctx_.cfg;
  const DecodeScratch& d = ctx_.d;
  const CudaModelWeights& weights = ctx_.weights;
  const int64_t H = cfg.hidden_size;
  const float eps = cfg.rms_norm_eps;
  embed_rows(weights.embed, d.token, 1, d.x, ctx_.stream);
  for (int L = 0; L < cfg.n_layers(); ++L) {
    const CudaLayerWeights& lw = weights.layers[static_cast<size_t>(L)];
    const int slot = seq_.slot[static_cast<size_t>(L)];
    const float* input_norm = ctx_.fused_norm(lw.input_norm);
    if (!input_norm) rms_norm_rows(d.x, 1, H, lw.input_norm, eps, d.normed, nullptr, ctx_.stream);
    if (const auto* att = std::get_if<CudaAttentionWeights>(&lw.mixer))
      decode_attention_layer(ctx_, seq_, *att, slot, input_norm);
    else
      decode_deltanet_layer(ctx_, seq_, std::get<CudaDeltaNetWeights>(lw.mixer), slot, input_norm);
    decode_moe_layer(ctx_, lw, L);
  }
  const float* final_norm = ctx_.fused_norm(weights.final_norm);
  if (!final_norm) rms_norm_rows(d.x, 1, H, weights.final_norm, eps, d.normed, nullptr, ctx_.stream);
  ctx_.gemv_one(weights.lm_head, final_norm ? d.x : d.normed, d.logits, false, final_norm, /*streamed=*/true);
  sample_token(
      SampleArgs{d.logits, cfg.vocab_size, d.sampling, d.token, d.position, d.sample_partials,
                 d.sample_counter, d.sample_candidates, d.sample_candidate_counts, mapped_token_ + seq_.live},
      ctx_.stream);
}

}  // namespace qwick::cuda
