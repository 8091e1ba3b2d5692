// The CUDA backend (see cuda_backend.h): the Backend methods over its parts, all on one GPU:
//
//   cuda_context.h  weights, streams, scratch, the GEMV/GEMM call helpers, CudaOptions
//   cuda_state.h    the sequence state (KV cache, DeltaNet states) and its snapshots
//   cuda_layers.h   attention, DeltaNet and MoE layers, decode and prefill
//   cuda_decode.h   the decode step: one CUDA graph, the token chosen on the device, a step run ahead
//
// prefill runs in chunks (forward_chunk below): f32 residual stream, bf16 activations into the
// tensor-core GEMMs (the router too, as the CPU's prefill), the dense matrices from bf16 copies where a
// chunk is long enough (add_prefill_copies, gemm_tma), every MoE grouping step on the device, the
// shared expert on a second stream beside the routed ones. decode runs one row through the GEMV
// kernels (cuda_decode.h).
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_decode.h"
#include "backend/cuda/cuda_layers.h"
#include "backend/cuda/cuda_state.h"
#include "core/error.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/norm/norm_cuda.h"
#include "model/model.h"

namespace qwick {
namespace cuda {
namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend(const Model& model, const BackendOptions& options)
      : ctx_(model, options), seq_(ctx_.cfg, ctx_.max_context, ctx_.kv_dtype), step_(ctx_, seq_) {
    ctx_.make_prefill_copies();
    reset();
  }

  std::string name() const override { return "cuda"; }
  int64_t position() const override { return seq_.position; }
  int64_t max_context() const override { return ctx_.max_context; }

  void reset() override {
    step_.drop_step_ahead();
    seq_.clear(ctx_.stream);
    step_.set_device_position();
    step_.restart_draws();
    step_.forget_token();
    ctx_.sync();
  }

  std::unique_ptr<SequenceSnapshot> snapshot() const override {
    auto s = std::make_unique<CudaSnapshot>();
    s->owner = this;
    s->position_ = seq_.position;
    s->buffer = DeviceBuffer(seq_.snapshot_bytes(seq_.position));
    seq_.copy(s->buffer.data(), seq_.position, /*to_snapshot=*/true, ctx_.stream);
    return s;
  }

  void restore(const SequenceSnapshot& snapshot) override {
    const auto* s = dynamic_cast<const CudaSnapshot*>(&snapshot);
    if (s == nullptr || s->owner != this) fail("restore: the snapshot was taken from another backend");
    step_.drop_step_ahead();
    seq_.copy(s->buffer.data(), s->position_, /*to_snapshot=*/false, ctx_.stream);
    seq_.position = s->position_;
    step_.set_device_position();
    step_.forget_token();
    ctx_.sync();
  }

  // Prefill feeds bf16 activations to the tensor cores, decode keeps f32 (or int16) ones.
  bool decode_matches_prefill() const override { return false; }

  BackendMemory memory() const override {
    BackendMemory m;
    m.weights = ctx_.weights.bytes;
    m.state = static_cast<int64_t>(seq_.bytes());
    m.scratch = static_cast<int64_t>(ctx_.scratch_bytes());
    m.peak = device_bytes_peak();
    m.device_used = device_used_peak_;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) m.device_free = static_cast<int64_t>(free_b);
    return m;
  }

  void prefill(std::span<const int32_t> tokens, std::span<float> logits,
               const PrefillOptions& options) override {
    const size_t V = static_cast<size_t>(ctx_.cfg.vocab_size);
    check_tokens(tokens);
    if (options.chunk <= 0) fail("prefill chunk must be positive, got {}", options.chunk);
    const size_t need = options.all_logits ? tokens.size() * V : V;
    if (logits.size() < need) fail("prefill: logits buffer holds {} floats, needs {}", logits.size(), need);
    if (tokens.empty()) return;
    step_.drop_step_ahead();
    step_.restart_draws();
    ctx_.ensure_prefill_rows(std::min<int64_t>(options.chunk, static_cast<int64_t>(tokens.size())));
    for (size_t done = 0; done < tokens.size();) {
      const size_t n = std::min(tokens.size() - done, static_cast<size_t>(options.chunk));
      const bool last = done + n == tokens.size();
      ctx_.timer.begin(options.stage_ms, ctx_.stream);
      forward_chunk(tokens.data() + done, static_cast<int64_t>(n), options.observer);
      ctx_.timer.mark("lm_head");
      if (options.all_logits)
        chunk_logits_all(static_cast<int64_t>(n), logits.data() + done * V);
      else if (last)
        chunk_logits_last(static_cast<int64_t>(n), logits.data());
      ctx_.timer.end();
      done += n;
    }
    step_.set_device_position();
    step_.forget_token();
    ctx_.sync();
    note_device_used();
  }

