// The prompt cache alone, over fake snapshots of chosen sizes: longest-prefix lookup, LRU order,
// the memory budget, replacing an entry, refusing one larger than the budget.
#include <gtest/gtest.h>

#include "runtime/prompt_cache.h"

namespace qwick {
namespace {

class FakeSnapshot : public SequenceSnapshot {
 public:
  FakeSnapshot(int64_t position, size_t bytes) : position_(position), bytes_(bytes) {}
  int64_t position() const override { return position_; }
  size_t bytes() const override { return bytes_; }

 private:
  int64_t position_;
  size_t bytes_;
};

void put(PromptCache& cache, std::vector<int32_t> tokens, size_t bytes) {
  const auto n = static_cast<int64_t>(tokens.size());
  cache.insert(std::move(tokens), std::make_unique<FakeSnapshot>(n, bytes));
}

int64_t hit(PromptCache& cache, const std::vector<int32_t>& tokens, int64_t max_length = 1000) {
  const auto m = cache.longest_prefix(tokens, max_length);
  return m ? m->length : -1;
}

TEST(PromptCache, FindsTheLongestPrefix) {
  PromptCache cache(1000);
  put(cache, {1, 2}, 10);
  put(cache, {1, 2, 3, 4}, 10);
  put(cache, {1, 9, 9}, 10);
  EXPECT_EQ(hit(cache, {1, 2, 3, 4, 5}), 4);
  EXPECT_EQ(hit(cache, {1, 2, 3, 7}), 2);
  EXPECT_EQ(hit(cache, {1, 9, 9, 9}), 3);
  EXPECT_EQ(hit(cache, {2, 2}), -1);
  // At most max_length tokens: an entry as long as the prompt leaves nothing to prefill.
  EXPECT_EQ(hit(cache, {1, 2, 3, 4}, 3), 2);
  EXPECT_EQ(hit(cache, {1, 2}, 1), -1);
  const auto m = cache.longest_prefix(std::vector<int32_t>{1, 2, 3, 4, 5}, 100);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->snapshot->position(), 4);
  EXPECT_TRUE(cache.contains(std::vector<int32_t>{1, 9, 9}));
  EXPECT_FALSE(cache.contains(std::vector<int32_t>{1, 9}));
}

TEST(PromptCache, EvictsTheLeastRecentlyUsedWithinTheBudget) {
  PromptCache cache(100);
  put(cache, {1}, 40);
  put(cache, {2}, 40);
  EXPECT_EQ(cache.bytes(), 80u);
  EXPECT_EQ(hit(cache, {1, 0}), 1);  // {1} is now the most recently used
  put(cache, {3}, 40);               // over budget: {2} goes
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.bytes(), 80u);
  EXPECT_EQ(hit(cache, {2, 0}), -1);
  EXPECT_EQ(hit(cache, {1, 0}), 1);
  EXPECT_EQ(hit(cache, {3, 0}), 1);
  // One entry larger than the budget is not kept, and evicts nothing.
  put(cache, {4}, 101);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(hit(cache, {4, 0}), -1);
  // An entry filling the whole budget evicts everything else.
  put(cache, {5}, 100);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.bytes(), 100u);
}

TEST(PromptCache, ReplacesAnEntryForTheSameTokens) {
  PromptCache cache(100);
  put(cache, {1, 2}, 30);
  put(cache, {1, 2}, 50);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.bytes(), 50u);
}

TEST(PromptCache, ZeroBudgetKeepsNothing) {
  PromptCache cache(0);
  put(cache, {1}, 1);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(hit(cache, {1, 2}), -1);
}

}  // namespace
}  // namespace qwick
