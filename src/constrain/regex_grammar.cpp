#include "constrain/regex_grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "text/utf8.h"

namespace qwick {
namespace {

struct Range {
  char32_t lo, hi;
};

// Code point ranges -> a GBNF class (or an escaped literal for " and \, which a JSON string
// holds only escaped). Control characters are dropped: a JSON string holds them escaped only.
std::string class_expr(std::vector<Range> ranges, bool negated) {
  if (negated) {
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.lo < b.lo; });
    std::vector<Range> out;
    char32_t next = 0;
    for (const Range& r : ranges) {
      if (r.lo > next) out.push_back({next, r.lo - 1});
      next = std::max<char32_t>(next, r.hi + 1);
    }
    if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
    ranges = std::move(out);
  }
  bool quote = false, backslash = false;
  std::string cls;
  auto code = [](char32_t c) { return fmt::format("\\U{:08X}", static_cast<uint32_t>(c)); };
  auto add = [&](char32_t lo, char32_t hi) {
    if (lo > hi) return;
    cls += code(lo);
    if (hi > lo) {
      cls += '-';
      cls += code(hi);
    }
  };
  for (const Range& r : ranges) {
    char32_t lo = std::max<char32_t>(r.lo, 0x20);
    const char32_t hi = r.hi;
    if (lo > hi) continue;
    for (char32_t special : {U'"', U'\\'}) {
      if (lo <= special && special <= hi) {
        (special == '"' ? quote : backslash) = true;
        add(lo, special - 1);
        lo = special + 1;
      }
    }
    add(lo, hi);
  }
  std::vector<std::string> alts;
  if (!cls.empty()) alts.push_back("[" + cls + "]");
  if (quote) alts.push_back("\"\\\\\\\"\"");      // the two characters \"
  if (backslash) alts.push_back("\"\\\\\\\\\"");  // the two characters \\ (escaped)
  if (alts.empty()) fail("a character class matches no character a JSON string can hold");
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

std::string literal_expr(char32_t c) {
  return class_expr({{c, c}}, false);
}

// A parsed piece of the pattern: its GBNF and how many characters it matches.
struct Piece {
  std::string text;
  RegexLength length;
};

int64_t add_lengths(int64_t a, int64_t b) {
  return a < 0 || b < 0 ? -1 : a + b;
}
int64_t scale_length(int64_t a, int64_t n) {
  return a < 0 ? (n == 0 ? 0 : -1) : a * n;
}

class RegexParser {
 public:
  RegexParser(std::string_view p, std::string_view json_char, int max_repeat, int64_t cap)
      : p_(p), json_char_(json_char), max_repeat_(max_repeat), cap_(cap) {}

  // Top-level alternatives, each with its own anchors.
  std::string run(RegexLength* length) {
    if (!is_valid_utf8(p_)) refuse("invalid UTF-8");
    std::string out;
    RegexLength total{-1, 0};
    for (;;) {
      const bool start = at('^');
      if (start) ++pos_;
      const Piece body = sequence(0);
      const bool end = at('$');
      if (end) ++pos_;
      if (!out.empty()) out += " | ";
      out += "(";
      const std::string any =
          cap_ < 0 ? std::string(json_char_) + "*" : fmt::format("{}{{0,{}}}", json_char_, cap_);
      if (!start) out += any + " ";
      out += fmt::format("({})", body.text);
      if (!end) out += " " + any;
      out += ")";
      total.min = total.min < 0 ? body.length.min : std::min(total.min, body.length.min);
      const int64_t ends = (start ? 0 : cap_) + (end ? 0 : cap_);
      const int64_t max = (start && end) || cap_ >= 0 ? add_lengths(body.length.max, ends) : -1;
      total.max = total.max < 0 || max < 0 ? -1 : std::max(total.max, max);
      if (!at('|')) break;
      ++pos_;
    }
    if (pos_ != p_.size()) refuse(fmt::format("an unexpected '{}' at offset {}", p_[pos_], pos_));
    if (length) *length = total;
    return fmt::format("({})", out);
  }

 private:
  [[noreturn]] void refuse(const std::string& why) const {
    fail("{} in the pattern {}", why, std::string(p_));
  }

  bool at(char c) const { return pos_ < p_.size() && p_[pos_] == c; }

