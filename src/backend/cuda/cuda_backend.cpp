// The CUDA backend (see cuda_backend.h): weights and every per-sequence state on the GPU,
//
//   attention layers  KV cache [n_kv_heads, capacity, head_dim] bf16 for K and for V, capacity =
//                     the context size, allocated up front (so a captured decode graph stays valid)
//   DeltaNet layers   conv window [K-1, channels] and recurrent state [Hv, Dv, Dk], f32, twice: a
//                     decode step reads one set and writes the other, so a step run ahead can be dropped
//
// prefill runs in chunks: f32 residual stream, bf16 activations into the tensor-core GEMMs (the router
// too, as the CPU's prefill), the dense matrices from bf16 copies where a
// chunk is long enough (add_prefill_copies, gemm_tma), every MoE grouping step on the device, the
// shared expert on a second stream beside the routed ones. decode runs
// one row with f32 activations through the GEMV kernels; the whole step (embedding .. lm_head .. token
// choice) is one CUDA graph, captured at the first decode and replayed: it reads the input token and the
// position from device memory, and its last kernel writes the chosen token into that input slot and advances
// the position; it also stores the token in mapped host memory, so the host only reads it there (or
// copies the logits back). With the token chosen on the device (decode_sampled), the next step is
// launched before the token comes back (step_ahead_), and dropped if the caller goes another way.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "backend/cuda/cuda_options.h"
#include "backend/cuda/cuda_weights.h"
#include "backend/cuda/stage_timer.h"
#include "core/error.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/cuda_launch.h"
#include "kernels/deltanet/deltanet_chunked_cuda.h"
#include "kernels/deltanet/deltanet_cuda.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/norm/norm_cuda.h"
#include "kernels/sample/sample_cuda.h"
#include "model/model.h"

namespace qwick {
namespace {

using namespace cuda;

// Prefill chunks from this many rows run the DeltaNet recurrence in the chunked (WY) form; shorter
// ones (and decode) take the token scan, whose fixed cost is lower (one layer at the real shape,
// H200: 64 rows 47 µs token scan vs 67 µs chunked, 128 rows 84 vs 78).
constexpr int64_t kChunkedScanMinRows = 128;
constexpr int64_t kLogitRowsPerPass = 256;  // prefill with every row's logits: lm_head rows per GEMM

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

// A sequence state copied within device memory: per attention layer the K then V rows
// [0, position) of each kv head, then per DeltaNet layer the conv window and recurrent state.
class CudaSnapshot final : public SequenceSnapshot {
 public:
  int64_t position() const override { return position_; }
  size_t bytes() const override { return buffer.size(); }

  const void* owner = nullptr;
  int64_t position_ = 0;
  DeviceBuffer buffer;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(const Model& model, const BackendOptions& options)
      : model_(model),
        cfg_(model.config),
        max_context_(options.max_context > 0 ? options.max_context : cfg_.max_position_embeddings),
        options_(parse_cuda_off(options.cuda_off)),
        int16_(!options.exact),
        kv_dtype_(options.kv_dtype) {
    if (options.kv_dtype == KvDtype::kF32)
      fail("--kv-type: the CUDA backend keeps its KV cache in bf16 or q8");
    if (cfg_.n_heads % cfg_.n_kv_heads != 0) fail("n_heads must be a multiple of n_kv_heads");
    if (cfg_.expert_dim % kGemmTileRows != 0)
      fail("moe_intermediate_size {} must be a multiple of {} for the CUDA backend", cfg_.expert_dim,
           kGemmTileRows);
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    for (cudaEvent_t& e : token_ready_)
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaHostAlloc(&host_token_, 2 * sizeof(int32_t), cudaHostAllocMapped), "cudaHostAlloc");
    check(cudaHostGetDevicePointer(&mapped_token_, host_token_, 0), "cudaHostGetDevicePointer");
    weights_ = upload_weights(model, stream_);
    allocate_state();
    allocate_decode();
    make_prefill_copies();
    reset();
  }

