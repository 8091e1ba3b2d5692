// libFuzzer target: arbitrary text through the GBNF parser, and each grammar that parses run over
// a few bytes of the same input. Every input must parse or throw qwick::Error, and matching must
// stay within the matcher's bounds. Seeds: small grammars written by fuzz/CMakeLists.txt.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "constrain/gbnf_parser.h"
#include "constrain/grammar_matcher.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  qwick::GbnfOptions options;
  options.max_repeat = 1000;
  options.limits.max_elements = 1 << 16;
  try {
    auto grammar = std::make_shared<const qwick::Grammar>(qwick::parse_gbnf(text, options));
    qwick::MatcherLimits limits;
    limits.max_stacks = 256;
    qwick::GrammarMatcher matcher(grammar, limits);
    for (size_t i = 0; i < std::min<size_t>(size, 64); ++i) {
      if (!matcher.accept(text.substr(i, 1))) break;
      (void)matcher.accepting(matcher.current());
    }
  } catch (const qwick::Error&) {
  }
  return 0;
}
