#include "constrain/gbnf_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "text/utf8.h"

namespace qwick {
namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class Parser {
 public:
  Parser(std::string_view text, const GbnfOptions& options) : text_(text), options_(options) {}

  Grammar run() {
    if (!is_valid_utf8(text_)) fail("the grammar is not valid UTF-8 (at byte {})", find_invalid_utf8(text_));
    skip_space();
    while (pos_ < text_.size()) {
      const std::string name = parse_name();
      skip_space();
      if (!consume("::=")) error("expected ::= after the rule name '{}'", name);
      const uint32_t rule = rule_id(name);
      if (defined_.size() <= rule) defined_.resize(rule + 1, false);
      if (defined_[rule]) error("rule '{}' is defined twice", name);
      defined_[rule] = true;
      parse_alternatives(rule, 0);
      skip_space();
    }
    const auto root = ids_.find("root");
    if (root == ids_.end()) fail("the grammar has no rule named 'root'");
    g_.root = root->second;
    g_.validate(options_.limits);
    return std::move(g_);
  }

 private:
  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw Error(fmt::format("grammar syntax error at line {}, column {}: {}", line, column,
                            fmt::format(format, std::forward<Args>(args)...)));
  }

  void check_size() const {
    if (g_.elements.size() > options_.limits.max_elements || g_.rules.size() > options_.limits.max_rules)
      fail("the grammar is too large (limits: {} elements, {} rules)", options_.limits.max_elements,
           options_.limits.max_rules);
  }

  // Whitespace and comments; newlines too (rules end where the next definition starts).
  void skip_space() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  bool consume(std::string_view s) {
    if (text_.substr(pos_, s.size()) != s) return false;
    pos_ += s.size();
    return true;
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    if (pos_ == start) error("expected a rule name");
    return std::string(text_.substr(start, pos_ - start));
  }

  // Whether a rule definition (`name ::=`) starts here.
  bool at_definition() const {
    size_t p = pos_;
    while (p < text_.size() && is_name_char(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t' || text_[p] == '\r' || text_[p] == '\n'))
      ++p;
    return text_.substr(p, 3) == "::=";
  }

  uint32_t rule_id(const std::string& name) {
    const auto [it, inserted] = ids_.try_emplace(name, 0);
    if (inserted) {
      it->second = g_.add_rule(name);
      check_size();
    }
    return it->second;
  }

  uint32_t helper_rule(uint32_t parent) {
    return g_.add_rule(fmt::format("{}-{}", g_.rule_names[parent], ++helpers_));
  }

  void parse_alternatives(uint32_t rule, int depth) {
    if (depth > 256) error("groups are nested too deeply");
    for (;;) {
      std::vector<GrammarElement> body;
      parse_sequence(rule, body, depth);
      g_.add_alternative(rule, body);
      check_size();
      skip_space();
      if (!consume("|")) return;
    }
  }

  void parse_sequence(uint32_t rule, std::vector<GrammarElement>& out, int depth) {
    for (;;) {
      skip_space();
      if (pos_ >= text_.size() || at_definition()) return;
      const char c = text_[pos_];
      if (c == '|' || c == ')') return;
      const size_t item_start = out.size();
      if (c == '"') {
        ++pos_;
        while (pos_ < text_.size() && text_[pos_] != '"') {
          const char32_t cp = parse_char();
          out.push_back(g_.chars({{cp, cp}}));
        }
        if (!consume("\"")) error("unterminated string literal");
      } else if (c == '[') {
        out.push_back(parse_class());
      } else if (c == '.') {
        ++pos_;
        out.push_back(g_.chars({{0, kMaxCodePoint}}));
      } else if (c == '(') {
        ++pos_;
        const uint32_t group = helper_rule(rule);
        parse_alternatives(group, depth + 1);
        skip_space();
        if (!consume(")")) error("expected )");
        out.push_back(Grammar::rule_ref(group));
      } else if (is_name_char(c)) {
        out.push_back(Grammar::rule_ref(rule_id(parse_name())));
      } else {
        error("unexpected character '{}'", c);
      }
      parse_repetition(rule, out, item_start);
    }
  }

  // A postfix operator applies to the item out[item_start..]; a literal of several characters is
  // first wrapped in a rule so the operator covers all of it.
  void parse_repetition(uint32_t rule, std::vector<GrammarElement>& out, size_t item_start) {
    if (pos_ >= text_.size()) return;
    const char c = text_[pos_];
    int min = 0, max = -1;  // -1: unbounded
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      ++pos_;
      min = 1;
    } else if (c == '?') {
      ++pos_;
      max = 1;
    } else if (c == '{') {
      ++pos_;
      min = parse_count();
      if (consume(",")) {
        skip_blank();
        if (pos_ < text_.size() && text_[pos_] != '}') max = parse_count();
      } else {
        max = min;
      }
      skip_blank();
      if (!consume("}")) error("expected }} to close the repetition");
      if (max >= 0 && max < min) error("repetition {{{},{}}} has max below min", min, max);
    } else {
      return;
    }
    if (out.size() == item_start) return;  // "" repeated is still ""
    GrammarElement item = out[item_start];
    if (out.size() - item_start > 1) {
      const uint32_t wrap = helper_rule(rule);
      g_.add_alternative(wrap, std::vector<GrammarElement>(
                                   out.begin() + static_cast<std::ptrdiff_t>(item_start), out.end()));
      item = Grammar::rule_ref(wrap);
    }
    out.resize(item_start);
    for (int i = 0; i < min; ++i) out.push_back(item);
    if (max < 0) {  // star: r ::= item r | ""
      const uint32_t star = helper_rule(rule);
      g_.add_alternative(star, {item, Grammar::rule_ref(star)});
      g_.add_alternative(star, {});
      out.push_back(Grammar::rule_ref(star));
    } else if (max > min) {  // nested optionals: o_k ::= item o_(k-1) | "", one per extra copy
      uint32_t inner = 0;
      for (int k = 0; k < max - min; ++k) {
        const uint32_t opt = helper_rule(rule);
        if (k == 0)
          g_.add_alternative(opt, {item});
        else
          g_.add_alternative(opt, {item, Grammar::rule_ref(inner)});
        g_.add_alternative(opt, {});
        inner = opt;
        check_size();
      }
      out.push_back(Grammar::rule_ref(inner));
    }
    check_size();
  }

  void skip_blank() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }

