#include "constrain/number_grammar.h"

#include <fmt/format.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "constrain/json_schema.h"

namespace qwick {
namespace {

using json = nlohmann::ordered_json;

// The largest magnitude the number rules write (16 digits).
constexpr int64_t kMaxMagnitude = 9999999999999999;

std::string digits_class(int lo, int hi) {
  return lo == hi ? fmt::format("\"{}\"", lo) : fmt::format("[{}-{}]", lo, hi);
}

std::string any_digits(size_t n) {
  return n == 0 ? "" : fmt::format(" [0-9]{{{}}}", n);
}

// Digit strings of t's length (leading zeros allowed) at least / at most t.
std::string ge_rest(const std::string& t) {
  if (t.empty()) return "\"\"";
  const int d = t[0] - '0';
  std::string out = fmt::format("(\"{}\" {})", d, ge_rest(t.substr(1)));
  if (d < 9) out += " | " + digits_class(d + 1, 9) + any_digits(t.size() - 1);
  return "(" + out + ")";
}
std::string le_rest(const std::string& t) {
  if (t.empty()) return "\"\"";
  const int d = t[0] - '0';
  std::string out = fmt::format("(\"{}\" {})", d, le_rest(t.substr(1)));
  if (d > 0) out += " | " + digits_class(0, d - 1) + any_digits(t.size() - 1);
  return "(" + out + ")";
}
// Digit strings of their common length between a and b.
std::string between_rest(const std::string& a, const std::string& b) {
  if (a.empty()) return "\"\"";
  const int x = a[0] - '0', y = b[0] - '0';
  if (x == y) return fmt::format("(\"{}\" {})", x, between_rest(a.substr(1), b.substr(1)));
  std::string out =
      fmt::format("(\"{}\" {}) | (\"{}\" {})", x, ge_rest(a.substr(1)), y, le_rest(b.substr(1)));
  if (y - x > 1) out += " | " + digits_class(x + 1, y - 1) + any_digits(a.size() - 1);
  return "(" + out + ")";
}

// Naturals in [lo, hi] (0 <= lo <= hi <= kMaxMagnitude), without leading zeros.
std::string naturals(int64_t lo, int64_t hi) {
  const std::string a = std::to_string(lo), b = std::to_string(hi);
  std::vector<std::string> alts;
  if (a.size() == b.size()) {
    alts.push_back(between_rest(a, b));
  } else {
    alts.push_back(between_rest(a, std::string(a.size(), '9')));
    if (b.size() > a.size() + 1) alts.push_back(fmt::format("[1-9] [0-9]{{{},{}}}", a.size(), b.size() - 2));
    std::string power(b.size(), '0');
    power[0] = '1';
    alts.push_back(between_rest(power, b));
  }
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return "(" + out + ")";
}

std::optional<double> bound(const json& s, const char* key, const std::string& path) {
  if (!s.contains(key)) return std::nullopt;
  if (!s[key].is_number()) refuse_keyword(key, path, "must be a number");
  return s[key].get<double>();
}

}  // namespace

std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  const int64_t top = hi ? std::min(*hi, kMaxMagnitude) : kMaxMagnitude;
  const int64_t bottom = lo ? std::max(*lo, -kMaxMagnitude) : -kMaxMagnitude;
  if (bottom < 0)
    alts.push_back("\"-\" " + naturals(std::max<int64_t>(1, -std::min<int64_t>(top, -1)), -bottom));
  if (top >= 0) alts.push_back(naturals(std::max<int64_t>(bottom, 0), top));
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return "(" + out + ")";
}

std::optional<std::string> bounded_number(const json& s, bool integer, const std::string& path) {
  std::optional<double> min = bound(s, "minimum", path), max = bound(s, "maximum", path);
  bool min_exclusive = false, max_exclusive = false;
  // Draft 4: exclusiveMinimum / exclusiveMaximum are booleans qualifying minimum / maximum.
  for (const auto& [key, target, flag] : {std::tuple{"exclusiveMinimum", &min, &min_exclusive},
                                          std::tuple{"exclusiveMaximum", &max, &max_exclusive}}) {
    if (!s.contains(key)) continue;
    const json& v = s[key];
    if (v.is_boolean()) {
      *flag = v.get<bool>() && target->has_value();
    } else if (v.is_number()) {
      const double x = v.get<double>();
      const bool lower = std::string_view(key) == "exclusiveMinimum";
      if (!target->has_value() || (lower ? x >= **target : x <= **target)) {
        *target = x;
        *flag = true;
      }
    } else {
      refuse_keyword(key, path, "must be a number or a boolean");
    }
  }
  if (!min && !max) return std::nullopt;
  for (const auto& [v, key] : {std::pair{min, "minimum"}, std::pair{max, "maximum"}})
    if (v && std::abs(*v) > 1e15) refuse_keyword(key, path, "bounds beyond 1e15 are not supported");
  if (integer) {
    std::optional<int64_t> lo, hi;
    if (min) lo = static_cast<int64_t>(min_exclusive ? std::floor(*min) + 1 : std::ceil(*min));
    if (max) hi = static_cast<int64_t>(max_exclusive ? std::ceil(*max) - 1 : std::floor(*max));
    if (lo && hi && *lo > *hi) refuse_keyword("minimum", path, "no integer lies within the bounds");
    return integer_range(lo, hi);
  }
  // Non-integers: integer-valued bounds at or above 0 only; an integer part, then a fraction.
  for (const auto& [v, key] : {std::pair{min, "minimum"}, std::pair{max, "maximum"}})
    if (v && (*v < 0 || std::floor(*v) != *v))
      refuse_keyword(key, path, "non-integer bounds only at integers >= 0");
  const int64_t lo = min ? static_cast<int64_t>(*min) : 0;
  if (!min && max) refuse_keyword("maximum", path, "a number bounded above only");
  std::string out;
  if (!max) {
    // x >= lo (or > lo): the integer part at least lo (with a fraction above lo when exclusive).
    out = min_exclusive ? fmt::format("({} \".\" [0-9]{{0,15}} [1-9]) | ({} json-frac?)",
                                      integer_range(lo, lo), integer_range(lo + 1, std::nullopt))
                        : fmt::format("{} json-frac?", integer_range(lo, std::nullopt));
    return out;
  }
  const auto hi = static_cast<int64_t>(*max);
  if (hi < lo || (hi == lo && (min_exclusive || max_exclusive)))
    refuse_keyword("minimum", path, "no number lies within the bounds");
  std::vector<std::string> alts;
  if (min_exclusive) alts.push_back(fmt::format("{} \".\" [0-9]{{0,15}} [1-9]", integer_range(lo, lo)));
  const int64_t whole_lo = min_exclusive ? lo + 1 : lo;
  if (whole_lo <= hi - 1) alts.push_back(fmt::format("{} json-frac?", integer_range(whole_lo, hi - 1)));
  if (!max_exclusive && whole_lo <= hi) alts.push_back(fmt::format("\"{}\" (\".\" \"0\"{{1,16}})?", hi));
  if (alts.empty()) refuse_keyword("maximum", path, "no number lies within the bounds");
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + ("(" + alts[i] + ")");
  return out;
}

}  // namespace qwick
