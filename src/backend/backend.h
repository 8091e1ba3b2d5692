// The boundary between the runtime and a device: one sequence, two explicit forward entry points.
//
// A backend is chosen once at load (make_backend: "cpu", or "cuda" where built). It owns the sequence
// state of one conversation (attention KV cache, DeltaNet conv and recurrent states) and advances it:
//   prefill(tokens)  many rows at once, in bounded chunks (matrix-shaped work)
//   decode(token)    one row (bandwidth-shaped work)
// Both append to the same sequence, so "prefill N, then decode k" equals "prefill N + k".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/kv_dtype.h"
#include "core/sampling_params.h"

namespace qwick {

struct Model;

struct BackendOptions {
  int threads = 0;                    // CPU worker threads, 0 = one per core
  int64_t max_context = 0;            // 0 = the model's max_position_embeddings
  KvDtype kv_dtype = KvDtype::kBF16;  // attention KV cache element type (the CUDA backend: bf16 or q8)
  // f32 activations in every decode matrix product (the reference numerics). Off, the CPU's products
  // against 4-bit weights quantize the activation to int8 per 64 values and the CUDA decode's to
  // int16 per 32 (decode's fast paths).
  bool exact = false;
  // Debug switches of the CUDA backend, comma separated (backend/cuda/cuda_options.h lists them;
  // unknown names are an error there). Ignored by the CPU backend.
  std::string cuda_off;
};

// Bytes a backend holds on its device (all 0 for the CPU backend).
struct BackendMemory {
  int64_t weights = 0, state = 0, scratch = 0;
  int64_t peak = 0;         // most bytes held at once by this process's device buffers
  int64_t device_used = 0;  // the device's own count of used memory (all processes), largest seen
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
