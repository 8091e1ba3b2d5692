// The tokenizer.json normalizer: none or Unicode NFC (what Qwen tokenizers use), through utf8proc.
//
// NFC as Hugging Face tokenizers computes it, which is with Unicode 9.0 data: characters assigned
// later that take part in normalization (nfc_unicode9_table.h, e.g. combining marks of Unicode 14)
// are left where they are, as 9.0 treats unknown characters, and the text between them is
// normalized by utf8proc (Unicode 15). The normalization stability policy makes that exact.
//
// Text whose bytes are all below 0xCC (every code point below U+0300, so no combining marks and
// nothing NFC can change) is returned as is without calling utf8proc: the common case costs one
// scan. Any other normalizer type is refused with an Error naming it.
//
// Tested in tests/text/tokenizer_test.cpp (NFD input, marks newer than Unicode 9, unsupported
// types), by the goldens (vietnamese_nfd) and tests/node (random marks against the Rust library).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace qwick {

class Normalizer {
 public:
  // `config` is the "normalizer" value of tokenizer.json (null for none).
  static Normalizer from_json(const nlohmann::json& config);

  // Returns the normalized text: `text` itself or a view of `storage`. `text` must be valid UTF-8.
  std::string_view apply(std::string_view text, std::string& storage) const;
  bool enabled() const { return nfc_; }

 private:
  bool nfc_ = false;
};

}  // namespace qwick
