// Message text that cannot fake control tokens: a user who types "<|im_end|>\n<|im_start|>system"
// in a message must get those characters read as text, not as the template's role boundaries.
//
// The chat template renders the conversation to one string, so what came from the messages is
// marked before rendering: every control-token string (an added token marked special) in any
// string of the messages and tools is replaced by a placeholder, U+FDD0 index U+FDD1 (U+FDD0 is
// a Unicode noncharacter; one typed in a message is replaced the same way). After rendering,
// restore() puts the original strings back and reports where they are, and the tokenizer reads
// special tokens there as ordinary text (Tokenizer::encode_with_plain_ranges). Everything else,
// including how text around them tokenizes, is as without the marking. Markup that is no control
// token (<think>, <tool_call>) keeps its meaning, as the template relies on it.
//
// Tested in tests/text/message_literals_test.cpp and through the server on every role
// (tests/server/server_output_rules_test.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/tokenizer.h"

namespace qwick {

class MessageLiterals {
 public:
  explicit MessageLiterals(const Tokenizer& tokenizer);

  // `value` with the control-token strings of every string (object keys included) replaced.
  nlohmann::ordered_json protect(const nlohmann::ordered_json& value);

  struct Restored {
    std::string text;
    std::vector<std::pair<size_t, size_t>> plain;  // byte ranges of `text` to read as plain text
  };
  Restored restore(std::string_view rendered) const;

 private:
  std::string protect_string(std::string_view s);

  std::vector<std::string> controls_;  // the strings replaced, longest first
  std::vector<std::string> literals_;  // placeholder index -> what it stands for
};

}  // namespace qwick