  int parse_count() {
    skip_blank();
    const size_t start = pos_;
    long value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      value = value * 10 + (text_[pos_++] - '0');
      if (value > options_.max_repeat) error("repetition count above the limit of {}", options_.max_repeat);
    }
    if (pos_ == start) error("expected a repetition count");
    skip_blank();
    return static_cast<int>(value);
  }

  char32_t parse_hex(int digits) {
    char32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= text_.size()) error("incomplete hex escape");
      const char c = text_[pos_++];
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) error("invalid hex digit '{}'", c);
      v = v * 16 + static_cast<char32_t>(d);
    }
    if (v > kMaxCodePoint) error("code point U+{:X} is out of range", static_cast<uint32_t>(v));
    return v;
  }

  // One character of a literal or class, escapes decoded.
  char32_t parse_char() {
    if (pos_ >= text_.size()) error("unexpected end of the grammar");
    if (text_[pos_] != '\\') return decode_utf8(text_, pos_);
    ++pos_;
    if (pos_ >= text_.size()) error("unexpected end after \\");
    const char c = text_[pos_++];
    switch (c) {
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case 'x':
        return parse_hex(2);
      case 'u':
        return parse_hex(4);
      case 'U':
        return parse_hex(8);
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
        return static_cast<char32_t>(c);
      default:
        error("unknown escape \\{}", c);
    }
  }

  GrammarElement parse_class() {
    ++pos_;  // [
    const bool negated = consume("^");
    std::vector<CodeRange> ranges;
    while (pos_ < text_.size() && text_[pos_] != ']') {
      const char32_t lo = parse_char();
      char32_t hi = lo;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char();
        if (hi < lo) error("character range is reversed");
      }
      ranges.push_back({lo, hi});
    }
    if (!consume("]")) error("unterminated character class");
    if (negated) ranges = complement(ranges);
    if (ranges.empty()) error("the character class matches nothing");
    return g_.chars(std::move(ranges));
  }

  static std::vector<CodeRange> complement(std::vector<CodeRange> in) {
    std::sort(in.begin(), in.end(), [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
    std::vector<CodeRange> out;
    char32_t next = 0;
    for (const CodeRange& r : in) {
      if (r.lo > next) out.push_back({next, r.lo - 1});
      next = std::max<char32_t>(next, r.hi + 1);
    }
    if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
    return out;
  }

  std::string_view text_;
  const GbnfOptions& options_;
  size_t pos_ = 0;
  Grammar g_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<bool> defined_;
  int helpers_ = 0;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, const GbnfOptions& options) {
  return Parser(text, options).run();
}

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace qwick
