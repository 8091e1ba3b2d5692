// A JSON Schema `pattern` (an ECMAScript regular expression, the common subset) -> a GBNF
// expression for the characters of a JSON string whose decoded value the pattern matches.
//
// Supported: literals, `.`, escapes (\d \w \s \D \W \S, \t \n \r, \xHH, \uHHHH, escaped
// punctuation), classes [..] and [^..] with ranges, groups ( ) (?: ) (?<name> ), alternation,
// the quantifiers * + ? {m} {m,} {m,n} (lazy forms match the same strings), ^ and $ at the ends.
// JSON Schema patterns are not anchored: without ^ (or $) any characters may come before (after).
// The output stays inside the string: `"` and `\` are written escaped, control characters are
// left out of classes and `.` (a subset of what the pattern allows, never more).
//
// Refused (Error naming the construct): backreferences, lookaround, word boundaries, Unicode
// property classes, anchors in the middle, counts above `max_repeat`.
//
// Tested in tests/constrain/json_schema_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace qwick {

// How many characters the strings a pattern matches have (max -1: unbounded).
struct RegexLength {
  int64_t min = 0, max = -1;
};

// `json_char` names the grammar rule for any one character of a JSON string (an escape
// included), used for the unanchored ends. `length`, when given, receives the match lengths.
// `cap` >= 0 bounds every unbounded repetition (*, +, {m,}) and unanchored end at that many: the
// strings are then a subset of the matches, of bounded length (for a maxLength beside the pattern).
std::string regex_to_gbnf(std::string_view pattern, std::string_view json_char, int max_repeat = 1000,
                          RegexLength* length = nullptr, int64_t cap = -1);

}  // namespace qwick