  Piece alternation(int depth) {
    if (depth > 64) refuse("groups nested too deeply");
    std::vector<Piece> alts{sequence(depth)};
    while (at('|')) {
      ++pos_;
      alts.push_back(sequence(depth));
    }
    if (alts.size() == 1) return alts[0];
    Piece out{"", alts[0].length};
    for (size_t i = 0; i < alts.size(); ++i) {
      out.text += fmt::format("{}({})", i ? " | " : "", alts[i].text);
      out.length.min = std::min(out.length.min, alts[i].length.min);
      out.length.max =
          out.length.max < 0 || alts[i].length.max < 0 ? -1 : std::max(out.length.max, alts[i].length.max);
    }
    return out;
  }

  Piece sequence(int depth) {
    Piece out{"", {0, 0}};
    while (pos_ < p_.size() && !at('|') && !at(')')) {
      if (at('$') && (pos_ + 1 == p_.size() || p_[pos_ + 1] == '|')) break;
      Piece a = atom(depth);
      a.text = fmt::format("({})", a.text);
      a = quantifier(std::move(a));
      out.text += (out.text.empty() ? "" : " ") + a.text;
      out.length.min += a.length.min;
      out.length.max = add_lengths(out.length.max, a.length.max);
    }
    if (out.text.empty()) out.text = "\"\"";
    return out;
  }

  int number() {
    long v = 0;
    const size_t start = pos_;
    while (pos_ < p_.size() && p_[pos_] >= '0' && p_[pos_] <= '9') {
      v = v * 10 + (p_[pos_++] - '0');
      if (v > max_repeat_) refuse(fmt::format("a repetition count above {}", max_repeat_));
    }
    if (pos_ == start) refuse("expected a repetition count");
    return static_cast<int>(v);
  }

  Piece quantifier(Piece a) {
    if (pos_ >= p_.size()) return a;
    std::string q;
    const char c = p_[pos_];
    int64_t lo = 0, hi = -1;  // repetitions
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      q = std::string(1, c);
      lo = c == '+' ? 1 : 0;
      hi = c == '?' ? 1 : -1;
    } else if (c == '{') {
      const size_t save = pos_++;
      if (pos_ >= p_.size() || p_[pos_] < '0' || p_[pos_] > '9') {  // a literal {, as JS reads it
        pos_ = save;
        return a;
      }
      const int m = number();
      q = fmt::format("{{{}", m);
      lo = hi = m;
      if (at(',')) {
        ++pos_;
        hi = -1;
        if (at('}')) {
          q += ",";
        } else {
          const int n = number();
          if (n < m) refuse("a repetition {m,n} with n below m");
          q += fmt::format(",{}", n);
          hi = n;
        }
      }
      if (!at('}')) refuse("an unterminated repetition {");
      ++pos_;
      q += "}";
    } else {
      return a;
    }
    if (at('?')) ++pos_;  // lazy: the same strings
    if (at('*') || at('+') || at('?') || at('{')) refuse("a repeated quantifier");
    if (hi < 0 && cap_ >= 0) {  // bounded: a subset of the matches
      hi = std::max(lo, cap_);
      q = fmt::format("{{{},{}}}", lo, hi);
    }
    a.text += q;
    a.length.min *= lo;
    a.length.max = hi < 0 ? (a.length.max == 0 ? 0 : -1) : scale_length(a.length.max, hi);
    return a;
  }

