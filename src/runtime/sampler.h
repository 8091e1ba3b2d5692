// Token sampling: logit bias, repetition/presence/frequency penalties, then greedy (temperature 0)
// or top-k -> top-p -> min-p -> temperature -> a draw from a seeded generator (llama.cpp's order).
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "core/sampling_params.h"

namespace qwick {

class Sampler {
 public:
  Sampler(SamplingParams params, int64_t vocab_size);

  // Adds a token (prompt or generated) to the history the penalties see.
  void accept(int32_t token);
  // Picks the next token; `logits` [vocab] is modified in place.
  int32_t sample(std::span<float> logits);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  int64_t vocab_;
  std::mt19937_64 rng_;
  std::deque<int32_t> history_;
  // Scratch kept between calls so sampling a token allocates nothing once warm.
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<double> probs_;
  std::vector<std::pair<int32_t, int>> counts_;
};

}  // namespace qwick
