// The tokenizer.json pre-tokenizer: cuts normalized text into the pieces BPE encodes one by one.
//
// Supported, as Qwen and GPT-2 style tokenizers use them:
//   Split{pattern: Regex|String, behavior: Isolated, invert: false}  every match and every gap
//                                                                     between matches is a piece
//   ByteLevel{add_prefix_space: false}  the byte mapping itself is done by the BPE model; with
//                                       use_regex it also splits by the GPT-2 pattern
//   Sequence of the above                each step splits the pieces of the previous one
// The regex is the one written in the file, compiled by PCRE2 with UTF + UCP (Unicode properties
// for \p{..}, case folding) and JIT, and read as the reference (Hugging Face tokenizers, through
// Oniguruma) reads it: \s is the White_Space property and \p{L}, \p{M}, \p{N} follow Unicode 16
// (see for_reference_unicode in pre_tokenizer.cpp). Anything else is refused with an Error
// naming it.
//
// Tested in tests/text/tokenizer_test.cpp (pieces against the goldens' pre_tokens for both the
// Qwen3 and the Qwen3.5/3.6 regex, unsupported configurations) and tests/node (random text).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qwick {

// One compiled PCRE2 pattern. Matching is thread-safe (match data is per call).
class Regex {
 public:
  // `literal`: match `pattern` as plain text.
  Regex(const std::string& pattern, bool literal);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Appends to `out` every match and every non-empty gap between matches of `text` (valid UTF-8),
  // in order: the "Isolated" split of Hugging Face tokenizers.
  void split_isolated(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class PreTokenizer {
 public:
  // `config` is the "pre_tokenizer" value of tokenizer.json (null: the whole text is one piece).
  static PreTokenizer from_json(const nlohmann::json& config);

  // Replaces `pieces` with the pieces of `text` (valid UTF-8); they point into `text`.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  std::vector<Regex> steps_;
};

}  // namespace qwick
