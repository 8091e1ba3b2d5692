// The vocabulary as a byte trie: tokens that share a prefix share the path to it, so a mask walk
// advances the grammar over each distinct prefix once.
//
// Built once per tokenizer from the raw bytes of every token that is text: the ordinary tokens
// and the markup tags (<tool_call>, <think>, ...), which the tokenizer always writes as their own
// ids, so a tool call's constrained markup is the tokens the model knows. Control tokens
// (<|im_end|> and the rest) are never constrained text. A node's children are contiguous and
// sorted by byte.
//
// Tested in tests/constrain/token_mask_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace qwick {

class Tokenizer;

class TokenTrie {
 public:
  struct Node {
    uint32_t first_child = 0, child_count = 0;
    uint32_t first_token = 0, token_count = 0;  // tokens whose bytes end here
    uint8_t byte = 0;
  };

  // (id, raw bytes) pairs; empty byte strings are skipped. `vocab_size` bounds the ids.
  TokenTrie(std::vector<std::pair<int32_t, std::string>> tokens, int64_t vocab_size);
  static TokenTrie from_tokenizer(const Tokenizer& tokenizer, int64_t vocab_size);

  const Node& root() const { return nodes_[0]; }
  std::span<const Node> children(const Node& n) const {
    return {nodes_.data() + n.first_child, n.child_count};
  }
  std::span<const int32_t> tokens(const Node& n) const {
    return {tokens_.data() + n.first_token, n.token_count};
  }
  int64_t vocab_size() const { return vocab_size_; }
  size_t node_count() const { return nodes_.size(); }
  // The raw bytes of a token in the trie ("" for an added or undefined token).
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
  std::vector<std::string> bytes_;
  int64_t vocab_size_ = 0;
};

}  // namespace qwick
