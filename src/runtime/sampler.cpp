#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace qwick {

Sampler::Sampler(SamplingParams params, int64_t vocab_size)
    : params_(std::move(params)), vocab_(vocab_size), rng_(params_.seed) {
  for (const auto& [id, bias] : params_.logit_bias)
    if (id < 0 || id >= vocab_) fail("logit_bias token id {} is out of range (vocab size {})", id, vocab_);
}

void Sampler::accept(int32_t token) {
  history_.push_back(token);
  const size_t limit = params_.penalty_last_n < 0 ? SIZE_MAX : static_cast<size_t>(params_.penalty_last_n);
  while (history_.size() > limit) history_.pop_front();
}

bool Sampler::transform(std::span<float> logits) {
  for (const auto& [id, bias] : params_.logit_bias) logits[static_cast<size_t>(id)] += bias;

  const bool penalise = params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                        params_.frequency_penalty != 0.0f;
  if (penalise && !history_.empty()) {
    // (token, occurrences) of the window, via a sorted copy.
    counts_.clear();
    for (int32_t t : history_) counts_.emplace_back(t, 1);
    std::sort(counts_.begin(), counts_.end());
    size_t unique = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      if (unique > 0 && counts_[unique - 1].first == counts_[i].first)
        ++counts_[unique - 1].second;
      else
        counts_[unique++] = counts_[i];
    }
    counts_.resize(unique);
    for (const auto& [id, count] : counts_) {
      float& l = logits[static_cast<size_t>(id)];
      if (params_.repetition_penalty != 1.0f)
        l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
      l -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
    }
  }
  return params_.temperature <= 0.0f;
}

int32_t Sampler::argmax(std::span<const float> logits) {
  // NaN logits never win, ties go to the lower id.
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

size_t Sampler::weigh(std::span<const float> logits) {
  // Candidates sorted by logit (descending), cut by top-k.
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i)
    if (std::isfinite(logits[i])) candidates_.emplace_back(logits[i], static_cast<int32_t>(i));
  if (candidates_.empty()) fail("sampling: every logit is -inf or NaN");
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t keep = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = static_cast<size_t>(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(keep),
                      candidates_.end(), by_logit);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  candidates_.resize(keep);

  // Probabilities at temperature 1 decide the top-p and min-p cuts.
  const float top = candidates_.front().first;
  std::vector<double>& p = probs_;
  p.resize(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp(static_cast<double>(candidates_[i].first - top));
  if (params_.top_p < 1.0f) {
    double cumulative = 0;
    size_t n = 0;
    while (n < keep) {
      cumulative += p[n++] / sum;
      if (cumulative >= params_.top_p) break;
    }
    keep = std::max<size_t>(n, 1);
  }
  if (params_.min_p > 0.0f) {
    size_t n = 1;
    while (n < keep && p[n] >= params_.min_p * p[0]) ++n;  // p[0] is the largest
    keep = n;
  }

  // Temperature.
  for (size_t i = 0; i < keep; ++i)
    p[i] = std::exp(static_cast<double>(candidates_[i].first - top) / params_.temperature);
  return keep;
}

int32_t Sampler::sample(std::span<float> logits) {
  if (transform(logits)) return argmax(logits);
  const size_t keep = weigh(logits);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += probs_[i];
  const double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs_[i];
    if (r < acc) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

void Sampler::distribution(std::span<float> logits, Distribution& out) {
  out.clear();
  if (transform(logits)) {
    out.emplace_back(argmax(logits), 1.0);
    return;
  }
  const size_t keep = weigh(logits);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += probs_[i];
  for (size_t i = 0; i < keep; ++i) out.emplace_back(candidates_[i].second, probs_[i] / total);
}

int32_t Sampler::draw(const Distribution& weights) {
  double total = 0;
  for (const auto& [id, w] : weights) total += w;
  if (weights.empty() || !(total > 0)) fail("sampling: nothing to draw from");
  const double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  double acc = 0;
  for (const auto& [id, w] : weights) {
    acc += w;
    if (r < acc) return id;
  }
  return weights.back().first;
}

double Sampler::uniform() {
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
}

}  // namespace qwick
