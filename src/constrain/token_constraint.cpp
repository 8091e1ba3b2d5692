#include "constrain/token_constraint.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace qwick {

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar,
                                 std::shared_ptr<const TokenTrie> trie, std::vector<int32_t> end_ids,
                                 int32_t start_after)
    : grammar_(std::move(grammar)),
      trie_(std::move(trie)),
      end_ids_(std::move(end_ids)),
      start_after_(start_after),
      active_(start_after < 0),
      matcher_(grammar_),
      masker_(*trie_) {}

const TokenMask& TokenConstraint::mask() {
  return masker_.compute(matcher_);
}

void TokenConstraint::apply(std::span<float> logits) {
  if (!active_) return;
  const TokenMask& m = mask();
  const bool may_end = matcher_.accepting(matcher_.current());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const auto n = std::min<size_t>(logits.size(), static_cast<size_t>(trie_->vocab_size()));
  const std::vector<uint64_t>& bits = m.bits();
  // The end tokens are added tokens, outside the trie: the mask clears them, may_end restores them.
  saved_.clear();
  for (int32_t id : end_ids_)
    if (id >= 0 && static_cast<size_t>(id) < logits.size())
      saved_.emplace_back(id, logits[static_cast<size_t>(id)]);
  bool any = false;
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t word = bits[w];
    any |= word != 0;
    const size_t end = std::min(n, w * 64 + 64);
    if (word == ~uint64_t{0}) continue;
    for (size_t i = w * 64; i < end; ++i)
      if (!((word >> (i - w * 64)) & 1)) logits[i] = kNegInf;
  }
  for (size_t i = n; i < logits.size(); ++i) logits[i] = kNegInf;
  if (may_end) {
    for (const auto& [id, logit] : saved_) logits[static_cast<size_t>(id)] = logit;
    any |= !saved_.empty();
  }
  if (!any) fail("constrained decoding: no token can continue the grammar here");
}

void TokenConstraint::accept(int32_t token) {
  if (!active_) {
    active_ = token == start_after_;
    return;
  }
  if (std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end()) {
    if (!matcher_.accepting(matcher_.current()))
      fail("constrained decoding: token {} ends the output before the grammar is complete", token);
    return;
  }
  if (token < 0 || token >= trie_->vocab_size() || trie_->bytes(token).empty() ||
      !matcher_.accept(trie_->bytes(token)))
    fail("constrained decoding: token {} is not allowed by the grammar here", token);
}

bool TokenConstraint::complete() const {
  return active_ && !matcher_.can_continue(matcher_.current());
}

}  // namespace qwick
