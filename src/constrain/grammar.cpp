#include "constrain/grammar.h"

#include <algorithm>

#include "core/error.h"

namespace qwick {

uint32_t Grammar::add_rule(std::string name) {
  rules.emplace_back();
  rule_names.push_back(std::move(name));
  return static_cast<uint32_t>(rules.size() - 1);
}

void Grammar::add_alternative(uint32_t rule, const std::vector<GrammarElement>& body) {
  rules[rule].push_back(static_cast<uint32_t>(elements.size()));
  elements.insert(elements.end(), body.begin(), body.end());
  elements.push_back({});
}

GrammarElement Grammar::chars(std::vector<CodeRange> in) {
  std::sort(in.begin(), in.end(), [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
  const auto first = static_cast<uint32_t>(ranges.size());
  for (const CodeRange& r : in) {
    if (r.lo > r.hi) continue;
    if (ranges.size() > first && r.lo <= ranges.back().hi + 1)
      ranges.back().hi = std::max(ranges.back().hi, r.hi);
    else
      ranges.push_back(r);
  }
  return {GrammarElement::Kind::kChars, first, static_cast<uint32_t>(ranges.size() - first)};
}

bool Grammar::matches(const GrammarElement& e, char32_t cp) const {
  return matches_any(e, cp, cp);
}

bool Grammar::matches_any(const GrammarElement& e, char32_t lo, char32_t hi) const {
  const CodeRange* begin = ranges.data() + e.first;
  const CodeRange* end = begin + e.count;
  // The first range whose upper end reaches lo; it overlaps [lo, hi] if it starts by hi.
  const CodeRange* r =
      std::lower_bound(begin, end, lo, [](const CodeRange& x, char32_t v) { return x.hi < v; });
  return r != end && r->lo <= hi;
}

void Grammar::validate(const GrammarLimits& limits) const {
  if (elements.size() > limits.max_elements)
    fail("the grammar is too large: {} elements (limit {})", elements.size(), limits.max_elements);
  if (rules.size() > limits.max_rules)
    fail("the grammar has too many rules: {} (limit {})", rules.size(), limits.max_rules);
  if (root >= rules.size()) fail("the grammar has no root rule");
  for (size_t r = 0; r < rules.size(); ++r)
    if (rules[r].empty()) fail("grammar rule '{}' is used but never defined", rule_names[r]);
  for (const GrammarElement& e : elements)
    if (e.kind == GrammarElement::Kind::kRule && e.first >= rules.size())
      fail("a grammar element refers to rule {} which does not exist", e.first);

  // Nullable rules (can match the empty string), to a fixed point.
  std::vector<char> nullable(rules.size(), 0);
  auto alt_nullable = [&](uint32_t at) {
    for (;; ++at) {
      const GrammarElement& e = elements[at];
      if (e.kind == GrammarElement::Kind::kEnd) return true;
      if (e.kind == GrammarElement::Kind::kChars || !nullable[e.first]) return false;
    }
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r)
      if (!nullable[r] && std::any_of(rules[r].begin(), rules[r].end(), alt_nullable))
        nullable[r] = changed = true;
  }
  // Left recursion: a rule reachable from itself through leftmost positions (after nullable
  // rules). Depth-first search with colours over the "may start with" graph.
  std::vector<std::vector<uint32_t>> starts(rules.size());
  for (size_t r = 0; r < rules.size(); ++r)
    for (uint32_t at : rules[r])
      for (;; ++at) {
        const GrammarElement& e = elements[at];
        if (e.kind != GrammarElement::Kind::kRule) break;
        starts[r].push_back(e.first);
        if (!nullable[e.first]) break;
      }
  std::vector<char> colour(rules.size(), 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> path;
  for (uint32_t s = 0; s < rules.size(); ++s) {
    if (colour[s]) continue;
    path.push_back({s, 0});
    colour[s] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == starts[r].size()) {
        colour[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t to = starts[r][next++];
      if (colour[to] == 1)
        fail("grammar rule '{}' is left-recursive (it can reach itself without consuming input)",
             rule_names[to]);
      if (colour[to] == 0) {
        colour[to] = 1;
        path.push_back({to, 0});
      }
    }
  }
}

}  // namespace qwick