  void decode(int32_t token, std::span<float> logits) override {
    check_tokens(std::span<const int32_t>(&token, 1));
    if (logits.size() < static_cast<size_t>(ctx_.cfg.vocab_size)) fail("decode: logits buffer too small");
    step_.decode(token, logits);
  }

  bool decode_sampled(int32_t token, const SamplingParams& s, int32_t* next) override {
    check_tokens(std::span<const int32_t>(&token, 1));
    step_.decode_sampled(token, s, next);
    return true;
  }

 private:
  void note_device_used() {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
      device_used_peak_ = std::max<int64_t>(device_used_peak_, static_cast<int64_t>(total_b - free_b));
  }

  void check_tokens(std::span<const int32_t> tokens) const {
    const ModelConfig& cfg = ctx_.cfg;
    for (int32_t t : tokens)
      if (t < 0 || t >= cfg.vocab_size)
        fail("token id {} is out of range (vocab size {})", t, cfg.vocab_size);
    if (seq_.position + static_cast<int64_t>(tokens.size()) > ctx_.max_context)
      fail("context overflow: {} tokens in the sequence + {} new exceed the context size {}", seq_.position,
           tokens.size(), ctx_.max_context);
  }

  // One chunk of n rows through every layer, the states of set seq_.live updated in place.
  void forward_chunk(const int32_t* tokens, int64_t n, const LayerObserver& observer) {
    const ModelConfig& cfg = ctx_.cfg;
    const PrefillScratch& p = ctx_.p;
    const CudaModelWeights& weights = ctx_.weights;
    const int64_t H = cfg.hidden_size;
    ctx_.chunk_overlap = ctx_.options.overlap && !ctx_.timer.active() && n >= CudaContext::kOverlapMinRows;
    const float eps = cfg.rms_norm_eps;
    check(cudaMemcpyAsync(p.tokens, tokens, sizeof(int32_t) * static_cast<size_t>(n), cudaMemcpyHostToDevice,
                          ctx_.stream),
          "prefill: tokens");
    ctx_.timer.mark("embed, norms");
    embed_rows(weights.embed, p.tokens, n, p.hidden, ctx_.stream);
    if (observer) observe(observer, 0, n);
    bool normed = false;  // p.normed holds this layer's input norm (the combine before computed it)
    for (int L = 0; L < cfg.n_layers(); ++L) {
      const CudaLayerWeights& lw = weights.layers[static_cast<size_t>(L)];
      const int slot = seq_.slot[static_cast<size_t>(L)];
      ctx_.timer.mark("embed, norms");
      if (!normed)
        rms_norm_rows(p.hidden, n, H, lw.input_norm, eps, nullptr, p.normed, ctx_.stream,
                      ctx_.prefill_overlap());
      if (const auto* att = std::get_if<CudaAttentionWeights>(&lw.mixer))
        prefill_attention_layer(ctx_, seq_, *att, slot, n);
      else
        prefill_deltanet_layer(ctx_, seq_, std::get<CudaDeltaNetWeights>(lw.mixer), slot, n);
      ctx_.timer.mark("embed, norms");
      rms_norm_rows(p.hidden, n, H, lw.post_norm, eps, nullptr, p.normed, ctx_.stream,
                    ctx_.prefill_overlap());
      const bool last = L + 1 == cfg.n_layers();
      normed = !last && moe_combine_norms(H);
      prefill_moe_layer(ctx_, lw.moe, n,
                        normed ? weights.layers[static_cast<size_t>(L + 1)].input_norm : nullptr);
      if (observer) observe(observer, L + 1, n);
    }
    seq_.position += n;
  }

