// Server counters for GET /metrics, in the Prometheus text format.
//
// Names follow llama-server's where it has them (llamacpp:prompt_tokens_total,
// llamacpp:tokens_predicted_total, llamacpp:requests_processing, ...), so existing dashboards
// work; the rest are qwick:* (cached prompt tokens, time to first token as a histogram, request
// outcomes, prompt-cache size). Updated from the worker and HTTP threads.
//
// Tested through GET /metrics in tests/node/server_api.mjs.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

#include "runtime/completion.h"

namespace qwick {

struct MetricsGauges {
  int64_t processing = 0, waiting = 0;
  PromptCacheStats cache;
};

class ServerMetrics {
 public:
  void record_completion(const CompletionStats& stats);
  void record_first_token(double seconds);
  void record_failed();
  void record_rejected();  // queue full
  std::string render(const MetricsGauges& gauges) const;

 private:
  static constexpr std::array<double, 12> kTtftBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                          1,    2.5,   5,    10,  30,   60};
  mutable std::mutex mutex_;
  int64_t prompt_tokens_ = 0, cached_tokens_ = 0, generated_tokens_ = 0;
  int64_t draft_tokens_ = 0, draft_accepted_ = 0;  // speculative decoding
  double prompt_seconds_ = 0, generation_seconds_ = 0;
  int64_t finished_ = 0, cancelled_ = 0, failed_ = 0, rejected_ = 0;
  std::array<int64_t, kTtftBuckets.size()> ttft_counts_{};
  int64_t ttft_count_ = 0;
  double ttft_sum_ = 0;
};

}  // namespace qwick
