// The set of tokens a grammar allows next, over the whole vocabulary.
//
// A depth-first walk of the vocabulary trie: each edge advances the matcher by one byte from the
// parent's position, a dead position prunes the whole subtree, and every token ending at a live
// node is allowed. The scratch the walk uses is released as it backs out, so a walk allocates
// nothing once warm. Masks are cached by the matcher's state (its stacks and partial character):
// in long runs of one construct (a string's characters, digits) the state repeats and the mask
// costs a lookup.
//
// Tested in tests/constrain/token_mask_test.cpp.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <vector>

#include "constrain/grammar_matcher.h"
#include "constrain/token_trie.h"

namespace qwick {

class TokenMask {
 public:
  explicit TokenMask(int64_t vocab_size) : bits_(static_cast<size_t>((vocab_size + 63) / 64), 0) {}
  bool allows(int32_t id) const { return (bits_[static_cast<size_t>(id) / 64] >> (id % 64)) & 1; }
  void allow(int32_t id) { bits_[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64); }
  void clear() { std::fill(bits_.begin(), bits_.end(), 0); }
  int64_t count() const;
  const std::vector<uint64_t>& bits() const { return bits_; }

 private:
  std::vector<uint64_t> bits_;
};

class TokenMasker {
 public:
  explicit TokenMasker(const TokenTrie& trie, size_t cache_entries = 32)
      : trie_(trie), cache_limit_(cache_entries) {}

  // The ordinary tokens the matcher's current position allows (stop tokens are the caller's).
  const TokenMask& compute(GrammarMatcher& matcher);

 private:
  void walk(GrammarMatcher& matcher, const TokenTrie::Node& node, const GrammarMatcher::Position& at,
            TokenMask& out);

  const TokenTrie& trie_;
  size_t cache_limit_;
  std::vector<uint32_t> key_;
  // Least recently used last; the map points into the list.
  std::list<std::pair<std::vector<uint32_t>, TokenMask>> lru_;
  std::map<std::vector<uint32_t>, std::list<std::pair<std::vector<uint32_t>, TokenMask>>::iterator> index_;
};

}  // namespace qwick
