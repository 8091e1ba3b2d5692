#include "runtime/prompt_cache.h"

#include <algorithm>

namespace qwick {
namespace {

bool is_prefix(std::span<const int32_t> prefix, std::span<const int32_t> tokens) {
  return prefix.size() <= tokens.size() && std::equal(prefix.begin(), prefix.end(), tokens.begin());
}

}  // namespace

std::optional<PromptCache::Match> PromptCache::longest_prefix(std::span<const int32_t> tokens,
                                                              int64_t max_length) {
  auto best = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const auto n = static_cast<int64_t>(it->tokens.size());
    if (n > max_length || (best != entries_.end() && n <= static_cast<int64_t>(best->tokens.size())))
      continue;
    if (is_prefix(it->tokens, tokens)) best = it;
  }
  if (best == entries_.end()) return std::nullopt;
  entries_.splice(entries_.begin(), entries_, best);
  return Match{best->snapshot.get(), static_cast<int64_t>(best->tokens.size())};
}

bool PromptCache::contains(std::span<const int32_t> tokens) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) {
    return e.tokens.size() == tokens.size() && std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin());
  });
}

void PromptCache::erase(std::list<Entry>::iterator it) {
  bytes_ -= it->snapshot->bytes();
  entries_.erase(it);
}

void PromptCache::insert(std::vector<int32_t> tokens, std::unique_ptr<SequenceSnapshot> snapshot) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->tokens == tokens) {
      erase(it);
      break;
    }
  if (snapshot->bytes() > budget_) return;
  bytes_ += snapshot->bytes();
  entries_.push_front({std::move(tokens), std::move(snapshot)});
  while (bytes_ > budget_) erase(std::prev(entries_.end()));
}

}  // namespace qwick
