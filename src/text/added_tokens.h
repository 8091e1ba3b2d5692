// Added tokens (<|im_start|>, <think>, ...): found literally in the raw text before anything else,
// leftmost-longest, as Hugging Face tokenizers matches them.
//
// Candidates are grouped by first byte (longest first), so the scan costs one table lookup per
// byte of ordinary text. Tokens marked special are only matched when the caller asks for it;
// the others (Qwen's <think>, <tool_call>, ...) always are.
//
// Tested in tests/text/tokenizer_test.cpp (adjacent tokens, near misses, longest match, the
// special switch) and by the goldens.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qwick {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
};

class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  struct Match {
    size_t begin = std::string_view::npos;  // npos: none
    size_t length = 0;
    const AddedToken* token = nullptr;
  };
  // The leftmost-longest match in `text` at or after `from`.
  Match find(std::string_view text, size_t from, bool include_special) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // indices into tokens_, longest first
};

}  // namespace qwick
