// A context-free grammar over Unicode code points, the form every constraint is compiled to.
//
// Each rule is a list of alternatives; an alternative is a run of elements in one flat array,
// ended by a kEnd element. An element matches one code point from a set of ranges (kChars) or a
// whole rule (kRule). Repetition and grouping are lowered to helper rules by the builders (the
// GBNF parser), so the matcher only ever sees this one shape: a pushdown automaton whose stack
// frames are element positions.
//
// validate() runs once per grammar and refuses what the matcher cannot run: undefined rules,
// left recursion (a rule that can reach itself without consuming a character would expand
// forever) and grammars past the size limits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qwick {

struct CodeRange {
  char32_t lo = 0, hi = 0;  // inclusive
};

struct GrammarElement {
  enum class Kind : uint8_t { kEnd, kChars, kRule };
  Kind kind = Kind::kEnd;
  uint32_t first = 0;  // kChars: first range in Grammar::ranges; kRule: the rule id
  uint32_t count = 0;  // kChars: number of ranges (sorted, disjoint)
};

struct GrammarLimits {
  size_t max_elements = size_t{1} << 21;
  size_t max_rules = size_t{1} << 18;
};

class Grammar {
 public:
  std::vector<GrammarElement> elements;
  std::vector<CodeRange> ranges;
  std::vector<std::vector<uint32_t>> rules;  // rule id -> offsets of its alternatives in elements
  std::vector<std::string> rule_names;
  uint32_t root = 0;

  // Declares a rule (no alternatives yet) and returns its id.
  uint32_t add_rule(std::string name);
  // Appends an alternative to `rule`; `body` holds no kEnd.
  void add_alternative(uint32_t rule, const std::vector<GrammarElement>& body);
  // An element matching one code point of `ranges` (normalized here: sorted, merged).
  GrammarElement chars(std::vector<CodeRange> ranges);
  static GrammarElement rule_ref(uint32_t rule) { return {GrammarElement::Kind::kRule, rule, 0}; }

  bool matches(const GrammarElement& e, char32_t cp) const;
  // Whether any code point of [lo, hi] matches `e`.
  bool matches_any(const GrammarElement& e, char32_t lo, char32_t hi) const;

  // Throws Error naming the rule for an undefined or left-recursive rule, or past `limits`.
  void validate(const GrammarLimits& limits = {}) const;
};

}  // namespace qwick
