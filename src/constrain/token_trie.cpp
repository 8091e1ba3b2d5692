#include "constrain/token_trie.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "text/tokenizer.h"

namespace qwick {

TokenTrie::TokenTrie(std::vector<std::pair<int32_t, std::string>> tokens, int64_t vocab_size)
    : vocab_size_(vocab_size) {
  bytes_.resize(static_cast<size_t>(vocab_size));
  std::erase_if(tokens, [](const auto& t) { return t.second.empty(); });
  for (const auto& [id, b] : tokens) {
    if (id < 0 || id >= vocab_size) fail("token id {} is outside the vocabulary of {}", id, vocab_size);
    bytes_[static_cast<size_t>(id)] = b;
  }
  std::sort(tokens.begin(), tokens.end(), [](const auto& a, const auto& b) { return a.second < b.second; });

  // Each work item: a node and the sorted range of tokens below it, at byte depth `depth`. The
  // tokens that end at the node come first in its range (a prefix sorts before its extensions).
  struct Item {
    uint32_t node;
    size_t begin, end, depth;
  };
  nodes_.push_back({});
  std::vector<Item> work{{0, 0, tokens.size(), 0}};
  while (!work.empty()) {
    const Item it = work.back();
    work.pop_back();
    size_t i = it.begin;
    nodes_[it.node].first_token = static_cast<uint32_t>(tokens_.size());
    for (; i < it.end && tokens[i].second.size() == it.depth; ++i) tokens_.push_back(tokens[i].first);
    nodes_[it.node].token_count = static_cast<uint32_t>(tokens_.size() - nodes_[it.node].first_token);
    const auto first_child = static_cast<uint32_t>(nodes_.size());
    uint32_t count = 0;
    std::vector<Item> children;
    while (i < it.end) {
      const auto byte = static_cast<uint8_t>(tokens[i].second[it.depth]);
      size_t j = i;
      while (j < it.end && static_cast<uint8_t>(tokens[j].second[it.depth]) == byte) ++j;
      Node child;
      child.byte = byte;
      nodes_.push_back(child);
      children.push_back({first_child + count, i, j, it.depth + 1});
      ++count;
      i = j;
    }
    nodes_[it.node].first_child = first_child;
    nodes_[it.node].child_count = count;
    work.insert(work.end(), children.begin(), children.end());
  }
}

TokenTrie TokenTrie::from_tokenizer(const Tokenizer& tokenizer, int64_t vocab_size) {
  std::vector<std::pair<int32_t, std::string>> tokens;
  const int32_t limit = static_cast<int32_t>(std::min<int64_t>(vocab_size, tokenizer.id_limit()));
  for (int32_t id = 0; id < limit; ++id)
    if (tokenizer.has_token(id) && !tokenizer.is_control(id))
      tokens.emplace_back(id, std::string(tokenizer.token_bytes(id)));
  return TokenTrie(std::move(tokens), vocab_size);
}

}  // namespace qwick