  Piece atom(int depth) {
    const char c = p_[pos_];
    if (c == '(') {
      ++pos_;
      if (at('?')) {
        ++pos_;
        if (at(':')) {
          ++pos_;
        } else if (at('<') && pos_ + 1 < p_.size() && p_[pos_ + 1] != '=' && p_[pos_ + 1] != '!') {
          while (pos_ < p_.size() && p_[pos_] != '>') ++pos_;
          if (!at('>')) refuse("an unterminated group name");
          ++pos_;
        } else {
          refuse("lookaround assertions");
        }
      }
      Piece inner = alternation(depth + 1);
      if (!at(')')) refuse("an unclosed group");
      ++pos_;
      return inner;
    }
    if (c == '[') return {char_class(), {1, 1}};
    if (c == '.') {
      ++pos_;
      return {class_expr({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true), {1, 1}};
    }
    if (c == '^' || c == '$') refuse("an anchor in the middle of the pattern");
    if (c == '*' || c == '+' || c == '?') refuse("a quantifier with nothing to repeat");
    if (c == ')') refuse("an unmatched )");
    if (c == '\\') {
      std::vector<Range> ranges;
      bool negated = false;
      escape(ranges, negated, false);
      return {class_expr(ranges, negated), {1, 1}};
    }
    return {literal_expr(decode_utf8(p_, pos_)), {1, 1}};
  }

  char32_t hex(int digits) {
    char32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= p_.size()) refuse("an incomplete hex escape");
      const char c = p_[pos_++];
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) refuse("an invalid hex escape");
      v = v * 16 + static_cast<char32_t>(d);
    }
    return v;
  }

  // An escape at pos_ (the backslash): its ranges; classes like \D set `negated` (outside a
  // class) or are expanded (inside one, where negation cannot mix).
  void escape(std::vector<Range>& out, bool& negated, bool in_class) {
    ++pos_;
    if (pos_ >= p_.size()) refuse("a trailing backslash");
    const char c = p_[pos_++];
    const std::vector<Range> digit{{'0', '9'}};
    const std::vector<Range> word{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    const std::vector<Range> space{{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680},
                                   {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                   {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    auto set = [&](const std::vector<Range>& r, bool neg) {
      if (neg && in_class) refuse("a negated class escape (\\D \\W \\S) inside [ ]");
      out.insert(out.end(), r.begin(), r.end());
      negated = neg;
    };
    switch (c) {
      case 'd':
        return set(digit, false);
      case 'D':
        return set(digit, true);
      case 'w':
        return set(word, false);
      case 'W':
        return set(word, true);
      case 's':
        return set(space, false);
      case 'S':
        return set(space, true);
      case 't':
        out.push_back({'\t', '\t'});
        return;
      case 'n':
        out.push_back({'\n', '\n'});
        return;
      case 'r':
        out.push_back({'\r', '\r'});
        return;
      case 'f':
        out.push_back({'\f', '\f'});
        return;
      case 'v':
        out.push_back({'\v', '\v'});
        return;
      case '0':
        out.push_back({0, 0});
        return;
      case 'x': {
        const char32_t v = hex(2);
        out.push_back({v, v});
        return;
      }
      case 'u': {
        const char32_t v = hex(4);
        out.push_back({v, v});
        return;
      }
      case 'b':
        if (in_class) {
          out.push_back({8, 8});
          return;
        }
        refuse("word boundaries (\\b)");
      case 'B':
        refuse("word boundaries (\\B)");
      case 'p':
      case 'P':
        refuse("Unicode property classes (\\p)");
      case 'k':
        refuse("named backreferences (\\k)");
      default:
        if (c >= '1' && c <= '9') refuse("backreferences");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) refuse(fmt::format("the escape \\{}", c));
        --pos_;
        const char32_t v = decode_utf8(p_, pos_);
        out.push_back({v, v});
    }
  }

  std::string char_class() {
    ++pos_;  // [
    const bool negated = at('^');
    if (negated) ++pos_;
    std::vector<Range> ranges;
    while (pos_ < p_.size() && !at(']')) {
      char32_t lo;
      if (at('\\')) {
        std::vector<Range> r;
        bool neg = false;
        escape(r, neg, true);
        if (r.size() != 1 || r[0].lo != r[0].hi) {
          ranges.insert(ranges.end(), r.begin(), r.end());
          continue;
        }
        lo = r[0].lo;
      } else {
        lo = decode_utf8(p_, pos_);
      }
      char32_t hi = lo;
      if (at('-') && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        if (at('\\')) {
          std::vector<Range> r;
          bool neg = false;
          escape(r, neg, true);
          if (r.size() != 1 || r[0].lo != r[0].hi) refuse("a class escape as a range end");
          hi = r[0].lo;
        } else {
          hi = decode_utf8(p_, pos_);
        }
        if (hi < lo) refuse("a reversed range in a class");
      }
      ranges.push_back({lo, hi});
    }
    if (!at(']')) refuse("an unterminated class");
    ++pos_;
    if (ranges.empty()) {
      if (negated) return class_expr({}, true);
      refuse("an empty class");
    }
    return class_expr(ranges, negated);
  }

  std::string_view p_;
  std::string_view json_char_;
  int max_repeat_;
  int64_t cap_;
  size_t pos_ = 0;
};

}  // namespace

std::string regex_to_gbnf(std::string_view pattern, std::string_view json_char, int max_repeat,
                          RegexLength* length, int64_t cap) {
  return RegexParser(pattern, json_char, max_repeat, cap).run(length);
}

}  // namespace qwick
