#include "constrain/token_mask.h"

#include <bit>

namespace qwick {

int64_t TokenMask::count() const {
  int64_t n = 0;
  for (uint64_t w : bits_) n += std::popcount(w);
  return n;
}

void TokenMasker::walk(GrammarMatcher& matcher, const TokenTrie::Node& node,
                       const GrammarMatcher::Position& at, TokenMask& out) {
  for (const TokenTrie::Node& child : trie_.children(node)) {
    const GrammarMatcher::Mark m = matcher.mark();
    if (const auto next = matcher.step(at, child.byte)) {
      for (int32_t id : trie_.tokens(child)) out.allow(id);
      if (child.child_count > 0) walk(matcher, child, *next, out);
    }
    matcher.release(m);
  }
}

const TokenMask& TokenMasker::compute(GrammarMatcher& matcher) {
  matcher.signature(key_);
  if (const auto it = index_.find(key_); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  if (lru_.size() >= cache_limit_ && !lru_.empty()) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(key_, TokenMask(trie_.vocab_size()));
  index_.emplace(key_, lru_.begin());
  TokenMask& mask = lru_.front().second;
  walk(matcher, trie_.root(), matcher.current(), mask);
  return mask;
}

}  // namespace qwick
