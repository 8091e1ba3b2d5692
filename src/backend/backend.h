// The boundary between the runtime and a device: sequences, two explicit forward entry points.
//
// A backend is chosen once at load (make_backend: "cpu", or "cuda" where built). It owns the sequence
// state of its conversations (attention KV rows, DeltaNet conv and recurrent states) and advances it:
//   prefill(tokens)  many rows at once, in bounded chunks (matrix-shaped work)
//   decode(token)    one row (bandwidth-shaped work)
// Both append to the same sequence, so "prefill N, then decode k" equals "prefill N + k".
//
// Speculative decoding adds a multi-row decode step and the model's MTP head (model-spec.md §2.8):
//   draft_begin(next) / draft_continue(d)   the head proposes the tokens after `next`, one by one
//   step(rows)                              one pass over several rows, the logits of each
//   commit(n)                               keeps the first n rows of the step
// A step is a decode step over R rows, each tagged with its sequence and position. Verifying a
// draft is the case of R consecutive positions of the one sequence: the backend keeps the DeltaNet
// state after every row, so commit(n) continues from any accepted prefix; attention rows of the
// rejected positions stay in the cache and are overwritten when those positions are decoded again.
// Continuous batching is the case of rows of several sequences (commit then keeps every row).
//
// Sequences. A backend holds max_sequences() sequences (BackendOptions::sequences; the CUDA backend
// holds one), numbered 0 .. max_sequences() - 1, each with its own DeltaNet states. Their attention KV
// rows share one pool: a sequence takes room as it grows and gives it back when reset, so one long
// conversation and several short ones fit where as many long ones would not. Any sequences whose
// lengths add up to at most max_context() fit; each is also at most max_context() long. A call that
// would overfill the pool throws Error and changes nothing. The calls that name no
// sequence (reset, position, prefill, decode, snapshot, restore, the MTP head) address sequence 0;
// the *_sequence calls address any:
//   reset_sequence(s)              empties s and returns its KV room to the pool
//   sequence_position(s)           tokens in s so far
//   prefill_sequence(s, tokens..)  prefill into s
//   snapshot_sequence(s)           a snapshot of s, restorable into any sequence of the backend
//   restore_sequence(s, snapshot)
// and step() takes rows of any of them, which is how several sequences decode together.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/kv_dtype.h"
#include "core/sampling_params.h"

namespace qwick {

struct Model;

struct BackendOptions {
  int threads = 0;                    // CPU worker threads, 0 = one per core
  int64_t max_context = 0;            // 0 = the model's max_position_embeddings
  KvDtype kv_dtype = KvDtype::kBF16;  // attention KV cache element type (the CUDA backend: bf16 or q8)
  // f32 activations in every matrix product (the reference numerics). Off, the CPU's decode products
  // against 4-bit weights quantize the activation per 64 values to 15 bits in two int8 parts, its
  // prefill products run on bf16 operands (docs/cpu.md), and the CUDA decode's take int16 per 32.
  bool exact = false;
  // Debug switches of the CUDA backend, comma separated (backend/cuda/cuda_options.h lists them;
  // unknown names are an error there). Ignored by the CPU backend.
  std::string cuda_off;
  // Run the model's MTP head beside the main model (Backend::has_draft_head): its cache fills while
  // the sequence advances, one extra layer a token. Error when the model has no head.
  bool mtp = false;
  // Sequences held at once (Backend::max_sequences), their KV rows sharing the max_context pool. The
  // CUDA backend holds one; the CPU backend any number, but one with `mtp` (the head follows a single
  // sequence).
  int sequences = 1;
};

// Bytes a backend holds on its device (all 0 for the CPU backend).
struct BackendMemory {
  int64_t weights = 0, state = 0, scratch = 0;
  int64_t peak = 0;         // most bytes held at once by this process's device buffers
  int64_t device_used = 0;  // the device's own count of used memory (all processes), largest seen
  int64_t device_free = 0;  // the device's free memory now (all processes)
};

// Called after the embedding (stage 0) and after each layer (stage L + 1) of every prefill chunk:
// hidden rows [n_rows, hidden] for positions [pos0, pos0 + n_rows).
using LayerObserver = std::function<void(int stage, const float* hidden, int64_t n_rows, int64_t pos0)>;

struct PrefillOptions {
  int64_t chunk = 512;      // rows per forward pass; bounds activation memory
  bool all_logits = false;  // logits for every token instead of only the last
  LayerObserver observer;   // optional, for layer-by-layer comparisons
  // Optional: milliseconds of device time per stage of the pass are added here (CUDA; the CPU
  // backend leaves it empty). Costs a synchronization per chunk.
  std::map<std::string, double>* stage_ms = nullptr;
};

// A copy of a sequence's state at one position (attention KV rows [0, position), DeltaNet conv
// windows and recurrent states), to resume from later: the hybrid model cannot be cut back to an
// earlier position, so prompt reuse across requests restores a snapshot instead.
class SequenceSnapshot {
 public:
  virtual ~SequenceSnapshot() = default;
  virtual int64_t position() const = 0;
  virtual size_t bytes() const = 0;  // memory held
};

// One row of a multi-row decode step (Backend::step).
struct StepRow {
  int32_t token = 0;
  int32_t sequence = 0;  // which of the backend's sequences (0 .. max_sequences() - 1)
  int64_t position = 0;  // the token's position in that sequence
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Starts a new, empty sequence.
  virtual void reset() = 0;
  // Tokens in the sequence so far.
  virtual int64_t position() const = 0;
  virtual int64_t max_context() const = 0;

