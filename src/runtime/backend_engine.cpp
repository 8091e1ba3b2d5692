#include "runtime/backend_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "runtime/speculation.h"

namespace qwick {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

void token_logprobs(std::span<const float> logits, int32_t chosen, int top_n, GeneratedToken& out,
                    std::vector<std::pair<float, int32_t>>& scratch) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  auto value = [](float l) { return std::isnan(l) ? kNegInf : l; };
  float max = kNegInf;
  for (float l : logits) max = std::max(max, value(l));
  double sum = 0;
  if (std::isfinite(max))
    for (float l : logits) sum += std::exp(static_cast<double>(value(l) - max));
  const double log_total = std::isfinite(max) ? static_cast<double>(max) + std::log(sum) : 0.0;
  auto logprob = [&](float l) { return static_cast<float>(static_cast<double>(value(l)) - log_total); };
  out.logprob = logprob(logits[static_cast<size_t>(chosen)]);
  out.top.clear();
  if (top_n <= 0) return;
  scratch.clear();
  for (size_t i = 0; i < logits.size(); ++i) scratch.emplace_back(value(logits[i]), static_cast<int32_t>(i));
  const auto n = std::min(static_cast<size_t>(top_n), scratch.size());
  std::partial_sort(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(n), scratch.end(),
                    [](const auto& a, const auto& b) {
                      return a.first != b.first ? a.first > b.first : a.second < b.second;
                    });
  for (size_t i = 0; i < n; ++i) out.top.push_back({scratch[i].second, logprob(scratch[i].first)});
}

BackendEngine::BackendEngine(Backend& backend, int64_t vocab_size, BackendEngineOptions options)
    : backend_(backend), vocab_(vocab_size), options_(options), cache_(options.cache_bytes) {
  if (options_.prefill_chunk < 1)
    fail("the prefill chunk must be at least 1 token, got {}", options_.prefill_chunk);
  logits_.resize(static_cast<size_t>(vocab_));
}

PromptCacheStats BackendEngine::cache_stats() const {
  return {static_cast<int64_t>(cache_.size()), static_cast<int64_t>(cache_.bytes()),
          static_cast<int64_t>(cache_.budget())};
}

void BackendEngine::append(std::span<const int32_t> tokens) {
  live_.insert(live_.end(), tokens.begin(), tokens.end());
}

void BackendEngine::save(std::span<const int32_t> tokens) {
  if (cache_.budget() == 0 || static_cast<int64_t>(tokens.size()) < options_.min_snapshot_tokens ||
      cache_.contains(tokens))
    return;
  unsaved_.emplace_back(std::vector<int32_t>(tokens.begin(), tokens.end()), backend_.snapshot());
}

void BackendEngine::keep_saved(bool keep) {
  if (keep)
    for (auto& [tokens, snapshot] : unsaved_) cache_.insert(std::move(tokens), std::move(snapshot));
  unsaved_.clear();
}

int64_t BackendEngine::resume(const CompletionJob& job) {
  const std::span<const int32_t> prompt(job.prompt);
  const auto n = static_cast<int64_t>(prompt.size());
  if (job.reuse) {
    const auto live = static_cast<int64_t>(live_.size());
    const bool live_reusable = !live_decoded_ || backend_.decode_matches_prefill();
    const int64_t live_length =
        live_reusable && live < n && std::equal(live_.begin(), live_.end(), prompt.begin()) ? live : 0;
    const auto match = cache_.longest_prefix(prompt, n - 1);
    if (match && match->length > live_length) {
      backend_.restore(*match->snapshot);
      live_.assign(prompt.begin(), prompt.begin() + match->length);
      live_decoded_ = false;
      return match->length;
    }
    if (live_length > 0) return live_length;
  }
  backend_.reset();
  live_.clear();
  live_decoded_ = false;
  return 0;
}

