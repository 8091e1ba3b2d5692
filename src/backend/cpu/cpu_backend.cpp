// The whole model on the CPU: embedding, 40 decoder layers, final norm and lm_head, with f32
// activations (the reference every other backend is checked against).
#include <algorithm>
#include <memory>
#include <variant>

#include "backend/backend.h"
#include "backend/cpu/cpu_layers.h"
#include "core/error.h"
#include "kernels/matmul/matmul_parallel.h"
#include "kernels/norm/rms_norm.h"
#include "kernels/vector/vector_ops_select.h"
#include "model/model.h"

namespace qwick {
namespace {

class CpuSnapshot final : public SequenceSnapshot {
 public:
  int64_t position() const override { return position_; }
  size_t bytes() const override { return bytes_; }

  const void* owner = nullptr;  // the backend it came from
  int64_t position_ = 0;
  size_t bytes_ = 0;
  std::vector<std::vector<uint8_t>> kv;  // per attention layer: rows [0, position)
  std::vector<DeltaNetState> deltanet;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Model& model, const BackendOptions& options)
      : model_(model),
        cfg_(model.config),
        pool_(options.threads),
        rope_(cfg_.rope_theta, cfg_.rotary_dim),
        max_context_(options.max_context > 0 ? options.max_context : cfg_.max_position_embeddings),
        exact_(options.exact),
        seq_(cfg_, options.kv_dtype) {}

  std::string name() const override { return "cpu"; }
  void reset() override { seq_.clear(); }
  int64_t position() const override { return seq_.position; }
  int64_t max_context() const override { return max_context_; }

  void prefill(std::span<const int32_t> tokens, std::span<float> logits, const PrefillOptions& options) override {
    const size_t V = static_cast<size_t>(cfg_.vocab_size);
    check_tokens(tokens);
    if (options.chunk <= 0) fail("prefill chunk must be positive, got {}", options.chunk);
    const size_t need = options.all_logits ? tokens.size() * V : V;
    if (logits.size() < need) fail("prefill: logits buffer holds {} floats, needs {}", logits.size(), need);
    for (size_t done = 0; done < tokens.size();) {
      const size_t n = std::min(tokens.size() - done, static_cast<size_t>(options.chunk));
      const bool last_chunk = done + n == tokens.size();
      float* out = options.all_logits ? logits.data() + done * V : (last_chunk ? logits.data() : nullptr);
      forward(tokens.data() + done, static_cast<int64_t>(n), out, options.all_logits, options.observer,
              exact_ ? MatmulPrecision::kExact : MatmulPrecision::kFastPrefill);
      done += n;
    }
  }

  void decode(int32_t token, std::span<float> logits) override {
    check_tokens(std::span<const int32_t>(&token, 1));
    if (logits.size() < static_cast<size_t>(cfg_.vocab_size)) fail("decode: logits buffer too small");
    forward(&token, 1, logits.data(), false, nullptr, exact_ ? MatmulPrecision::kExact : MatmulPrecision::kFastDecode);
  }

  bool decode_matches_prefill() const override { return exact_; }

  std::unique_ptr<SequenceSnapshot> snapshot() const override {
    auto s = std::make_unique<CpuSnapshot>();
    s->owner = this;
    s->position_ = seq_.position;
    for (const KvCache& kv : seq_.kv) {
      s->kv.push_back(kv.save(seq_.position));
      s->bytes_ += s->kv.back().size();
    }
    for (const DeltaNetState& d : seq_.deltanet) {
      DeltaNetState copy;
      copy.conv.resize(d.conv.size());
      copy.recurrent.resize(d.recurrent.size());
      std::copy_n(d.conv.data(), d.conv.size(), copy.conv.data());
      std::copy_n(d.recurrent.data(), d.recurrent.size(), copy.recurrent.data());
      s->bytes_ += (d.conv.size() + d.recurrent.size()) * sizeof(float);
      s->deltanet.push_back(std::move(copy));
    }
    return s;
  }

  void restore(const SequenceSnapshot& snapshot) override {
    const auto* s = dynamic_cast<const CpuSnapshot*>(&snapshot);
    if (s == nullptr || s->owner != this) fail("restore: the snapshot was taken from another backend");
    for (size_t i = 0; i < seq_.kv.size(); ++i) seq_.kv[i].load(s->kv[i], s->position_, max_context_);
    seq_.copy_deltanet_from(s->deltanet);
    seq_.position = s->position_;
  }

