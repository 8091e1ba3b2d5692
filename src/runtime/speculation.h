// Speculative decoding with the model's MTP head (backend.h): the head drafts k tokens, one
// multi-row step of the main model verifies the next token and the drafts, and the drafts are
// accepted by the speculative-sampling rule, so the output keeps exactly the distribution of plain
// sampling (and, greedy, the very tokens of plain greedy decoding):
//
//   draft d_i ~ q_i (the sampler's distribution of the head's logits)
//   row i of the step gives p_i (the sampler's distribution of the main model's logits)
//   accept d_{i+1} with probability min(1, p_i(d) / q_i(d)); at the first rejection draw from
//   max(0, p_i - q_i) normalised and stop; when every draft is accepted draw the bonus from p_k
//
// Greedy sampling makes p and q point masses, so a draft is accepted exactly when it is the token
// plain decoding would pick, and the rejection draw gives that token. The depth adapts per request:
// an exponential average of the acceptance rate below kLowerBelow lowers it by one (down to 0:
// speculation off for the rest of the request).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "runtime/sampler.h"

namespace qwick {

// Replaces the head's draft for sequence position `position` (the bench's oracle of a given
// acceptance rate, model-independent tests). Greedy only: a replaced draft is not drawn from q.
using DraftOverride = std::function<int32_t(int64_t position, int32_t drafted)>;

class Speculator {
 public:
  // `depth`: drafts a step to begin with, at most backend.max_step_rows() - 1; kept as it is
  // unless `adaptive`.
  Speculator(Backend& backend, int64_t vocab_size, int depth, bool adaptive = true,
             DraftOverride draft_override = nullptr);

  int depth() const { return depth_; }
  int64_t drafted() const { return drafted_; }    // drafts verified so far
  int64_t accepted() const { return accepted_; }  // of which accepted
  int64_t steps() const { return steps_; }

  // Seconds spent so far in the parts of a step: drafting (the head and choosing drafts), the
  // verify pass, and the rest (acceptance, commit, the head following the accepted rows).
  struct Times {
    double draft = 0, verify = 0, accept = 0;
  };
  const Times& times() const { return times_; }

  // One step after `token` (chosen, in the sampler's history, not yet in the backend's sequence),
  // with at most `max_drafts` drafts (fewer near the context or length limit). Commits `token` and
  // the accepted drafts to the backend, adds the drafts to the sampler's history and to `drafts_out`,
  // and returns the token that follows them (not in the history).
  int32_t step(int32_t token, Sampler& sampler, int max_drafts, std::vector<int32_t>& drafts_out);

  static constexpr double kLowerBelow = 0.3;  // acceptance rate at which a draft stops paying

 private:
  void adapt(int drafted, int accepted);

  Backend& backend_;
  int64_t vocab_;
  DraftOverride override_;
  int depth_;
  bool adaptive_;
  int64_t drafted_ = 0, accepted_ = 0, steps_ = 0;
  Times times_;
  double rate_ = 1.0;     // exponential average of the acceptance rate
  int since_change_ = 0;  // steps since the depth last changed
  std::vector<float> draft_logits_, step_logits_, row_;
  std::vector<Sampler::Distribution> q_;
  Sampler::Distribution p_;
  std::vector<double> q_dense_;  // [vocab]: the rejected draft's q, for the residual
};

}  // namespace qwick