  void observe(const LayerObserver& observer, int stage, int64_t n) {
    std::vector<float> host(static_cast<size_t>(n * ctx_.cfg.hidden_size));
    check(cudaMemcpyAsync(host.data(), ctx_.p.hidden, host.size() * sizeof(float), cudaMemcpyDeviceToHost,
                          ctx_.stream),
          "observer");
    ctx_.sync();
    observer(stage, host.data(), n, seq_.position);
  }

  // Logits of every row of the chunk just run, into host memory.
  void chunk_logits_all(int64_t n, float* out) {
    const PrefillScratch& p = ctx_.p;
    const int64_t H = ctx_.cfg.hidden_size, V = ctx_.cfg.vocab_size;
    rms_norm_rows(p.hidden, n, H, ctx_.weights.final_norm, ctx_.cfg.rms_norm_eps, nullptr, p.normed,
                  ctx_.stream);
    for (int64_t r0 = 0; r0 < n; r0 += kLogitRowsPerPass) {
      const int64_t rows = std::min(kLogitRowsPerPass, n - r0);
      ctx_.gemm_one(ctx_.weights.lm_head, p.normed + r0 * H, H, rows, p.logits, V, false);
      check(cudaMemcpyAsync(out + r0 * V, p.logits, sizeof(float) * static_cast<size_t>(rows * V),
                            cudaMemcpyDeviceToHost, ctx_.stream),
            "prefill: logits");
    }
  }

  // The last row's logits, with f32 activations as decode computes them.
  void chunk_logits_last(int64_t n, float* out) {
    const DecodeScratch& d = ctx_.d;
    const int64_t H = ctx_.cfg.hidden_size;
    rms_norm_rows(ctx_.p.hidden + (n - 1) * H, 1, H, ctx_.weights.final_norm, ctx_.cfg.rms_norm_eps, d.normed,
                  nullptr, ctx_.stream);
    ctx_.gemv_one(ctx_.weights.lm_head, d.normed, d.logits, false);
    check(cudaMemcpyAsync(out, d.logits, sizeof(float) * static_cast<size_t>(ctx_.cfg.vocab_size),
                          cudaMemcpyDeviceToHost, ctx_.stream),
          "prefill: logits");
  }

  // Destroyed in reverse: the decode step first (it waits for a step run ahead), the context last.
  CudaContext ctx_;
  CudaSequence seq_;
  CudaDecodeStep step_;
  int64_t device_used_peak_ = 0;
};

}  // namespace
}  // namespace cuda

using cuda::check;

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> make_cuda_backend(const Model& model, const BackendOptions& options) {
  return std::make_unique<cuda::CudaBackend>(model, options);
}

DeviceInfo probe_cuda_device() {
  DeviceInfo info;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  info.name = prop.name;
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  // A 1 GiB device-to-device copy, best of 5 after a warm-up, counting bytes read + written. Plain
  // cudaMalloc: these buffers are not the backend's and stay out of its peak-memory count.
  constexpr size_t kBytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, kBytes), "cudaMalloc");
  check(cudaMalloc(&b, kBytes), "cudaMalloc");
  check(cudaMemset(a, 1, kBytes), "cudaMemset");
  cudaEvent_t t0, t1;
  check(cudaEventCreate(&t0), "cudaEventCreate");
  check(cudaEventCreate(&t1), "cudaEventCreate");
  float best = 1e30f;
  for (int i = 0; i < 6; ++i) {
    check(cudaEventRecord(t0), "cudaEventRecord");
    check(cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDeviceToDevice), "copy bandwidth");
    check(cudaEventRecord(t1), "cudaEventRecord");
    check(cudaEventSynchronize(t1), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime");
    if (i > 0) best = std::min(best, ms);
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  cudaFree(a);
  cudaFree(b);
  info.copy_gbps = 2.0 * static_cast<double>(kBytes) / (static_cast<double>(best) * 1e-3) / 1e9;
  return info;
}

}  // namespace qwick