CompletionStats BackendEngine::run(const CompletionJob& job, CompletionObserver& observer) {
  const std::span<const int32_t> prompt(job.prompt);
  const auto n = static_cast<int64_t>(prompt.size());
  if (n == 0) fail("the prompt is empty");
  if (n >= backend_.max_context())
    fail("the prompt ({} tokens) does not fit the context size ({} tokens)", n, backend_.max_context());
  for (int32_t t : prompt)
    if (t < 0 || t >= vocab_) fail("token id {} is out of range (vocab size {})", t, vocab_);
  Sampler sampler(job.sampling, vocab_);  // validates the logit biases before anything changes

  CompletionStats stats;
  stats.prompt_tokens = n;
  try {
    const auto t0 = Clock::now();
    const int64_t start = resume(job);
    stats.cached_tokens = start;
    for (int32_t t : prompt) sampler.accept(t);

    // Prefill in chunks, cut also at the points worth a snapshot.
    std::vector<int64_t> points;
    if (job.reuse) {
      for (int64_t p : job.snapshot_at)
        if (p > start && p < n) points.push_back(p);
      points.push_back(n);
      std::sort(points.begin(), points.end());
    }
    PrefillOptions prefill_options;
    prefill_options.chunk = options_.prefill_chunk;
    auto next_point = points.begin();
    int64_t pos = start;
    observer.on_prefill(pos, n);
    while (pos < n) {
      if (observer.cancelled()) {
        stats.finish_reason = "cancelled";
        stats.prompt_ms = ms_since(t0);
        keep_saved(false);
        return stats;
      }
      int64_t end = std::min(n, pos + options_.prefill_chunk);
      if (next_point != points.end()) end = std::min(end, *next_point);
      backend_.prefill(prompt.subspan(static_cast<size_t>(pos), static_cast<size_t>(end - pos)), logits_,
                       prefill_options);
      append(prompt.subspan(static_cast<size_t>(pos), static_cast<size_t>(end - pos)));
      pos = end;
      if (next_point != points.end() && *next_point == pos) {
        save(prompt.first(static_cast<size_t>(pos)));
        ++next_point;
      }
      observer.on_prefill(pos, n);
    }
    stats.prompt_ms = ms_since(t0);

    // Generate. Without penalties, biases, log-probabilities or a constraint the backend may
    // choose tokens itself (the CUDA backend does it inside the decode step); a constraint's mask
    // is applied to the logits here, on the host.
    const auto t1 = Clock::now();
    const SamplingParams& sp = job.sampling;
    TokenConstraint* constraint = job.constraint.get();
    const bool want_logprobs = job.top_logprobs >= 0;
    const bool device_sampling = !want_logprobs && !constraint && sp.repetition_penalty == 1.0f &&
                                 sp.presence_penalty == 0.0f && sp.frequency_penalty == 0.0f &&
                                 sp.logit_bias.empty();
    GeneratedToken generated;
    auto pick = [&] {
      if (constraint) constraint->apply(logits_);
      if (!want_logprobs) return sampler.sample(logits_);
      logits_copy_ = logits_;  // the sampler biases and penalises in place
      const int32_t t = sampler.sample(logits_);
      token_logprobs(logits_copy_, t, job.top_logprobs, generated, ranked_);
      return t;
    };
    const int64_t limit = job.max_tokens < 0 ? std::numeric_limits<int64_t>::max() : job.max_tokens;
    // Speculation needs the head, and leaves out log-probabilities (the verify pass ranks no tokens)
    // and constrained output (its drafts are not masked yet).
    int depth = job.draft_max >= 0 ? job.draft_max : options_.draft_max;
    if (!backend_.has_draft_head() || want_logprobs || constraint) depth = 0;
    depth = std::min(depth, std::max(0, backend_.max_step_rows() - 1));
    Speculator speculator(backend_, vocab_, depth, options_.draft_adaptive, options_.draft_override);
    // What the last speculative step chose beyond `token`: the accepted drafts (in the sequence and
    // the sampler's history) and then the token after them (in neither), emitted in turn.
    std::vector<int32_t> ahead;
    size_t next_ahead = 0;
    bool in_history = false;  // whether `token` is in the sampler's history already
    stats.finish_reason = "length";
    int32_t token = limit > 0 ? pick() : 0;
    while (stats.generated_tokens < limit) {
      if (std::find(job.stop_ids.begin(), job.stop_ids.end(), token) != job.stop_ids.end()) {
        stats.finish_reason = "stop";
        break;
      }
      if (!in_history) sampler.accept(token);
      if (constraint) constraint->accept(token);
      ++stats.generated_tokens;
      generated.id = token;
      const TokenAction action = observer.on_token(generated);
      if (action != TokenAction::kContinue) {
        stats.finish_reason = action == TokenAction::kStop ? "stop" : "cancelled";
        break;
      }
      if (constraint && constraint->complete()) {
        stats.finish_reason = "stop";
        break;
      }
      if (stats.generated_tokens >= limit) break;
      if (next_ahead < ahead.size()) {  // chosen already: no model call
        token = ahead[next_ahead++];
        in_history = next_ahead < ahead.size();
        continue;
      }
      if (backend_.position() >= backend_.max_context()) break;
      if (observer.cancelled()) {
        stats.finish_reason = "cancelled";
        break;
      }
      int32_t next = 0;
      live_decoded_ = true;
      // Drafts past the length or context limit would be thrown away.
      const int64_t room =
          std::min(limit - stats.generated_tokens, backend_.max_context() - backend_.position()) - 1;
      if (speculator.depth() > 0 && room > 0) {
        const int32_t verified = token;
        ahead.clear();
        next_ahead = 0;
        const int32_t after =
            speculator.step(verified, sampler, static_cast<int>(std::min<int64_t>(room, depth)), ahead);
        live_.push_back(verified);
        live_.insert(live_.end(), ahead.begin(), ahead.end());
        ahead.push_back(after);  // emitted after the accepted drafts; the only one not in the history
        token = ahead[next_ahead++];
        in_history = next_ahead < ahead.size();
        continue;
      }
      if (device_sampling && backend_.decode_sampled(token, sp, &next)) {
        live_.push_back(token);
        token = next;
      } else {
        backend_.decode(token, logits_);
        live_.push_back(token);
        token = pick();
      }
      in_history = false;
    }
    stats.draft_n = speculator.drafted();
    stats.draft_n_accepted = speculator.accepted();
    stats.generation_ms = ms_since(t1);
    // The end of the generated turn, where the next request of a tool-call loop continues; only
    // where decoding left exactly what prefilling those tokens would (else the end-of-prompt
    // snapshot serves, and the generated tokens are prefilled again).
    if (job.reuse && job.snapshot_end && stats.finish_reason != "cancelled" &&
        static_cast<int64_t>(live_.size()) > n && backend_.decode_matches_prefill())
      save(live_);
    keep_saved(stats.finish_reason != "cancelled");
  } catch (...) {
    keep_saved(false);
    // A failed step may leave the sequence anywhere: start the next job from scratch.
    backend_.reset();
    live_.clear();
    live_decoded_ = false;
    throw;
  }
  return stats;
}

}  // namespace qwick
