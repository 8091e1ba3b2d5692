// The whole model on the CPU: embedding, 40 decoder layers, final norm and lm_head, with f32
// activations (the reference every other backend is checked against); with BackendOptions::mtp the
// MTP head beside it (cpu_mtp.h) and speculation's multi-row step.
#include <algorithm>
#include <memory>
#include <variant>

#include "backend/backend.h"
#include "backend/cpu/cpu_kv_pool.h"
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
        kv_(cfg_, options.kv_dtype, max_context_, std::max(1, options.sequences)) {
    if (options.sequences < 1) fail("the backend must hold at least one sequence, got {}", options.sequences);
    if (options.mtp) {
      if (!model.weights.mtp) fail("the model has no MTP head (no mtp.* tensors), so it cannot draft");
      if (options.sequences > 1)
        fail("the MTP head follows one sequence; {} sequences were asked for", options.sequences);
      head_ = std::make_unique<CpuMtpHead>(model.weights, cfg_, options.kv_dtype);
      pending_.resize(static_cast<size_t>(cfg_.hidden_size));
      draft_hidden_.resize(static_cast<size_t>(cfg_.hidden_size));
    }
    seqs_.reserve(static_cast<size_t>(options.sequences));
    for (int i = 0; i < options.sequences; ++i) seqs_.emplace_back(cfg_);
  }

  std::string name() const override { return "cpu"; }
  void reset() override { reset_sequence(0); }
  int64_t position() const override { return seqs_[0].position; }
  int64_t max_context() const override { return max_context_; }

  int max_sequences() const override { return static_cast<int>(seqs_.size()); }
  void reset_sequence(int sequence) override {
    CpuSequence& seq = at(sequence);
    abandon_step(sequence);
    seq.clear();
    kv_.shrink(seq.blocks, 0);
    if (sequence == 0) sequence_changes();
  }
  int64_t sequence_position(int sequence) const override { return at(sequence).position; }

  void prefill(std::span<const int32_t> tokens, std::span<float> logits,
               const PrefillOptions& options) override {
    prefill_sequence(0, tokens, logits, options);
  }

  void prefill_sequence(int sequence, std::span<const int32_t> tokens, std::span<float> logits,
                        const PrefillOptions& options) override {
    const size_t V = static_cast<size_t>(cfg_.vocab_size);
    CpuSequence& seq = at(sequence);
    check_no_step("prefill");
    check_tokens(seq, tokens);
    if (options.chunk <= 0) fail("prefill chunk must be positive, got {}", options.chunk);
    const size_t need = options.all_logits ? tokens.size() * V : V;
    if (logits.size() < need) fail("prefill: logits buffer holds {} floats, needs {}", logits.size(), need);
    kv_.grow(seq.blocks, seq.position + static_cast<int64_t>(tokens.size()));
    if (sequence == 0) sequence_changes();
    for (size_t done = 0; done < tokens.size();) {
      const size_t n = std::min(tokens.size() - done, static_cast<size_t>(options.chunk));
      const bool last_chunk = done + n == tokens.size();
      float* out = options.all_logits ? logits.data() + done * V : (last_chunk ? logits.data() : nullptr);
      const MatmulPrecision precision = exact_ ? MatmulPrecision::kExact : MatmulPrecision::kFastPrefill;
      const StepSequence one{sequence, 0, static_cast<int64_t>(n)};
      run_layers(tokens.data() + done, std::span<const StepSequence>(&one, 1), options.observer, precision,
                 false);
      finish_rows(tokens.data() + done, static_cast<int64_t>(n), out, options.all_logits, precision);
      seq.position += static_cast<int64_t>(n);
      done += n;
    }
  }

  void decode(int32_t token, std::span<float> logits) override {
    CpuSequence& seq = seqs_[0];
    check_no_step("decode");
    check_tokens(seq, std::span<const int32_t>(&token, 1));
    if (logits.size() < static_cast<size_t>(cfg_.vocab_size)) fail("decode: logits buffer too small");
    kv_.grow(seq.blocks, seq.position + 1);
    sequence_changes();
    const StepSequence one{0, 0, 1};
    run_layers(&token, std::span<const StepSequence>(&one, 1), nullptr, decode_precision(), false);
    finish_rows(&token, 1, logits.data(), false, decode_precision());
    seq.position += 1;
  }

  int max_step_rows() const override { return kMaxStepRowsPerSequence * max_sequences(); }

  void step(std::span<const StepRow> rows, std::span<float> logits) override {
    check_no_step("step");
    const auto n = static_cast<int64_t>(rows.size());
    if (n < 1 || n > max_step_rows())
      fail("step: {} rows; the CPU backend takes 1 to {}", n, max_step_rows());
    if (logits.size() < static_cast<size_t>(n * cfg_.vocab_size))
      fail("step: logits buffer holds {} floats, needs {}", logits.size(), n * cfg_.vocab_size);
    group_step_rows(rows);
    grow_step_sequences();
    const bool keep_rows = step_seqs_.size() == 1;  // only a one-sequence step is committed in part
    for (const StepSequence& s : step_seqs_) {
      if (s.sequence == 0) sequence_changes();
      if (keep_rows) seqs_[static_cast<size_t>(s.sequence)].reserve_row_states(s.n);
    }
    run_layers(step_tokens_.data(), step_seqs_, nullptr, decode_precision(), keep_rows);
    final_rows(n, true, logits.data(), true, decode_precision());
    step_hidden_.reserve(static_cast<size_t>(n * cfg_.hidden_size));
    std::copy_n(normed_.data(), n * cfg_.hidden_size, step_hidden_.data());
    step_rows_ = n;
  }

  void commit(int64_t n) override {
    if (step_rows_ == 0) fail("commit: no step to commit");
    if (n < 1 || n > step_rows_) fail("commit: {} rows of a step of {}", n, step_rows_);
    if (step_seqs_.size() > 1 && n != step_rows_)
      fail("commit: a step of {} sequences is committed whole ({} rows), not {}", step_seqs_.size(),
           step_rows_, n);
    for (const StepSequence& s : step_seqs_) {
      CpuSequence& seq = seqs_[static_cast<size_t>(s.sequence)];
      const int64_t kept = std::min(s.n, n - s.row0);
      if (kept < s.n) seq.keep_row(kept - 1);  // else the live state already is the last row's
      if (s.sequence == 0)
        follow_head(step_tokens_.data() + s.row0, step_hidden_.data() + s.row0 * cfg_.hidden_size, kept,
                    decode_precision());
      seq.position += kept;
      kv_.shrink(seq.blocks, seq.position);
    }
    step_rows_ = 0;
  }

  bool has_draft_head() const override { return head_ != nullptr; }

  void draft_begin(int32_t next, std::span<float> logits) override {
    const int64_t P = seqs_[0].position;
    check_draft(next, logits, P - 1);
    CpuContext ctx = context(decode_precision());
    head_->forward(ctx, &next, pending_.data(), 1, P - 1, draft_hidden_.data(), logits.data());
    draft_position_ = P;
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

  std::unique_ptr<SequenceSnapshot> snapshot() const override { return snapshot_sequence(0); }
  void restore(const SequenceSnapshot& snapshot) override { restore_sequence(0, snapshot); }

  std::unique_ptr<SequenceSnapshot> snapshot_sequence(int sequence) const override {
    const CpuSequence& seq = at(sequence);
    if (step_rows_ > 0) fail("snapshot: commit the step first");
    auto s = std::make_unique<CpuSnapshot>();
    s->owner = this;
    s->position_ = seq.position;
    for (int a = 0; a < attention_layers(); ++a) {
      s->kv.push_back(kv_.layer(a).save(kv_row_runs(seq.blocks, seq.position)));
      s->bytes_ += s->kv.back().size();
    }
    for (const DeltaNetState& d : seq.deltanet) {
      DeltaNetState copy;
      copy.conv.resize(d.conv.size());
      copy.recurrent.resize(d.recurrent.size());
      std::copy_n(d.conv.data(), d.conv.size(), copy.conv.data());
      std::copy_n(d.recurrent.data(), d.recurrent.size(), copy.recurrent.data());
      s->bytes_ += (d.conv.size() + d.recurrent.size()) * sizeof(float);
      s->deltanet.push_back(std::move(copy));
    }
    if (head_ != nullptr && seq.position > 0) {
      s->mtp_kv = head_->cache().save(seq.position - 1);
      s->mtp_pending.assign(pending_.data(), pending_.data() + pending_.size());
      s->bytes_ += s->mtp_kv.size() + s->mtp_pending.size() * sizeof(float);
    }
    return s;
  }

  void restore_sequence(int sequence, const SequenceSnapshot& snapshot) override {
    CpuSequence& seq = at(sequence);
    const auto* s = dynamic_cast<const CpuSnapshot*>(&snapshot);
    if (s == nullptr || s->owner != this) fail("restore: the snapshot was taken from another backend");
    abandon_step(sequence);
    kv_.grow(seq.blocks, s->position_);  // first: when the pool is full, nothing has changed
    kv_.shrink(seq.blocks, s->position_);
    for (int a = 0; a < attention_layers(); ++a) {
      const KvRows rows = kv_.rows(a, seq.blocks);
      rows.cache->load(s->kv[static_cast<size_t>(a)], rows.runs(s->position_));
    }
    seq.copy_deltanet_from(s->deltanet);
    seq.position = s->position_;
    if (sequence == 0) sequence_changes();
    if (head_ != nullptr && seq.position > 0) {
      head_->cache().load(s->mtp_kv, seq.position - 1, max_context_);
      std::copy(s->mtp_pending.begin(), s->mtp_pending.end(), pending_.data());
    }
  }

 private:
  // One of the rows of a step (or a prefill chunk or decode): rows [row0, row0 + n) are the
  // sequence's next n positions.
  struct StepSequence {
    int sequence = 0;
    int64_t row0 = 0, n = 0;
  };

  CpuSequence& at(int sequence) {
    return const_cast<CpuSequence&>(static_cast<const CpuBackend*>(this)->at(sequence));
  }
  const CpuSequence& at(int sequence) const {
    if (sequence < 0 || sequence >= max_sequences())
      fail("sequence {} does not exist; the backend holds sequences 0 to {}", sequence, max_sequences() - 1);
    return seqs_[static_cast<size_t>(sequence)];
  }

  int attention_layers() const {
    return static_cast<int>(std::count(cfg_.layers.begin(), cfg_.layers.end(), LayerKind::kAttention));
  }

  void check_tokens(const CpuSequence& seq, std::span<const int32_t> tokens) const {
    for (int32_t t : tokens)
      if (t < 0 || t >= cfg_.vocab_size)
        fail("token id {} is out of range (vocab size {})", t, cfg_.vocab_size);
    if (seq.position + static_cast<int64_t>(tokens.size()) > max_context_)
      fail("context overflow: {} tokens in the sequence + {} new exceed the context size {}", seq.position,
           tokens.size(), max_context_);
  }

  // Splits a step's rows into step_seqs_ (their tokens into step_tokens_), checking that each
  // sequence's rows are adjacent, at its next positions, with valid tokens.
  void group_step_rows(std::span<const StepRow> rows) {
    step_seqs_.clear();
    step_tokens_.clear();
    std::vector<bool> seen(seqs_.size(), false);
    for (size_t i = 0; i < rows.size(); ++i) {
      const StepRow& r = rows[i];
      const CpuSequence& seq = at(r.sequence);
      const bool continues = !step_seqs_.empty() && step_seqs_.back().sequence == r.sequence;
      if (!continues) {
        if (seen[static_cast<size_t>(r.sequence)])
          fail("step: row {} names sequence {}, whose rows must be adjacent", i, r.sequence);
        seen[static_cast<size_t>(r.sequence)] = true;
        step_seqs_.push_back({r.sequence, static_cast<int64_t>(i), 0});
      }
      StepSequence& s = step_seqs_.back();
      if (r.position != seq.position + s.n)
        fail("step: row {} is at position {}; sequence {}'s rows must be its consecutive positions from {}",
             i, r.position, r.sequence, seq.position);
      step_tokens_.push_back(r.token);
      ++s.n;
    }
    for (const StepSequence& s : step_seqs_)
      check_tokens(seqs_[static_cast<size_t>(s.sequence)],
                   std::span<const int32_t>(step_tokens_.data() + s.row0, static_cast<size_t>(s.n)));
  }

  // KV room for every sequence of the step, all or none.
  void grow_step_sequences() {
    size_t grown = 0;
    try {
      for (; grown < step_seqs_.size(); ++grown) {
        CpuSequence& seq = seqs_[static_cast<size_t>(step_seqs_[grown].sequence)];
        kv_.grow(seq.blocks, seq.position + step_seqs_[grown].n);
      }
    } catch (const Error&) {
      for (size_t i = 0; i < grown; ++i) {
        CpuSequence& seq = seqs_[static_cast<size_t>(step_seqs_[i].sequence)];
        kv_.shrink(seq.blocks, seq.position);
      }
      throw;
    }
  }

  // Resetting or restoring `sequence` drops an uncommitted step of that sequence alone; a step of
  // several sequences has advanced the others' DeltaNet states, so it must be committed first.
  void abandon_step(int sequence) {
    if (step_rows_ == 0) return;
    if (step_seqs_.size() > 1 || step_seqs_[0].sequence != sequence)
      fail("sequence {}: the last step is not committed", sequence);
    step_rows_ = 0;
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
    if (seqs_[0].position < 1) fail("draft: the sequence is empty; prefill first");
    if (token < 0 || token >= cfg_.vocab_size)
      fail("token id {} is out of range (vocab size {})", token, cfg_.vocab_size);
    if (position >= max_context_)
      fail("draft: position {} is past the context size {}", position, max_context_);
    if (logits.size() < static_cast<size_t>(cfg_.vocab_size)) fail("draft: logits buffer too small");
  }

  // The rows of `seqs` (tokens [n], each sequence's at its next positions) through the decoder
  // layers; the residual stream ends in hidden_. With `keep_rows`, each DeltaNet layer also keeps its
  // state after every row. The observer sees prefill's single sequence.
  void run_layers(const int32_t* tokens, std::span<const StepSequence> seqs, const LayerObserver& observer,
                  MatmulPrecision precision, bool keep_rows) {
    const ModelWeights& w = model_.weights;
    const int64_t H = cfg_.hidden_size;
    const int64_t n = seqs.back().row0 + seqs.back().n;
    const int64_t pos0 = seqs_[static_cast<size_t>(seqs[0].sequence)].position;
    const CpuContext ctx = context(precision);
    for (AlignedBuffer<float>* b : {&hidden_, &normed_, &branch_}) b->reserve(static_cast<size_t>(n * H));
    float* hidden = hidden_.data();

    pool_.parallel_for(static_cast<size_t>(n),
                       [&](size_t t, int) { dequantize_row(w.embed, tokens[t], hidden + t * H); });
    if (observer) observer(0, hidden, n, pos0);
    layer_rows_.resize(seqs.size());
    for (int L = 0; L < cfg_.n_layers(); ++L) {
      const LayerWeights& lw = w.layers[static_cast<size_t>(L)];
      const bool attention = std::holds_alternative<AttentionWeights>(lw.mixer);
      for (size_t i = 0; i < seqs.size(); ++i) {
        CpuSequence& seq = seqs_[static_cast<size_t>(seqs[i].sequence)];
        const auto slot = seq.slot[static_cast<size_t>(L)];
        SequenceRows& rows = layer_rows_[i];
        rows = SequenceRows{seqs[i].row0, seqs[i].n, seq.position, {}};
        if (attention) {
          rows.state.kv = kv_.rows(slot, seq.blocks);
        } else {
          rows.state.deltanet = &seq.deltanet[static_cast<size_t>(slot)];
          if (keep_rows) rows.state.row_states = seq.row_states[static_cast<size_t>(slot)].data();
        }
      }
      decoder_layer(ctx, lw, layer_rows_, hidden, normed_.data(), branch_.data(), n);
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
    const int64_t H = cfg_.hidden_size, P = seqs_[0].position;
    head_input_.reserve(static_cast<size_t>(n * H));
    float* in = head_input_.data();
    const bool first = P == 0;  // position 0 has no earlier hidden state
    if (!first) std::copy_n(pending_.data(), H, in);
    std::copy_n(normed, (n - 1) * H, in + (first ? 0 : H));
    CpuContext ctx = context(precision);
    head_->forward(ctx, tokens + (first ? 1 : 0), in, first ? n - 1 : n, first ? 0 : P - 1, nullptr, nullptr);
    std::copy_n(normed + (n - 1) * H, H, pending_.data());
  }

  static constexpr int kMaxStepRowsPerSequence = 8;

  const Model& model_;
  const ModelConfig& cfg_;
  ThreadPool pool_;
  RopeTable rope_;
  int64_t max_context_;
  bool exact_;      // f32 activations in every matmul; else the fast paths per phase (matmul_parallel.h)
  KvBlockPool kv_;  // the attention KV rows of every sequence
  std::vector<CpuSequence> seqs_;                  // max_sequences() of them
  ScratchArena arena_;                             // per-layer temporaries
  std::vector<SequenceRows> layer_rows_;           // run_layers' runs of one layer
  AlignedBuffer<float> hidden_, normed_, branch_;  // [chunk, hidden]: residual stream and its branches

  // The last uncommitted step: its row count (0: none), sequences, tokens and final-normed hidden
  // states.
  int64_t step_rows_ = 0;
  std::vector<StepSequence> step_seqs_;
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
