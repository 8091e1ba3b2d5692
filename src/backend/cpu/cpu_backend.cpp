// The whole model on the CPU: embedding, 40 decoder layers, final norm and lm_head, with f32
// activations (the reference every other backend is checked against); with BackendOptions::mtp the
// MTP head beside it (cpu_mtp.h) and speculation's multi-row step.
#include <algorithm>
#include <memory>
#include <variant>

#include "backend/backend.h"
#include "backend/cpu/cpu_layers.h"
#include "backend/cpu/cpu_mtp.h"
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
  std::vector<uint8_t> mtp_kv;     // the head's rows [0, position - 1)
  std::vector<float> mtp_pending;  // the head's pending hidden state (CpuBackend::pending_)
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
        seq_(cfg_, options.kv_dtype) {
    if (options.mtp) {
      if (!model.weights.mtp) fail("the model has no MTP head (no mtp.* tensors), so it cannot draft");
      head_ = std::make_unique<CpuMtpHead>(model.weights, cfg_, options.kv_dtype);
      pending_.resize(static_cast<size_t>(cfg_.hidden_size));
      draft_hidden_.resize(static_cast<size_t>(cfg_.hidden_size));
    }
  }

  std::string name() const override { return "cpu"; }
  void reset() override {
    seq_.clear();
    step_rows_ = 0;
    sequence_changes();
  }
  int64_t position() const override { return seq_.position; }
  int64_t max_context() const override { return max_context_; }

  void prefill(std::span<const int32_t> tokens, std::span<float> logits,
               const PrefillOptions& options) override {
    const size_t V = static_cast<size_t>(cfg_.vocab_size);
    check_no_step("prefill");
    check_tokens(tokens);
    sequence_changes();
    if (options.chunk <= 0) fail("prefill chunk must be positive, got {}", options.chunk);
    const size_t need = options.all_logits ? tokens.size() * V : V;
    if (logits.size() < need) fail("prefill: logits buffer holds {} floats, needs {}", logits.size(), need);
    for (size_t done = 0; done < tokens.size();) {
      const size_t n = std::min(tokens.size() - done, static_cast<size_t>(options.chunk));
      const bool last_chunk = done + n == tokens.size();
      float* out = options.all_logits ? logits.data() + done * V : (last_chunk ? logits.data() : nullptr);
      const MatmulPrecision precision = exact_ ? MatmulPrecision::kExact : MatmulPrecision::kFastPrefill;
      run_layers(tokens.data() + done, static_cast<int64_t>(n), options.observer, precision, false);
      finish_rows(tokens.data() + done, static_cast<int64_t>(n), out, options.all_logits, precision);
      seq_.position += static_cast<int64_t>(n);
      done += n;
    }
  }

  void decode(int32_t token, std::span<float> logits) override {
    check_no_step("decode");
    check_tokens(std::span<const int32_t>(&token, 1));
    if (logits.size() < static_cast<size_t>(cfg_.vocab_size)) fail("decode: logits buffer too small");
    sequence_changes();
    run_layers(&token, 1, nullptr, decode_precision(), false);
    finish_rows(&token, 1, logits.data(), false, decode_precision());
    seq_.position += 1;
  }

  int max_step_rows() const override { return kMaxStepRows; }

  void step(std::span<const StepRow> rows, std::span<float> logits) override {
    check_no_step("step");
    const auto n = static_cast<int64_t>(rows.size());
    if (n < 1 || n > kMaxStepRows) fail("step: {} rows; the CPU backend takes 1 to {}", n, kMaxStepRows);
    step_tokens_.clear();
    for (int64_t i = 0; i < n; ++i) {
      const StepRow& r = rows[static_cast<size_t>(i)];
      if (r.sequence != 0)
        fail("step: row {} names sequence {}; the CPU backend holds only sequence 0", i, r.sequence);
      if (r.position != seq_.position + i)
        fail("step: row {} is at position {}; the rows must be the consecutive positions from {}", i,
             r.position, seq_.position);
      step_tokens_.push_back(r.token);
    }
    check_tokens(step_tokens_);
    if (logits.size() < static_cast<size_t>(n * cfg_.vocab_size))
      fail("step: logits buffer holds {} floats, needs {}", logits.size(), n * cfg_.vocab_size);
    sequence_changes();
    seq_.reserve_row_states(n);
    run_layers(step_tokens_.data(), n, nullptr, decode_precision(), true);
    final_rows(n, true, logits.data(), true, decode_precision());
    step_hidden_.reserve(static_cast<size_t>(n * cfg_.hidden_size));
    std::copy_n(normed_.data(), n * cfg_.hidden_size, step_hidden_.data());
    step_rows_ = n;
  }

  void commit(int64_t n) override {
    if (step_rows_ == 0) fail("commit: no step to commit");
    if (n < 1 || n > step_rows_) fail("commit: {} rows of a step of {}", n, step_rows_);
    if (n < step_rows_) seq_.keep_row(n - 1);  // else the live state already is the last row's
    follow_head(step_tokens_.data(), step_hidden_.data(), n, decode_precision());
    seq_.position += n;
    step_rows_ = 0;
  }

  bool has_draft_head() const override { return head_ != nullptr; }

  void draft_begin(int32_t next, std::span<float> logits) override {
    check_draft(next, logits, seq_.position - 1);
    CpuContext ctx = context(decode_precision());
    head_->forward(ctx, &next, pending_.data(), 1, seq_.position - 1, draft_hidden_.data(), logits.data());
    draft_position_ = seq_.position;
    drafting_ = true;
  }

  void draft_continue(int32_t token, std::span<float> logits) override {
    if (!drafting_) fail("draft_continue: no draft was begun since the sequence last changed");
    check_draft(token, logits, draft_position_);
    CpuContext ctx = context(decode_precision());
    head_input_.reserve(static_cast<size_t>(cfg_.hidden_size));
    std::copy_n(draft_hidden_.data(), cfg_.hidden_size, head_input_.data());
    head_->forward(ctx, &token, head_input_.data(), 1, draft_position_, draft_hidden_.data(), logits.data());
    ++draft_position_;
  }

  bool decode_matches_prefill() const override { return exact_; }

  std::unique_ptr<SequenceSnapshot> snapshot() const override {
    if (step_rows_ > 0) fail("snapshot: commit the step first");
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
    if (head_ != nullptr && seq_.position > 0) {
      s->mtp_kv = head_->cache().save(seq_.position - 1);
      s->mtp_pending.assign(pending_.data(), pending_.data() + pending_.size());
      s->bytes_ += s->mtp_kv.size() + s->mtp_pending.size() * sizeof(float);
    }
    return s;
  }

  void restore(const SequenceSnapshot& snapshot) override {
    const auto* s = dynamic_cast<const CpuSnapshot*>(&snapshot);
    if (s == nullptr || s->owner != this) fail("restore: the snapshot was taken from another backend");
    for (size_t i = 0; i < seq_.kv.size(); ++i) seq_.kv[i].load(s->kv[i], s->position_, max_context_);
    seq_.copy_deltanet_from(s->deltanet);
    seq_.position = s->position_;
    step_rows_ = 0;
    sequence_changes();
    if (head_ != nullptr && seq_.position > 0) {
      head_->cache().load(s->mtp_kv, seq_.position - 1, max_context_);
      std::copy(s->mtp_pending.begin(), s->mtp_pending.end(), pending_.data());
    }
  }

 private:
  void check_tokens(std::span<const int32_t> tokens) const {
    for (int32_t t : tokens)
      if (t < 0 || t >= cfg_.vocab_size)
        fail("token id {} is out of range (vocab size {})", t, cfg_.vocab_size);
    if (seq_.position + static_cast<int64_t>(tokens.size()) > max_context_)
      fail("context overflow: {} tokens in the sequence + {} new exceed the context size {}", seq_.position,
           tokens.size(), max_context_);
  }

  MatmulPrecision decode_precision() const {
    return exact_ ? MatmulPrecision::kExact : MatmulPrecision::kFastDecode;
  }

  CpuContext context(MatmulPrecision precision) {
    return CpuContext{cfg_, pool_, active_vector_ops(), rope_, arena_, max_context_, precision};
  }

  void check_no_step(const char* what) const {
    if (step_rows_ > 0) fail("{}: the last step is not committed", what);
  }

  // Every change to the sequence ends a draft.
  void sequence_changes() { drafting_ = false; }

  void check_draft(int32_t token, std::span<float> logits, int64_t position) const {
    if (head_ == nullptr) fail("draft: the MTP head is not running (BackendOptions::mtp)");
    check_no_step("draft");
    if (seq_.position < 1) fail("draft: the sequence is empty; prefill first");
    if (token < 0 || token >= cfg_.vocab_size)
      fail("token id {} is out of range (vocab size {})", token, cfg_.vocab_size);
    if (position >= max_context_)
      fail("draft: position {} is past the context size {}", position, max_context_);
    if (logits.size() < static_cast<size_t>(cfg_.vocab_size)) fail("draft: logits buffer too small");
  }

  // n rows at positions [position, position + n) through the decoder layers; the residual stream
  // ends in hidden_. With `keep_rows`, each DeltaNet layer also keeps its state after every row.
  void run_layers(const int32_t* tokens, int64_t n, const LayerObserver& observer, MatmulPrecision precision,
                  bool keep_rows) {
    const ModelWeights& w = model_.weights;
    const int64_t H = cfg_.hidden_size;
    const int64_t pos0 = seq_.position;
    const CpuContext ctx = context(precision);
    for (AlignedBuffer<float>* b : {&hidden_, &normed_, &branch_}) b->reserve(static_cast<size_t>(n * H));
    float* hidden = hidden_.data();

    pool_.parallel_for(static_cast<size_t>(n),
                       [&](size_t t, int) { dequantize_row(w.embed, tokens[t], hidden + t * H); });
    if (observer) observer(0, hidden, n, pos0);
    for (int L = 0; L < cfg_.n_layers(); ++L) {
      const LayerWeights& lw = w.layers[static_cast<size_t>(L)];
      const auto slot = static_cast<size_t>(seq_.slot[static_cast<size_t>(L)]);
      LayerState state;
      if (std::holds_alternative<AttentionWeights>(lw.mixer)) {
        state.kv = &seq_.kv[slot];
      } else {
        state.deltanet = &seq_.deltanet[slot];
        if (keep_rows) state.row_states = seq_.row_states[slot].data();
      }
      decoder_layer(ctx, lw, state, hidden, normed_.data(), branch_.data(), n, pos0);
      if (observer) observer(L + 1, hidden, n, pos0);
    }
  }

  // Final norm of the last row (every row with `norm_all` or `all_logits`) into normed_, and the
  // logits of the last row (every row with `all_logits`) when `logits` is non-null.
  void final_rows(int64_t n, bool norm_all, float* logits, bool all_logits, MatmulPrecision precision) {
    const int64_t H = cfg_.hidden_size;
    const int64_t first = norm_all || all_logits ? 0 : n - 1;
    pool_.parallel_for(static_cast<size_t>(n - first), [&](size_t t, int) {
      const int64_t r = first + static_cast<int64_t>(t);
      rms_norm(hidden_.data() + r * H, model_.weights.final_norm.data(), cfg_.rms_norm_eps, H,
               normed_.data() + r * H);
    });
    if (logits == nullptr) return;
    const int64_t from = all_logits ? 0 : n - 1;
    matmul(matmul_problem(model_.weights.lm_head, normed_.data() + from * H, static_cast<size_t>(H),
                          static_cast<size_t>(n - from), logits, static_cast<size_t>(cfg_.vocab_size)),
           pool_, precision);
  }

  // After run_layers over `tokens` [n]: their logits (as prefill's `logits`), and the head follows.
  void finish_rows(const int32_t* tokens, int64_t n, float* logits, bool all_logits,
                   MatmulPrecision precision) {
    if (logits == nullptr && head_ == nullptr) return;
    final_rows(n, head_ != nullptr, logits, all_logits, precision);
    follow_head(tokens, normed_.data(), n, precision);
  }

  // The head follows the sequence as n rows (tokens [n], final-normed hidden states `normed`
  // [n, hidden]) join it at positions [P, P + n), P = position(): head row t takes the hidden
  // state at t and the token at t + 1, so rows P - 1 .. P + n - 2 run now and the hidden state at
  // P + n - 1 waits in pending_ for the next token.
  void follow_head(const int32_t* tokens, const float* normed, int64_t n, MatmulPrecision precision) {
    if (head_ == nullptr || n == 0) return;
    const int64_t H = cfg_.hidden_size, P = seq_.position;
    head_input_.reserve(static_cast<size_t>(n * H));
    float* in = head_input_.data();
    const bool first = P == 0;  // position 0 has no earlier hidden state
    if (!first) std::copy_n(pending_.data(), H, in);
    std::copy_n(normed, (n - 1) * H, in + (first ? 0 : H));
    CpuContext ctx = context(precision);
    head_->forward(ctx, tokens + (first ? 1 : 0), in, first ? n - 1 : n, first ? 0 : P - 1, nullptr, nullptr);
    std::copy_n(normed + (n - 1) * H, H, pending_.data());
  }

  static constexpr int kMaxStepRows = 8;

  const Model& model_;
  const ModelConfig& cfg_;
  ThreadPool pool_;
  RopeTable rope_;
  int64_t max_context_;
  bool exact_;  // f32 activations in every matmul; else the fast paths per phase (matmul_parallel.h)
  CpuSequence seq_;
  ScratchArena arena_;                             // per-layer temporaries
  AlignedBuffer<float> hidden_, normed_, branch_;  // [chunk, hidden]: residual stream and its branches

  // The last uncommitted step: its row count (0: none), tokens and final-normed hidden states.
  int64_t step_rows_ = 0;
  std::vector<int32_t> step_tokens_;
  AlignedBuffer<float> step_hidden_;

  std::unique_ptr<CpuMtpHead> head_;  // null unless BackendOptions::mtp
  // The main model's final-normed hidden state at position() - 1: its head row waits for the token
  // at position(), which the next prefill, decode, commit or draft brings.
  AlignedBuffer<float> pending_;
  AlignedBuffer<float> head_input_;    // the head's input hidden rows
  AlignedBuffer<float> draft_hidden_;  // the last draft row's g
  int64_t draft_position_ = 0;         // head position of the next draft row
  bool drafting_ = false;              // draft_begin ran and nothing advanced the sequence since
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Model& model, const BackendOptions& options) {
  return std::make_unique<CpuBackend>(model, options);
}

}  // namespace qwick
