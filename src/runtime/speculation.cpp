#include "runtime/speculation.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/error.h"

namespace qwick {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double probability_of(const Sampler::Distribution& d, int32_t token) {
  for (const auto& [id, p] : d)
    if (id == token) return p;
  return 0.0;
}

}  // namespace

Speculator::Speculator(Backend& backend, int64_t vocab_size, int depth, bool adaptive,
                       DraftOverride draft_override)
    : backend_(backend),
      vocab_(vocab_size),
      override_(std::move(draft_override)),
      depth_(depth),
      adaptive_(adaptive) {
  if (depth < 0 || depth > backend.max_step_rows() - 1)
    fail("speculation: {} drafts a step; this backend verifies at most {}", depth,
         std::max(0, backend.max_step_rows() - 1));
  if (depth > 0 && !backend.has_draft_head()) fail("speculation: the backend runs no MTP head");
  const auto V = static_cast<size_t>(vocab_);
  draft_logits_.resize(V);
  row_.resize(V);
  step_logits_.resize(static_cast<size_t>(depth + 1) * V);
  q_dense_.assign(V, 0.0);
}

int32_t Speculator::step(int32_t token, Sampler& sampler, int max_drafts, std::vector<int32_t>& drafts_out) {
  const auto V = static_cast<size_t>(vocab_);
  const int k = std::max(0, std::min(depth_, max_drafts));

  const auto t0 = Clock::now();
  // Draft k tokens, each drawn from the sampler's distribution of the head's logits.
  std::vector<StepRow> rows{{token, 0, backend_.position()}};
  q_.resize(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) {
    if (i == 0)
      backend_.draft_begin(token, draft_logits_);
    else
      backend_.draft_continue(rows.back().token, draft_logits_);
    Sampler::Distribution& q = q_[static_cast<size_t>(i)];
    sampler.distribution(draft_logits_, q);
    const int64_t position = backend_.position() + i + 1;
    int32_t d = sampler.draw(q);
    if (override_) {
      if (!sampler.greedy()) fail("speculation: a draft override needs greedy sampling");
      d = override_(position, d);
      q.assign(1, {d, 1.0});
    }
    rows.push_back({d, 0, position});
  }

  const auto t1 = Clock::now();
  times_.draft += std::chrono::duration<double>(t1 - t0).count();
  // Verify: row i's logits give the main model's distribution of the token after rows[i].
  backend_.step(rows, std::span<float>(step_logits_.data(), rows.size() * V));
  const auto t2 = Clock::now();
  times_.verify += std::chrono::duration<double>(t2 - t1).count();
  int accepted = 0;
  int32_t next = -1;
  for (int i = 0; i <= k && next < 0; ++i) {
    std::copy_n(step_logits_.data() + static_cast<size_t>(i) * V, V, row_.data());
    sampler.distribution(row_, p_);
    if (i == k) {  // every draft accepted: the bonus token
      next = sampler.draw(p_);
      break;
    }
    const int32_t d = rows[static_cast<size_t>(i) + 1].token;
    const Sampler::Distribution& q = q_[static_cast<size_t>(i)];
    const double pd = probability_of(p_, d), qd = probability_of(q, d);
    if (pd >= qd || sampler.uniform() * qd < pd) {  // accept with probability min(1, p/q)
      ++accepted;
      sampler.accept(d);
      drafts_out.push_back(d);
      continue;
    }
    // Rejected: draw from max(0, p - q), normalised (draw() normalises).
    for (const auto& [id, qp] : q) q_dense_[static_cast<size_t>(id)] = qp;
    for (auto& [id, pp] : p_) pp = std::max(0.0, pp - q_dense_[static_cast<size_t>(id)]);
    for (const auto& [id, qp] : q) q_dense_[static_cast<size_t>(id)] = 0.0;
    next = sampler.draw(p_);
  }
  backend_.commit(accepted + 1);
  times_.accept += seconds_since(t2);
  ++steps_;
  drafted_ += k;
  accepted_ += accepted;
  if (k > 0 && adaptive_) adapt(k, accepted);
  return next;
}

void Speculator::adapt(int drafted, int accepted) {
  rate_ = 0.75 * rate_ + 0.25 * static_cast<double>(accepted) / drafted;
  if (++since_change_ >= 4 && rate_ < kLowerBelow && depth_ > 0) {
    --depth_;
    since_change_ = 0;
    rate_ = 0.5;  // give the shorter depth a few steps before judging it
  }
}

}  // namespace qwick