  ~CudaBackend() override {
    if (stream_) cudaStreamSynchronize(stream_);  // a step run ahead may still be running
    for (cudaGraphExec_t g : graph_)
      if (g) cudaGraphExecDestroy(g);
    if (host_token_) cudaFreeHost(host_token_);
    for (cudaEvent_t e : token_ready_)
      if (e) cudaEventDestroy(e);
    if (fork_) cudaEventDestroy(fork_);
    if (join_) cudaEventDestroy(join_);
    if (side_) cudaStreamDestroy(side_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }
  int64_t position() const override { return position_; }
  int64_t max_context() const override { return max_context_; }

  void reset() override {
    drop_step_ahead();
    for (auto& [conv, rec] : deltanet_state_[live_]) {
      check(cudaMemsetAsync(conv, 0, sizeof(float) * conv_state_floats(), stream_), "reset");
      check(cudaMemsetAsync(rec, 0, sizeof(float) * recurrent_state_floats(), stream_), "reset");
    }
    position_ = 0;
    set_device_position();
    restart_draws();
    device_token_ = -1;
    sync();
  }

  std::unique_ptr<SequenceSnapshot> snapshot() const override {
    auto s = std::make_unique<CudaSnapshot>();
    s->owner = this;
    s->position_ = position_;
    s->buffer = DeviceBuffer(snapshot_bytes(position_));
    copy_state(s->buffer.data(), position_, /*to_snapshot=*/true);
    return s;
  }

  void restore(const SequenceSnapshot& snapshot) override {
    const auto* s = dynamic_cast<const CudaSnapshot*>(&snapshot);
    if (s == nullptr || s->owner != this) fail("restore: the snapshot was taken from another backend");
    drop_step_ahead();
    copy_state(s->buffer.data(), s->position_, /*to_snapshot=*/false);
    position_ = s->position_;
    set_device_position();
    device_token_ = -1;
    sync();
  }

  // Prefill feeds bf16 activations to the tensor cores, decode keeps f32.
  bool decode_matches_prefill() const override { return false; }

  BackendMemory memory() const override {
    BackendMemory m;
    m.weights = weights_.bytes;
    m.state = static_cast<int64_t>(state_buf_.size());
    m.scratch = static_cast<int64_t>(decode_buf_.size() + prefill_buf_.size());
    m.peak = device_bytes_peak();
    m.device_used = device_used_peak_;
    return m;
  }

  void prefill(std::span<const int32_t> tokens, std::span<float> logits,
               const PrefillOptions& options) override {
    const size_t V = static_cast<size_t>(cfg_.vocab_size);
    check_tokens(tokens);
    if (options.chunk <= 0) fail("prefill chunk must be positive, got {}", options.chunk);
    const size_t need = options.all_logits ? tokens.size() * V : V;
    if (logits.size() < need) fail("prefill: logits buffer holds {} floats, needs {}", logits.size(), need);
    if (tokens.empty()) return;
    drop_step_ahead();
    restart_draws();
    ensure_prefill_rows(std::min<int64_t>(options.chunk, static_cast<int64_t>(tokens.size())));
    for (size_t done = 0; done < tokens.size();) {
      const size_t n = std::min(tokens.size() - done, static_cast<size_t>(options.chunk));
      const bool last = done + n == tokens.size();
      timer_.begin(options.stage_ms, stream_);
      forward_chunk(tokens.data() + done, static_cast<int64_t>(n), options.observer);
      timer_.mark("lm_head");
      if (options.all_logits)
        chunk_logits_all(static_cast<int64_t>(n), logits.data() + done * V);
      else if (last)
        chunk_logits_last(static_cast<int64_t>(n), logits.data());
      timer_.end();
      done += n;
    }
    set_device_position();
    device_token_ = -1;
    sync();
    note_device_used();
  }

  void decode(int32_t token, std::span<float> logits) override {
    check_tokens(std::span<const int32_t>(&token, 1));
    if (logits.size() < static_cast<size_t>(cfg_.vocab_size)) fail("decode: logits buffer too small");
    drop_step_ahead();
    put_token(token);
    launch_step();
    commit_step();
    check(cudaMemcpyAsync(logits.data(), d_.logits, sizeof(float) * static_cast<size_t>(cfg_.vocab_size),
                          cudaMemcpyDeviceToHost, stream_),
          "decode: logits");
    sync();
  }

  bool decode_sampled(int32_t token, const DeviceSampling& s, int32_t* next) override {
    check_tokens(std::span<const int32_t>(&token, 1));
    if (s.temperature != sampling_.temperature || s.top_k != sampling_.top_k || s.top_p != sampling_.top_p ||
        s.min_p != sampling_.min_p || s.seed != sampling_.seed) {
      drop_step_ahead();
      sampling_ = SamplingState{s.temperature, s.top_k, s.top_p, s.min_p, s.seed, draws_};
      check(cudaMemcpyAsync(d_.sampling, &sampling_, sizeof sampling_, cudaMemcpyHostToDevice, stream_),
            "sampling");
      sync();  // sampling_ is pageable host memory the copy reads
    }
    const int slot = live_;  // where this step's token comes back
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
    if (options_.step_ahead && position_ < max_context_) {
      launch_step();
      record_token_ready(live_);
      ahead_ = true;
    }
    check(cudaEventSynchronize(token_ready_[slot]), "decode: token");
    *next = host_token_[slot];
    ahead_token_ = *next;
    device_token_ = ahead_ ? -1 : *next;
    return true;
  }

 private:
  // The bf16 copies of the dense matrices (add_prefill_copies), after the weights and the sequence
  // state, where they leave room for the prefill's scratch (1.4 GB at 4096-row chunks of the full
  // model) and more: a GPU that holds the model without them runs without them.
  void make_prefill_copies() {
    constexpr size_t kHeadroom = size_t{4} << 30;
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    if (free > kHeadroom) add_prefill_copies(weights_, free - kHeadroom, stream_);
  }

  // ---- snapshots -------------------------------------------------------------------------------
  size_t snapshot_bytes(int64_t positions) const {
    const size_t kv_rows = static_cast<size_t>(cfg_.n_kv_heads) * static_cast<size_t>(positions) *
                           kv_row_bytes(kv_dtype_, cfg_.head_dim);
    return kv_cache_.size() * 2 * kv_rows +
           deltanet_state_[live_].size() * (conv_state_floats() + recurrent_state_floats()) * sizeof(float);
  }

  // Copies the state between the live buffers and a packed snapshot region, on the stream.
  void copy_state(uint8_t* packed, int64_t positions, bool to_snapshot) const {
    const size_t head_rows =
        static_cast<size_t>(positions) * static_cast<size_t>(cfg_.head_dim) * kv_elem_bytes();
    const size_t head_stride =
        static_cast<size_t>(max_context_) * static_cast<size_t>(cfg_.head_dim) * kv_elem_bytes();
    auto move = [&](void* live, size_t bytes) {
      if (bytes == 0) return;
      check(cudaMemcpyAsync(to_snapshot ? packed : live, to_snapshot ? live : packed, bytes,
                            cudaMemcpyDeviceToDevice, stream_),
            "snapshot copy");
      packed += bytes;
    };
    for (const KvLayer& layer : kv_cache_) {
      for (void* cache : {layer.k, layer.v})
        for (int h = 0; h < cfg_.n_kv_heads; ++h)
          move(static_cast<uint8_t*>(cache) + static_cast<size_t>(h) * head_stride, head_rows);
      if (kv_q8())
        for (float* scales : {layer.k_scale, layer.v_scale})
          for (int h = 0; h < cfg_.n_kv_heads; ++h)
            move(scales + static_cast<size_t>(h) * static_cast<size_t>(max_context_),
                 static_cast<size_t>(positions) * sizeof(float));
    }
    for (const auto& [conv, rec] : deltanet_state_[live_]) {
      move(conv, conv_state_floats() * sizeof(float));
      move(rec, recurrent_state_floats() * sizeof(float));
    }
    check(cudaStreamSynchronize(stream_), "snapshot copy");
  }

  // ---- setup ------------------------------------------------------------------------------------
  size_t conv_state_floats() const {
    return static_cast<size_t>(cfg_.conv_kernel - 1) * static_cast<size_t>(cfg_.conv_channels());
  }
  size_t recurrent_state_floats() const {
    return static_cast<size_t>(cfg_.lin_n_v_heads) * static_cast<size_t>(cfg_.lin_v_dim) *
           static_cast<size_t>(cfg_.lin_k_dim);
  }
  size_t kv_rows() const { return static_cast<size_t>(cfg_.n_kv_heads) * static_cast<size_t>(max_context_); }
  size_t kv_elems() const { return kv_rows() * static_cast<size_t>(cfg_.head_dim); }
  size_t kv_elem_bytes() const { return kv_value_bytes(kv_dtype_); }
  bool kv_q8() const { return kv_dtype_ == KvDtype::kQ8; }
  int64_t imax() const { return std::max(cfg_.expert_dim, cfg_.shared_expert_dim); }
  int64_t proj_stride() const {
    return std::max({cfg_.conv_channels(), cfg_.lin_v_total(), cfg_.q_proj_rows(),
                     int64_t{cfg_.n_kv_heads} * cfg_.head_dim, int64_t{cfg_.lin_n_v_heads}});
  }

  void allocate_state() {
    auto carve = [&](Carver& c) {
      kv_cache_.clear();
      for (auto& set : deltanet_state_) set.clear();
      slot_.clear();
      for (LayerKind kind : cfg_.layers) {
        if (kind == LayerKind::kAttention) {
          slot_.push_back(static_cast<int>(kv_cache_.size()));
          if (kv_q8())
            kv_cache_.push_back({c.take<uint8_t>(kv_elems()), c.take<uint8_t>(kv_elems()),
                                 c.take<float>(kv_rows()), c.take<float>(kv_rows())});
          else
            kv_cache_.push_back(
                {c.take<uint16_t>(kv_elems()), c.take<uint16_t>(kv_elems()), nullptr, nullptr});
        } else {
          slot_.push_back(static_cast<int>(deltanet_state_[0].size()));
          for (auto& set : deltanet_state_)
            set.push_back({c.take<float>(conv_state_floats()), c.take<float>(recurrent_state_floats())});
        }
      }
      if (kv_q8() && !kv_cache_.empty())
        kv_bf16_ = {c.take<uint16_t>(kv_elems()), c.take<uint16_t>(kv_elems())};
    };
    Carver sizing(nullptr);
    carve(sizing);
    state_buf_ = DeviceBuffer(sizing.used());
    Carver real(state_buf_.data());
    carve(real);
  }

  void allocate_decode() {
    const int64_t H = cfg_.hidden_size, E = cfg_.n_experts, k = cfg_.n_experts_per_tok;
    const int64_t nq_hd = int64_t{cfg_.n_heads} * cfg_.head_dim;
    auto carve = [&](Carver& c) {
      const auto u = [](int64_t v) { return static_cast<size_t>(v); };
      d_.token = c.take<int32_t>(1);
      d_.position = c.take<int32_t>(1);
      d_.sampling = c.take<SamplingState>(1);
      d_.x = c.take<float>(u(H));
      d_.normed = c.take<float>(u(H));
      d_.proj = c.take<float>(u(4 * proj_stride()));
      d_.conv = c.take<float>(u(cfg_.conv_channels()));
      d_.beta = c.take<float>(u(cfg_.lin_n_v_heads));
      d_.decay = c.take<float>(u(cfg_.lin_n_v_heads));
      d_.dn_out = c.take<float>(u(cfg_.lin_v_total()));
      d_.dn_normed = c.take<float>(u(cfg_.lin_v_total()));
      d_.q = c.take<float>(u(nq_hd));
      attention_splits_ = attention_decode_splits(cfg_.n_kv_heads);
      d_.partial = c.take<float>(u(cfg_.n_heads) * u(attention_splits_) * u(cfg_.head_dim + 2));
      d_.att_out = c.take<float>(u(nq_hd));
      d_.router = c.take<float>(u(E + 1));
      d_.route_counter = c.take<int32_t>(1);
      d_.moe_sync = c.take<unsigned long long>(u(kMoeSyncWords * cfg_.n_layers()));
      d_.ids = c.take<int32_t>(u(k));
      d_.gate_up_index = c.take<int32_t>(u(2 * k + 2));
      d_.down_index = c.take<int32_t>(u(k + 1));
      d_.weights = c.take<float>(u(k));
      d_.gate_up = c.take<float>(u((2 * k + 2) * imax()));
      d_.act = c.take<float>(u((k + 1) * imax()));
      d_.down = c.take<float>(u((k + 1) * H));
      d_.logits = c.take<float>(u(cfg_.vocab_size));
      d_.sample_partials = c.take<SamplePartial>(kSampleMaxBlocks);
      d_.sample_counter = c.take<int32_t>(1);
      d_.sample_candidates = c.take<SampleCandidate>(size_t{kSampleMaxBlocks} * kSampleBlockCandidates);
      d_.sample_candidate_counts = c.take<int32_t>(kSampleMaxBlocks);
    };
    Carver sizing(nullptr);
    carve(sizing);
    decode_buf_ = DeviceBuffer(sizing.used());
    Carver real(decode_buf_.data());
    carve(real);
    check(cudaMemsetAsync(d_.route_counter, 0, sizeof(int32_t), stream_), "route counter");
    check(cudaMemsetAsync(d_.moe_sync, 0,
                          sizeof(unsigned long long) * static_cast<size_t>(kMoeSyncWords * cfg_.n_layers()),
                          stream_),
          "moe counters");
    check(cudaMemsetAsync(d_.sample_counter, 0, sizeof(int32_t), stream_), "sample counter");
    check(cudaMemcpyAsync(d_.sampling, &sampling_, sizeof sampling_, cudaMemcpyHostToDevice, stream_),
          "sampling");
    sync();
  }

  void ensure_prefill_rows(int64_t rows) {
    if (rows <= prefill_rows_) return;
    prefill_buf_ = DeviceBuffer();  // free the smaller one first
    const int64_t H = cfg_.hidden_size, E = cfg_.n_experts, k = cfg_.n_experts_per_tok, I = cfg_.expert_dim,
                  S = cfg_.shared_expert_dim, C = cfg_.conv_channels(), Vt = cfg_.lin_v_total(),
                  Hv = cfg_.lin_n_v_heads;
    const int64_t nq_hd = int64_t{cfg_.n_heads} * cfg_.head_dim,
                  kvr = int64_t{cfg_.n_kv_heads} * cfg_.head_dim;
    const int64_t n = rows, pairs = rows * k;
    auto carve = [&](Carver& c) {
      const auto u = [](int64_t v) { return static_cast<size_t>(v); };
      p_.tokens = c.take<int32_t>(u(n));
      p_.hidden = c.take<float>(u(n * H));
      p_.normed = c.take<uint16_t>(u(n * H));
      p_.att_in = c.take<float>(u(n * (cfg_.q_proj_rows() + 2 * kvr)));
      p_.q16 = c.take<uint16_t>(u(n * nq_hd));
      p_.att16 = c.take<uint16_t>(u(n * nq_hd));
      p_.dn_in = c.take<float>(u(n * (C + Vt + 2 * Hv)));
      p_.conv = c.take<float>(u(n * C));
      p_.beta = c.take<float>(u(n * Hv));
      p_.decay = c.take<float>(u(n * Hv));
      p_.dn_out = c.take<float>(u(n * Vt));
      p_.dn16 = c.take<uint16_t>(u(n * Vt));
      p_.dn_chunked = c.take<float>(u(deltanet_chunked_workspace_floats(n, cfg_.lin_n_v_heads)));
      p_.router = c.take<float>(u(n * route_ld()));
      p_.ids = c.take<int32_t>(u(pairs));
      p_.weights = c.take<float>(u(pairs));
      p_.grouping.offsets = c.take<int32_t>(u(E + 1));
      p_.grouping.counts = c.take<int32_t>(u(E + 1));
      p_.grouping.slot_row = c.take<int32_t>(u(pairs));
      p_.grouping.slot_of = c.take<int32_t>(u(pairs));
      p_.grouping.tiles = c.take<GemmTile>(u(moe_max_tiles(pairs, static_cast<int>(E))));
      p_.grouping.tile_count = c.take<int32_t>(1);
      p_.gate_up = c.take<float>(u(pairs * 2 * I));
      p_.act = c.take<uint16_t>(u(pairs * I));
      p_.down = c.take<float>(u(pairs * H));
      p_.shared_gate_up = c.take<float>(u(n * 2 * S));
      p_.shared_act = c.take<uint16_t>(u(n * S));
      p_.shared_down = c.take<float>(u(n * H));
      p_.logits = c.take<float>(u(std::min(n, kLogitRowsPerPass) * cfg_.vocab_size));
    };
    Carver sizing(nullptr);
    carve(sizing);
    prefill_buf_ = DeviceBuffer(sizing.used());
    Carver real(prefill_buf_.data());
    carve(real);
    check(cudaMemsetAsync(p_.grouping.counts, 0, static_cast<size_t>(E + 1) * sizeof(int32_t), stream_),
          "cudaMemsetAsync");
    prefill_rows_ = rows;
  }

  // ---- small helpers ----------------------------------------------------------------------------
  void sync() { check(cudaStreamSynchronize(stream_), "cuda stream"); }

  void set_device_position() {
    host_position_ = static_cast<int32_t>(position_);
    check(cudaMemcpyAsync(d_.position, &host_position_, sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
          "position");
  }

  void note_device_used() {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
      device_used_peak_ = std::max<int64_t>(device_used_peak_, static_cast<int64_t>(total_b - free_b));
  }

  void check_tokens(std::span<const int32_t> tokens) const {
    for (int32_t t : tokens)
      if (t < 0 || t >= cfg_.vocab_size)
        fail("token id {} is out of range (vocab size {})", t, cfg_.vocab_size);
    if (position_ + static_cast<int64_t>(tokens.size()) > max_context_)
      fail("context overflow: {} tokens in the sequence + {} new exceed the context size {}", position_,
           tokens.size(), max_context_);
  }

  // GemvArgs with this backend's settings; gemv_args(m) also names one matrix.
  GemvArgs gemv_settings() const {
    GemvArgs a;
    a.overlap = options_.overlap;
    a.i16 = int16_;
    return a;
  }
  GemvArgs gemv_args(const DeviceMatrix& m) const {
    GemvArgs a = gemv_settings();
    a.single = m;
    a.format = m.format;
    a.max_rows = m.rows;
    a.max_cols = m.cols;
    return a;
  }

  // y = m · x, or y += m · x; with `norm`, x is the residual stream and the product reads
  // RMSNorm(x) with that weight (fused into the gemv's load).
  void gemv_one(const DeviceMatrix& m, const float* x, float* y, bool accumulate, const float* norm = nullptr,
                bool stream = false) {
    GemvArgs a = gemv_of(m, x, y, accumulate, norm);
    a.stream = stream;
    gemv(a, stream_);
  }
  GemvArgs gemv_of(const DeviceMatrix& m, const float* x, float* y, bool accumulate,
                   const float* norm) const {
    GemvArgs a = gemv_args(m);
    a.x = x;
    a.y = y;
    a.accumulate = accumulate;
    a.norm_weight = norm;
    a.eps = cfg_.rms_norm_eps;
    return a;
  }

  // Problem p: mats[p] · x -> y + p·y_stride, one launch when the formats agree (the first entries of
  // `table`); `norm` as gemv_one; trigger_after_wait as GemvArgs's.
  void gemv_stack(std::initializer_list<DeviceMatrix> mats, const DeviceMatrix* table, const float* x,
                  float* y, int64_t y_stride, const float* norm = nullptr, bool trigger_after_wait = false) {
    const DeviceMatrix& first = *mats.begin();
    const bool uniform =
        std::all_of(mats.begin(), mats.end(), [&](const DeviceMatrix& m) { return same_format(m, first); });
    if (!uniform || mats.size() > kGemvMaxStack) {
      int64_t p = 0;
      for (const DeviceMatrix& m : mats) {
        GemvArgs a = gemv_of(m, x, y + y_stride * p++, false, norm);
        a.trigger_after_wait = trigger_after_wait;
        gemv(a, stream_);
      }
      return;
    }
    GemvArgs a = gemv_settings();
    a.trigger_after_wait = trigger_after_wait;
    a.table = table;
    a.problems = static_cast<int>(mats.size());
    a.format = first.format;
    int p = 0;
    for (const DeviceMatrix& m : mats) {
      a.max_rows = std::max(a.max_rows, m.rows), a.max_cols = std::max(a.max_cols, m.cols);
      a.stack_rows[p++] = m.rows;
    }
    a.x = x;
    a.y = y;
    a.y_stride = y_stride;
    a.norm_weight = norm;
    a.eps = cfg_.rms_norm_eps;
    gemv(a, stream_);
  }

  // The mixer's input projections of the normed rows, side by side in y ([n, ld], ld their rows
  // together; returns ld): one GEMM over their stacked matrix, or one per part when their formats
  // differ. The rows go to y in f32, or to y16 in bf16 where that is set.
  int64_t project_in(const DeviceMatrix& stacked, const DeviceMatrix& stacked16,
                     std::initializer_list<DeviceMatrix> parts, float* y, int64_t n,
                     uint16_t* y16 = nullptr) {
    int64_t ld = 0;
    for (const DeviceMatrix& m : parts) ld += m.rows;
    const auto project = [&](const DeviceMatrix& m, int64_t col) {
      GemmArgs a = gemm_args(m, p_.normed, cfg_.hidden_size, n, y16 ? nullptr : y + col, ld);
      if (y16) a.y16 = y16 + col;
      a.overlap = prefill_overlap();
      gemm(a, stream_);
    };
    if (stacked.rows == ld) {
      project(prefill_matrix(stacked, stacked16, n), 0);
      return ld;
    }
    int64_t col = 0;
    for (const DeviceMatrix& m : parts) project(m, col), col += m.rows;
    return ld;
  }

  // Whether an n-row GEMM reads the bf16 copy `copy` (add_prefill_copies; rows 0 without): where
  // gemm_tma takes it.
  bool reads_copy(const DeviceMatrix& copy, int64_t n) const {
    return copy.rows > 0 && gemm_tma_fills(copy.rows, n);
  }
  // The matrix an n-row GEMM of m reads: its copy where reads_copy, else m.
  DeviceMatrix prefill_matrix(const DeviceMatrix& m, const DeviceMatrix& copy, int64_t n) const {
    return reads_copy(copy, n) ? copy : m;
  }

  // On stream `s`, or stream_ when s is null (not the legacy default stream; then as a programmatic
  // dependent launch with prefill_overlap()).
  void gemm_one(const DeviceMatrix& m, const uint16_t* x, int64_t ldx, int64_t n, float* y, int64_t ldy,
                bool accumulate, cudaStream_t s = nullptr) {
    GemmArgs a = gemm_args(m, x, ldx, n, y, ldy);
    a.accumulate = accumulate;
    a.overlap = prefill_overlap() && !s;
    gemm(a, s ? s : stream_);
  }

  // ---- decode -----------------------------------------------------------------------------------
  // The step's input token into the device's slot, unless the slot holds it (the last step chose it).
  void put_token(int32_t token) {
    if (token == device_token_) return;
    host_token_in_ = token;
    check(cudaMemcpyAsync(d_.token, &host_token_in_, sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
          "token");
  }

  // Enqueues one step for the token in the device's slot at the device's position, from the DeltaNet
  // states of set live_ into the other set; commit_step then makes it the sequence's.
  void launch_step() {
    if (options_.graph) {
      cudaGraphExec_t& graph = graph_[live_];
      if (!graph) graph = capture_step();
      check(cudaGraphLaunch(graph, stream_), "cudaGraphLaunch");
    } else {
      enqueue_step();
    }
  }
  void commit_step() {
    ++position_;
    live_ ^= 1;
    ++draws_;            // every step's sampler draws, wanted or not
    device_token_ = -1;  // until decode_sampled reads back what the step chose
  }
  // token_ready_[slot] recorded after the step, whose sampler stored its token in host_token_[slot].
  void record_token_ready(int slot) { check(cudaEventRecord(token_ready_[slot], stream_), "decode: event"); }
  // The step decode_sampled launched ahead is not wanted. It runs anyway, but it wrote its DeltaNet
  // states into the set the sequence does not hold and its KV rows past the sequence's end, where the
  // next step writes them again; what else it moved on the device goes back: the position counter,
  // the sampler's draw count and the input slot.
  void drop_step_ahead() {
    if (!ahead_) return;
    ahead_ = false;
    set_device_position();
    set_device_draws();
    device_token_ = -1;
  }
  void set_device_draws() {
    check(cudaMemcpyAsync(&d_.sampling->draws, &draws_, sizeof draws_, cudaMemcpyHostToDevice, stream_),
          "sampling draws");
  }
  // A new sequence numbers its draws from 0 (draws_).
  void restart_draws() {
    draws_ = 0;
    set_device_draws();
  }

  // The decode step from the DeltaNet states of set live_, captured into a graph.
  cudaGraphExec_t capture_step() {
    cudaGraph_t graph = nullptr;
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      enqueue_step();
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(status, "cudaGraphInstantiate");
    return exec;
  }

  // Every kernel of one decode step, in order, on stream_. With fusion (the default) each RMSNorm
  // is folded into the projections that read it and the MoE runs as moe_decode's kernels; without
  // (CudaOptions::fusion, or shapes the fused kernels do not take), the norms, routing, SwiGLU and
  // combine are kernels of their own: the reference chain.
  void enqueue_step() {
    const int64_t H = cfg_.hidden_size;
    const float eps = cfg_.rms_norm_eps;
    embed_rows(weights_.embed, d_.token, 1, d_.x, stream_);
    for (int L = 0; L < cfg_.n_layers(); ++L) {
      const CudaLayerWeights& lw = weights_.layers[static_cast<size_t>(L)];
      const int slot = slot_[static_cast<size_t>(L)];
      const float* input_norm = fused_norm(lw.input_norm);
      if (!input_norm) rms_norm_rows(d_.x, 1, H, lw.input_norm, eps, d_.normed, nullptr, stream_);
      if (const auto* att = std::get_if<CudaAttentionWeights>(&lw.mixer))
        decode_attention(*att, slot, input_norm);
      else
        decode_deltanet(std::get<CudaDeltaNetWeights>(lw.mixer), slot, input_norm);
      if (options_.fusion &&
          moe_decode_fits(lw.moe.router.format, lw.moe.expert_format, cfg_.expert_dim, cfg_.shared_expert_dim,
                          cfg_.n_experts_per_tok) &&
          same_format(lw.moe.router, lw.moe.shared_gate) &&
          same_format(lw.moe.shared_gate_proj, lw.moe.shared_up) &&
          lw.moe.shared_gate_proj.format == lw.moe.expert_format &&
          lw.moe.shared_down.format == lw.moe.expert_format) {
        decode_moe_fused(lw, L);
      } else {
        rms_norm_rows(d_.x, 1, H, lw.post_norm, eps, d_.normed, nullptr, stream_);
        decode_moe(lw.moe);
      }
    }
    const float* final_norm = fused_norm(weights_.final_norm);
    if (!final_norm) rms_norm_rows(d_.x, 1, H, weights_.final_norm, eps, d_.normed, nullptr, stream_);
    gemv_one(weights_.lm_head, final_norm ? d_.x : d_.normed, d_.logits, false, final_norm, /*stream=*/true);
    sample_token(SampleArgs{d_.logits, cfg_.vocab_size, d_.sampling, d_.token, d_.position,
                            d_.sample_partials, d_.sample_counter, d_.sample_candidates,
                            d_.sample_candidate_counts, mapped_token_ + live_},
                 stream_);
  }

  // The norm weight when the projections fuse it (they then read the residual d_.x), else null (an
  // rms_norm kernel writes d_.normed first).
  const float* fused_norm(const float* weight) const { return options_.fusion ? weight : nullptr; }
  const float* mixer_input(const float* norm) const { return norm ? d_.x : d_.normed; }

  // d_.proj slots: q, k, v, and the gate's rows unless the combine computes them (gate_rows):
  // then the q|k|v stack lets the chain after it start only past its wait, so the combine, launched
  // while the splits run, may read the layer's input (AttentionDecodeArgs::gate_proj).
  void decode_attention(const CudaAttentionWeights& w, int slot, const float* input_norm) {
    const int64_t ps = proj_stride(), hd = cfg_.head_dim;
    const float* x = mixer_input(input_norm);
    const bool gated = cfg_.attn_output_gate, gate_rows = gated && attention_gate_rows_fit(w.gate);
    if (gated && !gate_rows)
      gemv_stack({w.q, w.k, w.v, w.gate}, w.qkv_table, x, d_.proj, ps, input_norm);
    else
      gemv_stack({w.q, w.k, w.v}, w.qkv_table, x, d_.proj, ps, input_norm, gate_rows);
    const KvLayer& kv = kv_cache_[static_cast<size_t>(slot)];
    AttentionPrepArgs prep{d_.proj,
                           0,
                           hd,
                           d_.proj + ps,
                           d_.proj + 2 * ps,
                           0,
                           1,
                           0,
                           d_.position,
                           cfg_.n_heads,
                           cfg_.n_kv_heads,
                           cfg_.head_dim,
                           cfg_.rotary_dim,
                           w.q_norm,
                           w.k_norm,
                           cfg_.rms_norm_eps,
                           weights_.rope_inv_freq,
                           d_.q,
                           nullptr,
                           kv.k,
                           kv.v,
                           max_context_,
                           options_.overlap,
                           kv.k_scale,
                           kv.v_scale};
    attention_prep(prep, stream_);
    AttentionDecodeArgs at{d_.q,
                           kv.k,
                           kv.v,
                           max_context_,
                           d_.position,
                           cfg_.n_heads,
                           cfg_.n_kv_heads,
                           cfg_.head_dim,
                           1.0f / std::sqrt(static_cast<float>(hd)),
                           attention_splits_,
                           d_.partial,
                           gated && !gate_rows ? d_.proj + 3 * ps : nullptr,
                           hd,
                           d_.att_out,
                           options_.overlap};
    if (gate_rows)
      at.gate_proj = w.gate, at.gate_x = x, at.gate_norm = input_norm, at.eps = cfg_.rms_norm_eps;
    at.k_scale = kv.k_scale, at.v_scale = kv.v_scale;
    attention_decode(at, stream_);
    gemv_one(w.o, d_.att_out, d_.x, true);
  }

  void decode_deltanet(const CudaDeltaNetWeights& w, int slot, const float* input_norm) {
    // d_.proj slots: qkv, b, a, z. The fused step's launch may carry z (deltanet_decode_step_carries_z).
    const int64_t ps = proj_stride();
    float *proj_b = d_.proj + ps, *proj_a = d_.proj + 2 * ps, *proj_z = d_.proj + 3 * ps;
    const bool z_along =
        options_.fusion && deltanet_decode_step_carries_z(cfg_.lin_k_dim, cfg_.conv_kernel, w.z);
    if (z_along)
      gemv_stack({w.qkv, w.b, w.a}, w.proj_table, mixer_input(input_norm), d_.proj, ps, input_norm);
    else
      gemv_stack({w.qkv, w.b, w.a, w.z}, w.proj_table, mixer_input(input_norm), d_.proj, ps, input_norm);
    // From set live_ into the other (launch_step).
    const auto& [conv_state, rec_state] =
        deltanet_state_[static_cast<size_t>(live_)][static_cast<size_t>(slot)];
    const auto& [conv_next, rec_next] =
        deltanet_state_[static_cast<size_t>(live_ ^ 1)][static_cast<size_t>(slot)];
    DeltaNetConvArgs conv{d_.proj,    0,       1, cfg_.conv_channels(), w.conv, cfg_.conv_kernel,
                          conv_state, d_.conv, 0};
    conv.state_out = conv_next;
    if (options_.fusion) {
      DeltaNetDecodeStepArgs step{conv,
                                  cfg_.lin_n_k_heads,
                                  cfg_.lin_k_dim,
                                  cfg_.lin_n_v_heads,
                                  cfg_.lin_v_dim,
                                  proj_b,
                                  proj_a,
                                  w.a_neg,
                                  w.dt_bias,
                                  rec_state,
                                  rec_next,
                                  d_.dn_out,
                                  options_.overlap};
      if (z_along) {
        step.z = w.z;
        step.z_x = mixer_input(input_norm);
        step.z_norm = input_norm;
        step.z_eps = cfg_.rms_norm_eps;
        step.z_out = proj_z;
        step.z_i16 = int16_;
      }
      deltanet_decode_step(step, stream_);
    } else {
      deltanet_conv(conv, stream_);
      deltanet_prepare({d_.conv, 0, 1, cfg_.lin_n_k_heads, cfg_.lin_k_dim, cfg_.lin_n_v_heads, proj_b, proj_a,
                        0, w.a_neg, w.dt_bias, d_.beta, d_.decay},
                       stream_);
      DeltaNetScanArgs scan{d_.conv,
                            0,
                            d_.beta,
                            d_.decay,
                            1,
                            cfg_.lin_n_k_heads,
                            cfg_.lin_n_v_heads,
                            cfg_.lin_k_dim,
                            cfg_.lin_v_dim,
                            rec_state,
                            d_.dn_out,
                            0};
      scan.state_out = rec_next;
      deltanet_scan(scan, stream_);
    }
    if (options_.fusion && gemv_gated_norm_fits(cfg_.lin_v_dim) && ps % 4 == 0) {
      // out_proj · gated_norm(o, z): the per-head norm and the gate applied as the gemv reads o.
      GemvArgs a = gemv_args(w.out);
      a.x = d_.dn_out;
      a.gate_z = proj_z;
      a.head_dim = cfg_.lin_v_dim;
      a.norm_weight = w.norm;
      a.eps = cfg_.rms_norm_eps;
      a.y = d_.x;
      a.accumulate = true;
      gemv(a, stream_);
      return;
    }
    gated_rms_norm_rows({d_.dn_out, 0, proj_z, 0, 1, cfg_.lin_n_v_heads, cfg_.lin_v_dim, w.norm,
                         cfg_.rms_norm_eps, d_.dn_normed, nullptr, 0},
                        stream_);
    gemv_one(w.out, d_.dn_normed, d_.x, true);
  }

  void decode_moe_fused(const CudaLayerWeights& lw, int L) {
    const CudaMoeWeights& w = lw.moe;
    MoeDecodeArgs a;
    a.x = d_.x;
    a.norm_weight = lw.post_norm;
    a.eps = cfg_.rms_norm_eps;
    a.H = cfg_.hidden_size;
    a.I = cfg_.expert_dim;
    a.E = cfg_.n_experts;
    a.k = cfg_.n_experts_per_tok;
    a.route_table = w.route_table;
    a.route_format = w.router.format;
    a.experts = w.experts;
    a.expert_format = w.expert_format;
    a.logits = d_.router;
    a.ids = d_.ids;
    a.weights = d_.weights;
    a.counter = d_.route_counter;
    a.sync = d_.moe_sync + kMoeSyncWords * L;
    a.act = d_.act;
    a.i16 = int16_;
    a.overlap = options_.overlap;
    moe_decode(a, stream_);
  }

  void decode_moe(const CudaMoeWeights& w) {
    const int64_t H = cfg_.hidden_size, E = cfg_.n_experts, k = cfg_.n_experts_per_tok, Im = imax();
    gemv_stack({w.router, w.shared_gate}, w.route_table, d_.normed, d_.router, E);
    moe_route_decode(d_.router, static_cast<int>(E), static_cast<int>(k), d_.ids, d_.weights,
                     d_.gate_up_index, d_.down_index, stream_);
    // gate|up rows: [gate of the k experts | up of the k experts | shared gate | shared up].
    const bool shared_too = same_format(w.shared_gate_proj, w.shared_up) &&
                            w.shared_gate_proj.format == w.expert_format &&
                            w.shared_down.format == w.expert_format;
    GemvArgs gu = gemv_settings();
    gu.table = w.experts;
    gu.index = d_.gate_up_index;
    gu.problems = static_cast<int>(shared_too ? 2 * k + 2 : 2 * k);
    gu.format = w.expert_format;
    gu.max_rows = Im;
    gu.max_cols = H;
    gu.x = d_.normed;
    gu.y = d_.gate_up;
    gu.y_stride = Im;
    gemv(gu, stream_);
    if (!shared_too) {
      gemv_one(w.shared_gate_proj, d_.normed, d_.gate_up + 2 * k * Im, false);
      gemv_one(w.shared_up, d_.normed, d_.gate_up + (2 * k + 1) * Im, false);
    }
    swiglu(d_.gate_up, d_.gate_up + k * Im, Im, k, cfg_.expert_dim, d_.act, Im, false, stream_);
    swiglu(d_.gate_up + 2 * k * Im, d_.gate_up + (2 * k + 1) * Im, Im, 1, cfg_.shared_expert_dim,
           d_.act + k * Im, Im, false, stream_);
    GemvArgs dn = gemv_settings();
    dn.table = w.experts;
    dn.index = d_.down_index;
    dn.problems = static_cast<int>(shared_too ? k + 1 : k);
    dn.format = w.expert_format;
    dn.max_rows = H;
    dn.max_cols = Im;
    dn.x = d_.act;
    dn.x_stride = Im;
    dn.y = d_.down;
    dn.y_stride = H;
    gemv(dn, stream_);
    if (!shared_too) gemv_one(w.shared_down, d_.act + k * Im, d_.down + k * H, false);
    MoeCombine c{d_.x,          1,       H, static_cast<int>(k), d_.weights,
                 nullptr,       d_.down, H, d_.down + k * H,     H,
                 d_.router + E, 1};
    moe_combine(c, stream_);
  }

  // ---- prefill ----------------------------------------------------------------------------------
  void forward_chunk(const int32_t* tokens, int64_t n, const LayerObserver& observer) {
    const int64_t H = cfg_.hidden_size;
    chunk_overlap_ = options_.overlap && !timer_.active() && n >= kOverlapMinRows;
    const float eps = cfg_.rms_norm_eps;
    check(cudaMemcpyAsync(p_.tokens, tokens, sizeof(int32_t) * static_cast<size_t>(n), cudaMemcpyHostToDevice,
                          stream_),
          "prefill: tokens");
    timer_.mark("embed, norms");
    embed_rows(weights_.embed, p_.tokens, n, p_.hidden, stream_);
    if (observer) observe(observer, 0, n);
    bool normed = false;  // p_.normed holds this layer's input norm (the combine before computed it)
    for (int L = 0; L < cfg_.n_layers(); ++L) {
      const CudaLayerWeights& lw = weights_.layers[static_cast<size_t>(L)];
      const int slot = slot_[static_cast<size_t>(L)];
      timer_.mark("embed, norms");
      if (!normed)
        rms_norm_rows(p_.hidden, n, H, lw.input_norm, eps, nullptr, p_.normed, stream_, prefill_overlap());
      if (const auto* att = std::get_if<CudaAttentionWeights>(&lw.mixer))
        prefill_attention(*att, slot, n);
      else
        prefill_deltanet(std::get<CudaDeltaNetWeights>(lw.mixer), slot, n);
      timer_.mark("embed, norms");
      rms_norm_rows(p_.hidden, n, H, lw.post_norm, eps, nullptr, p_.normed, stream_, prefill_overlap());
      const bool last = L + 1 == cfg_.n_layers();
      normed = !last && moe_combine_norms(H);
      prefill_moe(lw.moe, n, normed ? weights_.layers[static_cast<size_t>(L + 1)].input_norm : nullptr);
      if (observer) observe(observer, L + 1, n);
    }
    position_ += n;
  }

  void observe(const LayerObserver& observer, int stage, int64_t n) {
    std::vector<float> host(static_cast<size_t>(n * cfg_.hidden_size));
    check(
        cudaMemcpyAsync(host.data(), p_.hidden, host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_),
        "observer");
    sync();
    observer(stage, host.data(), n, position_);
  }

  void prefill_attention(const CudaAttentionWeights& w, int slot, int64_t n) {
    // p_.att_in's columns: q, the gate (with the output gate; CudaAttentionWeights), then k at q_rows, v.
    const int64_t hd = cfg_.head_dim, q_rows = cfg_.q_proj_rows(), kvr = int64_t{cfg_.n_kv_heads} * hd;
    const int64_t nq_hd = int64_t{cfg_.n_heads} * hd, H = cfg_.hidden_size;
    const bool gated = cfg_.attn_output_gate;
    timer_.mark("attention: q k v projections");
    const int64_t ld = gated ? project_in(w.in_proj, w.in_proj16, {w.q, w.gate, w.k, w.v}, p_.att_in, n)
                             : project_in(w.in_proj, w.in_proj16, {w.q, w.k, w.v}, p_.att_in, n);
    const float* q = p_.att_in;
    const KvLayer& kv = kv_cache_[static_cast<size_t>(slot)];
    AttentionPrepArgs prep{q,
                           ld,
                           hd,
                           q + q_rows,
                           q + q_rows + kvr,
                           ld,
                           n,
                           position_,
                           nullptr,
                           cfg_.n_heads,
                           cfg_.n_kv_heads,
                           cfg_.head_dim,
                           cfg_.rotary_dim,
                           w.q_norm,
                           w.k_norm,
                           cfg_.rms_norm_eps,
                           weights_.rope_inv_freq,
                           nullptr,
                           p_.q16,
                           kv.k,
                           kv.v,
                           max_context_,
                           prefill_overlap(),
                           kv.k_scale,
                           kv.v_scale};
    timer_.mark("attention: norm, rope, cache");
    attention_prep(prep, stream_);
    // A q8 cache is read through its bf16 copy, rows [0, position_ + n) made afresh for each chunk.
    const auto [kc, vc] =
        kv_q8() ? kv_bf16_ : std::pair{static_cast<uint16_t*>(kv.k), static_cast<uint16_t*>(kv.v)};
    if (kv_q8()) {
      timer_.mark("attention: q8 cache to bf16");
      for (auto [from, scales, to] : {std::tuple{kv.k, kv.k_scale, kc}, std::tuple{kv.v, kv.v_scale, vc}})
        kv_q8_to_bf16(static_cast<const uint8_t*>(from), scales, position_ + n, cfg_.n_kv_heads,
                      cfg_.head_dim, max_context_, to, stream_);
    }
    AttentionPrefillArgs at{p_.q16,
                            kc,
                            vc,
                            max_context_,
                            n,
                            position_,
                            cfg_.n_heads,
                            cfg_.n_kv_heads,
                            cfg_.head_dim,
                            1.0f / std::sqrt(static_cast<float>(hd)),
                            gated ? q + nq_hd : nullptr,
                            ld,
                            hd,
                            p_.att16};
    at.overlap = prefill_overlap();
    timer_.mark("attention: flash prefill");
    attention_prefill(at, stream_);
    timer_.mark("attention: o projection");
    gemm_one(prefill_matrix(w.o, w.o16, n), p_.att16, nq_hd, n, p_.hidden, H, true);
  }

  void prefill_deltanet(const CudaDeltaNetWeights& w, int slot, int64_t n) {
    const int64_t H = cfg_.hidden_size, C = cfg_.conv_channels(), Vt = cfg_.lin_v_total(),
                  Hv = cfg_.lin_n_v_heads;
    timer_.mark("deltanet: qkv z b a projections");
    // In bf16 in the f32 buffer: read by the conv, the gated norm and the gates only, which then move
    // half the bytes.
    uint16_t* const in16 = reinterpret_cast<uint16_t*>(p_.dn_in);
    const int64_t ld = project_in(w.in_proj, w.in_proj16, {w.qkv, w.z, w.b, w.a}, p_.dn_in, n, in16);
    // Where q|k|v, z, b and a start.
    const int64_t at_z = C, at_b = at_z + Vt, at_a = at_b + Hv;
    const auto& [conv_state, rec_state] =
        deltanet_state_[static_cast<size_t>(live_)][static_cast<size_t>(slot)];
    timer_.mark("deltanet: conv, gates");
    DeltaNetConvArgs conv{nullptr, ld, n, C, w.conv, cfg_.conv_kernel, conv_state, p_.conv, C};
    conv.in_bf16 = in16;
    conv.overlap = prefill_overlap();
    if (deltanet_conv_norms(cfg_.lin_k_dim)) {  // q and k normalised in the conv
      conv.norm_heads = cfg_.lin_n_k_heads;
      conv.norm_dim = cfg_.lin_k_dim;
    }
    deltanet_conv(conv, stream_);
    DeltaNetPrepareArgs gates{
        p_.conv, C,  n,       cfg_.lin_n_k_heads, cfg_.lin_k_dim, cfg_.lin_n_v_heads, nullptr,
        nullptr, ld, w.a_neg, w.dt_bias,          p_.beta,        p_.decay,           conv.norm_heads > 0};
    gates.b_bf16 = in16 + at_b;
    gates.a_bf16 = in16 + at_a;
    gates.overlap = prefill_overlap();
    deltanet_prepare(gates, stream_);
    timer_.mark("deltanet: scan");
    DeltaNetScanArgs scan{p_.conv,
                          C,
                          p_.beta,
                          p_.decay,
                          n,
                          cfg_.lin_n_k_heads,
                          cfg_.lin_n_v_heads,
                          cfg_.lin_k_dim,
                          cfg_.lin_v_dim,
                          rec_state,
                          p_.dn_out,
                          Vt};
    scan.overlap = prefill_overlap();
    if (n >= kChunkedScanMinRows && deltanet_chunked_supported(scan))
      deltanet_chunked_scan(scan, p_.dn_chunked, stream_);
    else
      deltanet_scan(scan, stream_);
    timer_.mark("deltanet: gated norm");
    GatedNormArgs norm{p_.dn_out,      Vt,     nullptr,           ld,      n,       cfg_.lin_n_v_heads,
                       cfg_.lin_v_dim, w.norm, cfg_.rms_norm_eps, nullptr, p_.dn16, Vt};
    norm.z_bf16 = in16 + at_z;
    norm.overlap = prefill_overlap();
    gated_rms_norm_rows(norm, stream_);
    timer_.mark("deltanet: out projection");
    gemm_one(prefill_matrix(w.out, w.out16, n), p_.dn16, Vt, n, p_.hidden, H, true);
  }

  // Most slots per tile of the expert groups of an n-row chunk. The wgmma kernel takes 128 (64 for the
  // others: each dequantized W slice then serves up to 128 rows); gemm() runs it only for gate|up
  // widths a multiple of 128. It takes 144 once an expert's rows (n·k/E on average, give or take
  // its square root for an even router) often pass 128: at a 4096-row chunk, 128 ± 11, 128-slot
  // tiles left a thin second tile, which decodes the whole W slice again, for half the experts.
  // Shorter chunks keep 128: the 144-slot kernel has one pipeline stage fewer.
  int expert_tile_rows(int64_t n) const {
    const int64_t E = cfg_.n_experts, k = cfg_.n_experts_per_tok, I = cfg_.expert_dim;
    if (I % 128 != 0) return kGemmTileRows;
    return n * k >= 112 * E ? 144 : 128;
  }

  // next_norm: the next layer's input norm, which the combine then computes into p_.normed.
  void prefill_moe(const CudaMoeWeights& w, int64_t n, const float* next_norm) {
    // The shared expert needs no routing: on the side stream it fills the SMs that the router and the
    // routing (narrow launches, one last block for the scan) leave idle. Serial while stages are timed,
    // so each stage keeps its own time.
    const bool side = !timer_.active();
    if (side) {
      check(cudaEventRecord(fork_, stream_), "prefill fork");
      check(cudaStreamWaitEvent(side_, fork_), "prefill fork");
    }
    prefill_shared_expert(w, n, side ? side_ : stream_);
    if (side) check(cudaEventRecord(join_, side_), "prefill join");
    const int64_t H = cfg_.hidden_size, E = cfg_.n_experts, k = cfg_.n_experts_per_tok, I = cfg_.expert_dim;
    // Router logits [n, E] and the shared expert's gate logit (column E), at stride route_ld(): from
    // the bf16 MoE input like every other prefill product, and like the CPU backend's prefill (bf16
    // inputs and weights, f32 sums), so both pick alike; decode routes from f32 inputs. The weights
    // were decoded to bf16 at upload.
    timer_.mark("moe: router");
    const int64_t ld_route = route_ld(), ld_logit = ld_route;
    const float* const shared_logit = p_.router + E;
    gemm_one(w.route16, p_.normed, H, n, p_.router, ld_route, false);
    timer_.mark("moe: route, group");
    p_.grouping.tile_rows = expert_tile_rows(n);
    moe_route_group(p_.router, ld_route, n, static_cast<int>(E), static_cast<int>(k), p_.ids, p_.weights,
                    p_.grouping, stream_, prefill_overlap());

    GemmArgs gu = expert_gate_up(w, 0, I, p_.gate_up);
    gu.x_rows = p_.grouping.slot_row;
    gu.tiles = p_.grouping.tiles;
    gu.tile_count = p_.grouping.tile_count;
    gu.max_tiles = moe_max_tiles(n * k, static_cast<int>(E));
    gu.tile_rows = p_.grouping.tile_rows;
    gu.overlap = prefill_overlap();
    // The wgmma kernel applies SwiGLU in its epilogue (GemmArgs::act); where the simple kernel runs
    // (widths not a multiple of 64), gate|up stays in f32 for the swiglu kernel.
    const bool fused_swiglu = I % 64 == 0;
    timer_.mark("moe: experts gate|up");
    if (fused_swiglu) {
      GemmArgs fused = gu;
      fused.act = p_.act;
      fused.ld_act = I;
      gemm(fused, stream_);
    } else {
      gemm(gu, stream_);
      timer_.mark("moe: swiglu");
      swiglu(p_.gate_up, p_.gate_up + I, 2 * I, n * k, I, p_.act, I, true, stream_);
    }
    GemmArgs dn = gu;
    dn.table_base = 2;
    dn.part_rows = 0;
    dn.K = I;
    dn.N = H;
    dn.x = p_.act;
    dn.ldx = I;
    dn.x_rows = nullptr;
    dn.y = p_.down;
    dn.ldy = H;
    // bf16 rows for the combine (the buffer is sized for f32 ones).
    uint16_t* const down16 = reinterpret_cast<uint16_t*>(p_.down);
    dn.y = nullptr, dn.y16 = down16;
    timer_.mark("moe: experts down");
    gemm(dn, stream_);

    if (side) check(cudaStreamWaitEvent(stream_, join_), "prefill join");
    MoeCombine c{p_.hidden,           n,       H, static_cast<int>(k), p_.weights,
                 p_.grouping.slot_of, p_.down, H, p_.shared_down,      H,
                 shared_logit,        ld_logit};
    c.down16 = down16;
    // Plain after the side stream's join: an event wait, not a kernel, comes before it.
    c.overlap = prefill_overlap() && !side;
    if (next_norm) {
      c.norm_weight = next_norm;
      c.eps = cfg_.rms_norm_eps;
      c.normed = p_.normed;
    }
    timer_.mark("moe: combine");
    moe_combine(c, stream_);
  }

  // gate|up of the expert table's entry at table_base (gate, then up: parts of `rows` each) from the MoE
  // input, into y [*, 2·rows]; the caller adds the slots (n, or a tile list).
  GemmArgs expert_gate_up(const CudaMoeWeights& w, int table_base, int64_t rows, float* y) const {
    GemmArgs a;
    a.table = w.experts;
    a.table_stride = 3;
    a.table_base = table_base;
    a.part_rows = rows;
    a.format = w.expert_format;
    a.K = cfg_.hidden_size;
    a.N = 2 * rows;
    a.x = p_.normed;
    a.ldx = cfg_.hidden_size;
    a.y = y;
    a.ldy = 2 * rows;
    return a;
  }

  // The shared expert of an n-row chunk into p_.shared_down, on stream `s`.
  void prefill_shared_expert(const CudaMoeWeights& w, int64_t n, cudaStream_t s) {
    const int64_t H = cfg_.hidden_size, E = cfg_.n_experts, S = cfg_.shared_expert_dim;
    timer_.mark("moe: shared expert");
    // SwiGLU in the wgmma kernel's epilogue (the expert table), as for the routed experts, or in
    // gemm_tma's over the stacked bf16 copy.
    const bool in_table = w.shared_gate_proj.format == w.expert_format &&
                          same_format(w.shared_gate_proj, w.shared_up) && S % 128 == 0;
    const bool copy = reads_copy(w.shared_gate_up16, n);
    if (copy) {
      GemmArgs su = gemm_args(w.shared_gate_up16, p_.normed, H, n, nullptr, 0);
      su.act = p_.shared_act;
      su.ld_act = S;
      gemm(su, s);
    } else if (in_table) {
      // gate|up in one launch through the expert table (the shared expert is its entry E): twice the
      // blocks of either alone.
      GemmArgs su = expert_gate_up(w, static_cast<int>(3 * E), S, p_.shared_gate_up);
      su.n = n;
      su.act = p_.shared_act;
      su.ld_act = S;
      gemm(su, s);
    } else {
      gemm_one(w.shared_gate_proj, p_.normed, H, n, p_.shared_gate_up, 2 * S, false, s);
      gemm_one(w.shared_up, p_.normed, H, n, p_.shared_gate_up + S, 2 * S, false, s);
    }
    if (!in_table && !copy)
      swiglu(p_.shared_gate_up, p_.shared_gate_up + S, 2 * S, n, S, p_.shared_act, S, true, s);
    gemm_one(prefill_matrix(w.shared_down, w.shared_down16, n), p_.shared_act, S, n, p_.shared_down, H, false,
             s);
  }

  // Prefill kernels on stream_ as programmatic dependent launches (set per chunk): serial while stages
  // are timed (the timer's events between them keep each stage's own time), and for chunks under
  // kOverlapMinRows: 512- and 1K-row chunks lost 3-4 % with them, 2K gained 1 %, 4K and 32K 0.3-0.4 %.
  // (Likely, not measured: most launches of short chunks are under a wave, and blocks placed early
  // pile up on the SMs that free first instead of spreading over all of them.)
  static constexpr int64_t kOverlapMinRows = 2048;
  bool prefill_overlap() const { return chunk_overlap_; }

  // Row stride of the prefill router's output: E logits and the shared gate's, rounded up to whole
  // 16-byte pieces so the GEMM stores rows as such.
  int64_t route_ld() const { return (int64_t{cfg_.n_experts} + 1 + 3) / 4 * 4; }

  // Logits of every row of the chunk just run, into host memory.
  void chunk_logits_all(int64_t n, float* out) {
    const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
    rms_norm_rows(p_.hidden, n, H, weights_.final_norm, cfg_.rms_norm_eps, nullptr, p_.normed, stream_);
    for (int64_t r0 = 0; r0 < n; r0 += kLogitRowsPerPass) {
      const int64_t rows = std::min(kLogitRowsPerPass, n - r0);
      gemm_one(weights_.lm_head, p_.normed + r0 * H, H, rows, p_.logits, V, false);
      check(cudaMemcpyAsync(out + r0 * V, p_.logits, sizeof(float) * static_cast<size_t>(rows * V),
                            cudaMemcpyDeviceToHost, stream_),
            "prefill: logits");
    }
  }

  // The last row's logits, with f32 activations as decode computes them.
  void chunk_logits_last(int64_t n, float* out) {
    const int64_t H = cfg_.hidden_size;
    rms_norm_rows(p_.hidden + (n - 1) * H, 1, H, weights_.final_norm, cfg_.rms_norm_eps, d_.normed, nullptr,
                  stream_);
    gemv_one(weights_.lm_head, d_.normed, d_.logits, false);
    check(cudaMemcpyAsync(out, d_.logits, sizeof(float) * static_cast<size_t>(cfg_.vocab_size),
                          cudaMemcpyDeviceToHost, stream_),
          "prefill: logits");
  }

  const Model& model_;
  const ModelConfig& cfg_;
  int64_t max_context_;
  const CudaOptions options_;   // BackendOptions::cuda_off
  const bool int16_;            // GemvArgs::i16, MoeDecodeArgs::i16: int16 activations unless exact
  int attention_splits_ = 1;    // decode attention: context ranges per kv head
  bool chunk_overlap_ = false;  // prefill_overlap() of the chunk running
  KvDtype kv_dtype_;            // BackendOptions::kv_dtype: bf16 or q8
  StageTimer timer_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t side_ = nullptr;                  // prefill work beside stream_'s (the shared expert)
  cudaEvent_t fork_ = nullptr, join_ = nullptr;  // side_ starts after / stream_ waits for side_
  cudaEvent_t token_ready_[2] = {};              // a step's chosen token is in host_token_[slot]
  // Mapped host memory [2]: a step from set s stores its chosen token in slot s (two steps in flight).
  int32_t* host_token_ = nullptr;
  int32_t* mapped_token_ = nullptr;                // host_token_ as the device addresses it
  int32_t host_token_in_ = 0, host_position_ = 0;  // sources of small host-to-device copies
  CudaModelWeights weights_;

  DeviceBuffer state_buf_;
  // One attention layer's KV cache (attention_cuda.h): bf16 rows, or q8 bytes and their scales.
  struct KvLayer {
    void* k;
    void* v;
    float* k_scale;
    float* v_scale;
  };
  std::vector<KvLayer> kv_cache_;              // per attention layer
  std::pair<uint16_t*, uint16_t*> kv_bf16_{};  // q8: K and V as bf16, for prefill's attention
  // Two sets, per DeltaNet layer: conv window, recurrent S. Set live_ holds the sequence; prefill
  // updates it in place, a decode step writes the other and commit_step swaps them.
  std::array<std::vector<std::pair<float*, float*>>, 2> deltanet_state_;
  int live_ = 0;
  std::vector<int> slot_;  // per layer: index into kv_cache_ or into a set of deltanet_state_

  DeviceBuffer decode_buf_, prefill_buf_;
  DecodeScratch d_{};
  PrefillScratch p_{};
  int64_t prefill_rows_ = 0;
  cudaGraphExec_t graph_[2] = {};  // the decode step from DeltaNet state set 0, and from set 1

  int64_t position_ = 0;
  int32_t device_token_ = -1;  // the token the device's input slot holds, or -1
  bool ahead_ = false;         // a step is queued past position_ for ahead_token_ (the last token returned)
  int32_t ahead_token_ = -1;
  SamplingState sampling_{};
  // The device's draw count after the committed steps, from the sequence's last prefill or reset: the
  // same prompt, sampling parameters and seed then draw the same numbers (DeviceSampling).
  uint64_t draws_ = 0;
  int64_t device_used_peak_ = 0;
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> make_cuda_backend(const Model& model, const BackendOptions& options) {
  return std::make_unique<CudaBackend>(model, options);
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