 private:
  void check_tokens(std::span<const int32_t> tokens) const {
    for (int32_t t : tokens)
      if (t < 0 || t >= cfg_.vocab_size) fail("token id {} is out of range (vocab size {})", t, cfg_.vocab_size);
    if (seq_.position + static_cast<int64_t>(tokens.size()) > max_context_)
      fail("context overflow: {} tokens in the sequence + {} new exceed the context size {}", seq_.position,
           tokens.size(), max_context_);
  }

  // n rows at positions [position, position + n). `logits`: null, the last row's, or every row's.
  void forward(const int32_t* tokens, int64_t n, float* logits, bool all_rows, const LayerObserver& observer,
               MatmulPrecision precision) {
    const ModelWeights& w = model_.weights;
    const int64_t H = cfg_.hidden_size;
    const int64_t pos0 = seq_.position;
    CpuContext ctx{cfg_, pool_, active_vector_ops(), rope_, arena_, max_context_, precision};
    for (AlignedBuffer<float>* b : {&hidden_, &normed_, &branch_}) b->reserve(static_cast<size_t>(n * H));
    float* hidden = hidden_.data();
    float* normed = normed_.data();
    float* branch = branch_.data();

    pool_.parallel_for(static_cast<size_t>(n), [&](size_t t, int) { dequantize_row(w.embed, tokens[t], hidden + t * H); });
    if (observer) observer(0, hidden, n, pos0);

    auto norm_rows = [&](const std::vector<float>& weight, int64_t first, int64_t count) {
      pool_.parallel_for(static_cast<size_t>(count), [&](size_t t, int) {
        const int64_t r = first + static_cast<int64_t>(t);
        rms_norm(hidden + r * H, weight.data(), cfg_.rms_norm_eps, H, normed + r * H);
      });
    };
    auto add_branch = [&] {
      pool_.parallel_for(static_cast<size_t>(n), [&](size_t t, int) {
        for (int64_t j = 0; j < H; ++j) hidden[static_cast<int64_t>(t) * H + j] += branch[static_cast<int64_t>(t) * H + j];
      });
    };

    for (int L = 0; L < cfg_.n_layers(); ++L) {
      const LayerWeights& lw = w.layers[static_cast<size_t>(L)];
      const int slot = seq_.slot[static_cast<size_t>(L)];
      norm_rows(lw.input_norm, 0, n);
      arena_.reset();  // layer temporaries live until the layer's output is added
      if (const auto* att = std::get_if<AttentionWeights>(&lw.mixer))
        attention_forward(ctx, *att, seq_.kv[static_cast<size_t>(slot)], normed, n, pos0, branch);
      else
        deltanet_forward(ctx, std::get<DeltaNetWeights>(lw.mixer), seq_.deltanet[static_cast<size_t>(slot)], normed, n,
                         branch);
      add_branch();
      norm_rows(lw.post_norm, 0, n);
      arena_.reset();
      moe_forward(ctx, lw.moe, normed, n, branch);
      add_branch();
      if (observer) observer(L + 1, hidden, n, pos0);
    }
    seq_.position += n;

    if (logits == nullptr) return;
    const int64_t first = all_rows ? 0 : n - 1, rows = all_rows ? n : 1;
    norm_rows(w.final_norm, first, rows);
    matmul(matmul_problem(w.lm_head, normed + first * H, static_cast<size_t>(H), static_cast<size_t>(rows), logits,
                          static_cast<size_t>(cfg_.vocab_size)),
           pool_, precision);
  }

  const Model& model_;
  const ModelConfig& cfg_;
  ThreadPool pool_;
  RopeTable rope_;
  int64_t max_context_;
  bool exact_;  // f32 activations in every matmul; else the fast paths per phase (matmul_parallel.h)
  CpuSequence seq_;
  ScratchArena arena_;                         // per-layer temporaries
  AlignedBuffer<float> hidden_, normed_, branch_;  // [chunk, hidden]: residual stream and its branches
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Model& model, const BackendOptions& options) {
  return std::make_unique<CpuBackend>(model, options);
}

}  // namespace qwick
