// The tokenizer of a model directory: Hugging Face tokenizer.json, byte-level BPE.
//
// encode(text): added tokens are cut out of the raw text first (leftmost-longest); every stretch
// between them is normalized (NFC), split by the pre-tokenizer regex and each piece BPE-encoded.
// Nothing is added at the ends (Qwen adds no BOS/EOS). decode(ids) concatenates the raw bytes of
// the tokens (added tokens as their text), which need not be valid UTF-8 at a cut.
//
// What is supported is checked at load; anything else (another model type, normalizer,
// pre-tokenizer or decoder, added-token stripping options) is an Error that names it, never a
// silently different tokenization.
//
// Tested in tests/text/tokenizer_test.cpp (the goldens of shared/reference/tokenizer for the Qwen3
// file and the Qwen3.5/3.6 regex, byte for byte, and error cases) and tests/node/tokenizer.mjs
// (a generated corpus against the Rust tokenizers library).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/added_tokens.h"
#include "text/bpe_model.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"

namespace qwick {

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a directory holding one.
  static Tokenizer from_file(const std::string& path);
  // `source` names the text in error messages.
  static Tokenizer from_json_text(std::string_view json_text, const std::string& source);

  // `parse_special`: added tokens marked special (<|im_start|>, <|endoftext|>, ...) written in
  // the text become their ids; otherwise they are encoded as ordinary text. Added tokens not
  // marked special (<think>, <tool_call>, ...) are always matched. Throws Error if `text` is not
  // valid UTF-8 (naming the byte offset).
  std::vector<int32_t> encode(std::string_view text, bool parse_special) const;
  // `limit`: encoding stops once `out` holds more than `limit` tokens (the rest of the text is not
  // encoded), for callers that refuse longer texts anyway.
  void encode(std::string_view text, bool parse_special, std::vector<int32_t>& out,
              size_t limit = SIZE_MAX) const;
  // As encode(text, true), except that inside the byte ranges `plain` ([begin, end), sorted, not
  // overlapping) special tokens are ordinary text: a chat prompt whose message text must not
  // fake the template's control tokens. Text across a range's edge tokenizes as if no range were
  // there.
  std::vector<int32_t> encode_with_plain_ranges(std::string_view text,
                                                std::span<const std::pair<size_t, size_t>> plain,
                                                size_t limit = SIZE_MAX) const;

  // The pieces BPE sees, in order: each added token matched, and each piece the pre-tokenizer cut
  // from the normalized text between them. For tests and debugging.
  std::vector<std::string> pieces(std::string_view text, bool parse_special) const;

  // Raw bytes of `ids`; ids the tokenizer does not define are skipped (as Hugging Face does),
  // special added tokens too when `skip_special`.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // Raw bytes of one token (empty for an undefined id).
  std::string_view token_bytes(int32_t id) const;
  bool has_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // A control token: special, or an added token written <|...|> (Qwen's FIM and repository
  // markers are not marked special but are no text either). <think>, <tool_call> and the other
  // markup tags are not control tokens: the output parser reads them.
  bool is_control(int32_t id) const;
  // The id of an added token by its text ("<|im_end|>"), if there is one.
  std::optional<int32_t> added_token_id(std::string_view content) const;

  // One past the largest id the tokenizer defines.
  int32_t id_limit() const { return id_limit_; }
  const BpeModel& model() const { return *model_; }
  const std::vector<AddedToken>& added_tokens() const { return added_->tokens(); }

 private:
  Tokenizer() = default;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out, size_t limit = SIZE_MAX) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<AddedTokenMatcher> added_;
  Normalizer normalizer_;
  std::shared_ptr<PreTokenizer> pre_tokenizer_;
  std::vector<int32_t> added_index_;  // id -> index into added tokens, -1 for none
  int32_t id_limit_ = 0;
};

}  // namespace qwick
