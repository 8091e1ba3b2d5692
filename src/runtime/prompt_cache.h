// Saved sequence states for prompt reuse across requests: an LRU of backend snapshots, each keyed
// by the tokens it holds, bounded by a memory budget.
//
// The hybrid model cannot be cut back to an earlier position (its DeltaNet layers carry a
// recurrent state, not per-token rows), so a new request can only resume from a state saved at
// exactly some prefix of its tokens. The engine saves states at points likely to be extended
// (the end of the conversation history, the end of a generated turn) and asks for the longest one
// the new prompt extends.
//
// Tested in tests/server/prompt_cache_test.cpp.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace qwick {

class PromptCache {
 public:
  explicit PromptCache(size_t budget_bytes) : budget_(budget_bytes) {}

  struct Match {
    const SequenceSnapshot* snapshot;
    int64_t length;  // tokens it holds (a prefix of the query)
  };
  // The entry whose tokens are the longest prefix of `tokens` with at most `max_length` of them;
  // it becomes the most recently used. The pointer stays valid until the next insert.
  std::optional<Match> longest_prefix(std::span<const int32_t> tokens, int64_t max_length);

  bool contains(std::span<const int32_t> tokens) const;
  // Keeps the state after `tokens` (an existing entry for the same tokens is replaced), then
  // evicts the least recently used entries until the budget holds. A snapshot larger than the
  // whole budget is not kept.
  void insert(std::vector<int32_t> tokens, std::unique_ptr<SequenceSnapshot> snapshot);

  size_t bytes() const { return bytes_; }
  size_t budget() const { return budget_; }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::unique_ptr<SequenceSnapshot> snapshot;
  };
  void erase(std::list<Entry>::iterator it);

  size_t budget_;
  size_t bytes_ = 0;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace qwick
