// Where a prefill's device time goes (PrefillOptions::stage_ms): an event on the stream at every
// stage boundary; after the chunk, the time between one boundary and the next is added to the
// first one's stage. Inactive (no map) it records nothing, so the ordinary pass pays one branch per
// boundary. Events serialize nothing, but reading them back synchronizes once per chunk.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <string>
#include <vector>

namespace qwick::cuda {

class StageTimer {
 public:
  StageTimer() = default;
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  ~StageTimer();

  // Starts timing into `out` (null: inactive) on `stream`.
  void begin(std::map<std::string, double>* out, cudaStream_t stream);
  // The work enqueued from here until the next mark or end() belongs to `stage` (a string literal).
  void mark(const char* stage) {
    if (out_) record(stage);
  }
  bool active() const { return out_ != nullptr; }
  // Waits for the stream and adds up the stages marked since begin().
  void end();

 private:
  void record(const char* stage);

  std::map<std::string, double>* out_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;  // reused across chunks
  std::vector<const char*> stages_;  // stage of the interval starting at events_[i]
};

}  // namespace qwick::cuda
