#include "server/metrics.h"

#include <fmt/format.h>

namespace qwick {

void ServerMetrics::record_completion(const CompletionStats& s) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += s.prompt_tokens - s.cached_tokens;
  cached_tokens_ += s.cached_tokens;
  generated_tokens_ += s.generated_tokens;
  draft_tokens_ += s.draft_n;
  draft_accepted_ += s.draft_n_accepted;
  prompt_seconds_ += s.prompt_ms / 1000;
  generation_seconds_ += s.generation_ms / 1000;
  ++(s.finish_reason == "cancelled" ? cancelled_ : finished_);
}

void ServerMetrics::record_first_token(double seconds) {
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < kTtftBuckets.size(); ++i)
    if (seconds <= kTtftBuckets[i]) ++ttft_counts_[i];
  ++ttft_count_;
  ttft_sum_ += seconds;
}

void ServerMetrics::record_failed() {
  std::lock_guard lock(mutex_);
  ++failed_;
}

void ServerMetrics::record_rejected() {
  std::lock_guard lock(mutex_);
  ++rejected_;
}

std::string ServerMetrics::render(const MetricsGauges& g) const {
  std::lock_guard lock(mutex_);
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
  };
  metric("llamacpp:prompt_tokens_total", "counter", "Prompt tokens processed (prefilled).", prompt_tokens_);
  metric("llamacpp:prompt_seconds_total", "counter", "Prompt processing time.", prompt_seconds_);
  metric("llamacpp:tokens_predicted_total", "counter", "Generated tokens.", generated_tokens_);
  metric("llamacpp:tokens_predicted_seconds_total", "counter", "Generation time.", generation_seconds_);
  metric("qwick:draft_tokens_total", "counter", "Speculative drafts verified.", draft_tokens_);
  metric("qwick:draft_tokens_accepted_total", "counter", "Speculative drafts accepted.", draft_accepted_);
  metric("llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
         prompt_seconds_ > 0 ? static_cast<double>(prompt_tokens_) / prompt_seconds_ : 0.0);
  metric("llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
         generation_seconds_ > 0 ? static_cast<double>(generated_tokens_) / generation_seconds_ : 0.0);
  metric("llamacpp:requests_processing", "gauge", "Requests being processed.", g.processing);
  metric("llamacpp:requests_deferred", "gauge", "Requests waiting in the queue.", g.waiting);
  metric("qwick:prompt_tokens_cached_total", "counter", "Prompt tokens reused from saved state.",
         cached_tokens_);
  metric("qwick:requests_finished_total", "counter", "Completions that ran to their end.", finished_);
  metric("qwick:requests_cancelled_total", "counter", "Completions cancelled (client gone).", cancelled_);
  metric("qwick:requests_failed_total", "counter", "Completions that failed in the engine.", failed_);
  metric("qwick:requests_rejected_total", "counter", "Completions refused because the queue was full.",
         rejected_);
  metric("qwick:prompt_cache_entries", "gauge", "Saved sequence states.", g.cache.entries);
  metric("qwick:prompt_cache_bytes", "gauge", "Memory held by saved sequence states.", g.cache.bytes);
  metric("qwick:prompt_cache_budget_bytes", "gauge", "Prompt-cache memory budget.", g.cache.budget);
  const char* ttft = "qwick:time_to_first_token_seconds";
  out += fmt::format(
      "# HELP {} Time from request arrival to the first generated token.\n# TYPE {} histogram\n", ttft, ttft);
  for (size_t i = 0; i < kTtftBuckets.size(); ++i)
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", ttft, kTtftBuckets[i], ttft_counts_[i]);
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", ttft, ttft_count_, ttft,
                     ttft_sum_, ttft, ttft_count_);
  return out;
}

}  // namespace qwick
