#include "backend/cuda/stage_timer.h"

#include "kernels/cuda/cuda_launch.h"

namespace qwick::cuda {

StageTimer::~StageTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void StageTimer::begin(std::map<std::string, double>* out, cudaStream_t stream) {
  out_ = out;
  stream_ = stream;
  stages_.clear();
}

void StageTimer::record(const char* stage) {
  if (stages_.size() == events_.size()) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "stage timer: cudaEventCreate");
    events_.push_back(e);
  }
  check(cudaEventRecord(events_[stages_.size()], stream_), "stage timer: cudaEventRecord");
  stages_.push_back(stage);
}

void StageTimer::end() {
  if (!out_) return;
  record(nullptr);
  check(cudaEventSynchronize(events_[stages_.size() - 1]), "stage timer: cudaEventSynchronize");
  for (size_t i = 0; i + 1 < stages_.size(); ++i) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]), "stage timer: cudaEventElapsedTime");
    (*out_)[stages_[i]] += ms;
  }
  out_ = nullptr;
  stages_.clear();
}

}  // namespace qwick::cuda
