// GBNF (llama.cpp's grammar notation) -> Grammar.
//
//   root  ::= "{" ws pair ("," ws pair)* "}"     # the rule named "root" is the start
//   pair  ::= [a-z]+ ":" [^\x00-\x1f"]{1,8} | "-"? digit
//
// Literals "..." and character classes [...] / [^...] (ranges, \n \t \r \\ \" \] \- \xHH \uHHHH
// \UHHHHHHHH escapes), `.` for any character, rule names, groups ( ), and the postfix operators
// * + ? {m} {m,} {m,n}; # starts a comment. A rule ends where the next `name ::=` begins, so
// alternatives may continue across lines. Repetition is lowered to helper rules (x* becomes
// r ::= x r | ""), bounded by `max_repeat` per operator and by the grammar's size limits.
//
// Errors name the line and column. Tested in tests/constrain/gbnf_parser_test.cpp.
#pragma once

#include <string_view>

#include "constrain/grammar.h"

namespace qwick {

struct GbnfOptions {
  int max_repeat = 10000;  // the largest m or n of {m,n}
  GrammarLimits limits;
};

// Throws Error for a syntax error, an undefined rule, a grammar without "root", left recursion or
// a grammar past the limits.
Grammar parse_gbnf(std::string_view text, const GbnfOptions& options = {});

// `text` as a GBNF string literal (quotes included), escaping what the notation needs.
std::string gbnf_literal(std::string_view text);

}  // namespace qwick
