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

  // (token, probability) pairs: the tokens sample() could pick from `logits` (modified in place)
  // and how likely each is, summing to 1; greedy gives the one token it would pick.
  using Distribution = std::vector<std::pair<int32_t, double>>;
  void distribution(std::span<float> logits, Distribution& out);
  // One draw from `weights` (not necessarily normalised), and a uniform number in [0, 1), from the
  // sampler's generator: speculative sampling's draws.
  int32_t draw(const Distribution& weights);
  double uniform();

  const SamplingParams& params() const { return params_; }
  bool greedy() const { return params_.temperature <= 0.0f; }

 private:
  // Logit bias and penalties in place; true when the pick is greedy.
  bool transform(std::span<float> logits);
  static int32_t argmax(std::span<const float> logits);
  // Fills candidates_ (best first) and probs_ (their weights after every cut and the temperature);
  // returns how many candidates survive the cuts.
  size_t weigh(std::span<const float> logits);

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