  // Appends `tokens`; writes the last token's logits ([vocab]) or every token's ([n, vocab]).
  // Throws Error (state unchanged) for an out-of-range token or when the context would overflow.
  virtual void prefill(std::span<const int32_t> tokens, std::span<float> logits,
                       const PrefillOptions& options) = 0;
  // Appends one token and writes its logits [vocab].
  virtual void decode(int32_t token, std::span<float> logits) = 0;

  // The current sequence state; restoring it later continues exactly as if nothing had run in
  // between. restore() throws Error for a snapshot of another backend or model.
  virtual std::unique_ptr<SequenceSnapshot> snapshot() const = 0;
  virtual void restore(const SequenceSnapshot& snapshot) = 0;
  // Whether decoding a token leaves exactly the state that prefilling it would. When not (the phases
  // use different numerics), a state reached by decoding must not stand in for a prefilled prompt
  // if reuse is to give the same output as a fresh start.
  virtual bool decode_matches_prefill() const = 0;
  // Appends one token and chooses the next one on the device, which also writes it into the next
  // step's input slot; no logits come back. It applies the cuts, the temperature and the seed of
  // `sampling` (0 / 1 disable a cut), not its penalties or biases: the caller samples on the host when
  // those are set. The draws are numbered from the sequence's last prefill, so a prompt sampled again
  // with the same parameters and seed gives the same tokens. False when the backend has no such path
  // (the caller then samples from decode()'s logits).
  virtual bool decode_sampled(int32_t /*token*/, const SamplingParams& /*sampling*/, int32_t* /*next*/) {
    return false;
  }
  virtual BackendMemory memory() const { return {}; }

  // --- Several sequences (see the top of this file). A backend of one sequence keeps these
  // defaults, which address sequence 0 through the calls above and reject any other. ---

  virtual int max_sequences() const { return 1; }
  virtual void reset_sequence(int sequence) {
    check_sequence(sequence);
    reset();
  }
  virtual int64_t sequence_position(int sequence) const {
    check_sequence(sequence);
    return position();
  }
  virtual void prefill_sequence(int sequence, std::span<const int32_t> tokens, std::span<float> logits,
                                const PrefillOptions& options) {
    check_sequence(sequence);
    prefill(tokens, logits, options);
  }
  virtual std::unique_ptr<SequenceSnapshot> snapshot_sequence(int sequence) const {
    check_sequence(sequence);
    return snapshot();
  }
  virtual void restore_sequence(int sequence, const SequenceSnapshot& snapshot) {
    check_sequence(sequence);
    restore(snapshot);
  }

  // --- Speculative decoding (see the top of this file). A backend without it keeps these
  // defaults: max_step_rows() 0 and has_draft_head() false, and the calls throw Error. ---

  // The most rows step() takes; 0 when the backend has no multi-row step.
  virtual int max_step_rows() const { return 0; }
  // Decodes `rows` in one pass and writes each row's logits ([rows, vocab]). Each sequence's rows
  // must be adjacent in `rows` and at its consecutive positions from sequence_position(s) on.
  // Nothing is committed: the positions stay, and until commit() the only other calls allowed are
  // reset() and restore() (of any sequence). Throws Error, changing nothing, when the KV pool cannot
  // hold the rows.
  virtual void step(std::span<const StepRow> /*rows*/, std::span<float> /*logits*/) {
    unsupported("a multi-row step");
  }
  // Keeps the first n (1 <= n <= rows) rows of the last step: each sequence's position advances by
  // its rows among them and its state is the one after its last kept row, as if only those tokens
  // had been decoded. A step of several sequences is committed whole (n = rows).
  virtual void commit(int64_t /*n*/) { unsupported("a multi-row step"); }

  // Whether the MTP head runs (BackendOptions::mtp with a model that has one). It follows the
  // committed sequence, so it can draft after any prefill, decode or commit.
  virtual bool has_draft_head() const { return false; }
  // Starts a draft: `next` is the token that follows the sequence (chosen from its last logits;
  // position() >= 1). Writes the head's logits for the token after `next` ([vocab]).
  virtual void draft_begin(int32_t /*next*/, std::span<float> /*logits*/) { unsupported("the MTP head"); }
  // Continues the draft with `token`, the draft chosen from the previous logits; writes the logits
  // of the token after it. Drafting changes nothing the next step, decode or commit depends on.
  virtual void draft_continue(int32_t /*token*/, std::span<float> /*logits*/) { unsupported("the MTP head"); }

 private:
  [[noreturn]] void unsupported(const char* what) const {
    fail("the {} backend does not run {}", name(), what);
  }
  void check_sequence(int sequence) const {
    if (sequence != 0) fail("sequence {}: the {} backend holds only sequence 0", sequence, name());
  }
};

std::unique_ptr<Backend> make_cpu_backend(const Model& model, const BackendOptions& options);

// The devices this build runs on: "cpu", and "cuda" where built. make_backend throws Error for an
// unknown or absent device; default_device() is "cuda" when built and a GPU is present, else "cpu".
std::vector<std::string> built_devices();
std::string default_device();
std::unique_ptr<Backend> make_backend(const std::string& device, const Model& model,
                                      const BackendOptions& options);

struct DeviceInfo {
  std::string name;
  int64_t memory_bytes = 0;
  double copy_gbps = 0;  // measured: a large copy, bytes read + written per second
};
DeviceInfo probe_device(const std::string& device);
DeviceInfo probe_cpu();

}  // namespace qwick
