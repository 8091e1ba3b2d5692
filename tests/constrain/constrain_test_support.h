// Helpers shared by the constrain tests: matching whole texts against grammars.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "constrain/gbnf_parser.h"
#include "constrain/grammar_matcher.h"

namespace qwick::test {

inline std::shared_ptr<const Grammar> gbnf(std::string_view text) {
  return std::make_shared<const Grammar>(parse_gbnf(text));
}

// Whether `text` is a complete sentence of `g`, fed in pieces of `piece` bytes.
inline bool full_match(const std::shared_ptr<const Grammar>& g, std::string_view text, size_t piece = 1) {
  GrammarMatcher m(g);
  for (size_t i = 0; i < text.size(); i += piece)
    if (!m.accept(text.substr(i, piece))) return false;
  return m.accepting(m.current());
}

// Whether `text` can be continued into a sentence (or is one).
inline bool prefix_match(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept(text);
}

}  // namespace qwick::test
