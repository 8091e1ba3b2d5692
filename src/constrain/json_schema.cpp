#include "constrain/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "constrain/gbnf_parser.h"
#include "constrain/grammar_matcher.h"
#include "constrain/number_grammar.h"
#include "constrain/regex_grammar.h"
#include "constrain/schema_merge.h"
#include "text/utf8.h"

namespace qwick {
namespace {

using json = nlohmann::ordered_json;

// The building blocks every schema grammar shares (json-char comes first: a caller may exclude
// characters from strings). Numbers have bounded digits and exponents (1e99 at most: JSON parsers
// read larger ones as infinity).
std::string json_char_rule(std::string_view excluded_chars) {
  return fmt::format(R"(json-char ::= [^"\\\x00-\x1F{}] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{{4}}))",
                     excluded_chars) +
         "\n";
}
constexpr const char* kPrimitives = R"(json-string ::= "\"" json-char* "\""
json-uint ::= "0" | [1-9] [0-9]{0,15}
json-int ::= "-"? json-uint
json-frac ::= "." [0-9]{1,16}
json-number ::= json-int json-frac? ([eE] [-+]? [0-9]{1,2})?
json-value ::= json-object | json-array | json-string | json-number | "true" | "false" | "null"
json-object ::= "{" ws ( json-string ws ":" ws json-value ws ( "," ws json-string ws ":" ws json-value ws )* )? "}"
json-array ::= "[" ws ( json-value ws ( "," ws json-value ws )* )? "]"
)";

// Validation keywords this compiler cannot enforce.
const std::set<std::string, std::less<>> kRefused = {
    "not",           "if",           "then",        "else",        "dependentRequired", "dependentSchemas",
    "dependencies",

    "propertyNames", "contains",     "minContains", "maxContains", "multipleOf",        "unevaluatedItems",
    "$dynamicRef",   "$recursiveRef"};

const std::map<std::string, std::string, std::less<>> kFormats = {
    {"date", R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ))"},
    {"time",
     R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))"},
    {"uuid", R"([0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12})"},
    {"email", R"([a-z0-9]{1,20} ( "." [a-z0-9]{1,20} )? "@" [a-z0-9]{1,20} "." [a-z]{2,6})"},
    {"ipv4", R"(json-octet "." json-octet "." json-octet "." json-octet)"},
    {"hostname", R"(json-label ( "." json-label ){0,4})"},
    {"uri", R"("http" "s"? "://" json-label ( "." json-label ){0,4} ( "/" [a-zA-Z0-9._~-]{0,20} ){0,5})"},
};
// The shortest and longest strings the grammars of kFormats (and date-time) write.
std::pair<int64_t, int64_t> format_lengths(std::string_view format) {
  static const std::map<std::string, std::pair<int64_t, int64_t>, std::less<>> kLengths = {
      {"date", {10, 10}}, {"time", {9, 21}}, {"date-time", {20, 32}}, {"uuid", {36, 36}},
      {"email", {6, 69}}, {"ipv4", {7, 15}}, {"hostname", {1, 114}},  {"uri", {8, 227}}};
  if (format == "uri-reference" || format == "url" || format == "iri") format = "uri";
  return kLengths.at(std::string(format));
}
constexpr const char* kFormatRules =
    R"(json-octet ::= "25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]
json-label ::= [a-z0-9] ( [a-z0-9-]{0,20} [a-z0-9] )?
)";

[[noreturn]] void refuse(const std::string& keyword, const std::string& path, const std::string& why) {
  refuse_keyword(keyword, path, why);
}

std::vector<std::string> type_list(const json& s, const std::string& path) {
  std::vector<std::string> out;
  const json& t = s["type"];
  if (t.is_string()) {
    out.push_back(t.get<std::string>());
  } else if (t.is_array()) {
    for (const json& x : t) {
      if (!x.is_string()) refuse("type", path, "type lists hold strings");
      out.push_back(x.get<std::string>());
    }
  } else {
    refuse("type", path, "type must be a string or a list of strings");
  }
  for (const std::string& x : out)
    if (x != "object" && x != "array" && x != "string" && x != "number" && x != "integer" && x != "boolean" &&
        x != "null")
      refuse("type", path, fmt::format("unknown type \"{}\"", x));
  return out;
}

// Whether `pattern` (a JSON Schema regular expression) matches `name`, with the grammar engine (no
// backtracking, so no pattern can make this slow). Throws Error for an unsupported pattern.
bool pattern_matches(const std::string& pattern, const std::string& name) {
  const std::string gbnf = fmt::format("root ::= {}\nws ::= \"\"\n{}{}", regex_to_gbnf(pattern, "json-char"),
                                       json_char_rule(""), kPrimitives);
  GrammarMatcher m(std::make_shared<const Grammar>(parse_gbnf(gbnf)));
  const std::string escaped = json(name).dump();
  return m.accept(std::string_view(escaped).substr(1, escaped.size() - 2)) && m.accepting(m.current());
}

bool value_has_type(const json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  return v.is_number();
}

class Compiler {
 public:
  Compiler(const json& root, const JsonSchemaOptions& options, std::string prefix = "s")
      : root_(root), options_(options), prefix_(std::move(prefix)) {}

  // The rule (or expression) for the JSON text of `s`, a subschema of the root at `path`.
  std::string value(const json& s, const std::string& path) { return visit(s, path, 0); }

  // The definitions of the rules value() made.
  std::string rules() const {
    std::string out;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  std::string rule(const std::string& hint, const std::string& body) {
    const std::string name = fresh_name(hint);
    rules_.emplace_back(name, body);
    return name;
  }

  std::string fresh_name(const std::string& hint) {
    if (++rule_count_ > options_.max_rules)
      refuse("$ref", "#", fmt::format("the schema needs more than {} grammar rules", options_.max_rules));
    std::string base = prefix_;
    for (char c : hint) {
      if (base.size() > 40) break;
      base += (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ? c : '-';
    }
    return fmt::format("{}-{}", base, rule_count_);
  }

  std::string visit(const json& s, const std::string& path, int depth) {
    if (depth > options_.max_depth)
      refuse("$ref", path, fmt::format("subschemas nest deeper than {}", options_.max_depth));
    if (s.is_boolean()) {
      if (s.get<bool>()) return "json-value";
      refuse("false", path, "the false schema matches nothing");
    }
    if (!s.is_object()) refuse("schema", path, "a schema must be an object or a boolean");
    for (const auto& [key, value] : s.items()) {
      if (kRefused.contains(key))
        refuse(key, path, "this validation keyword cannot be enforced while generating");
      if (key == "uniqueItems" && value == true && s.value("minItems", json(0)).is_number() &&
          s.value("minItems", json(0)).get<double>() > 1)
        refuse(key, path, "uniqueness of more than one array item cannot be enforced while generating");
    }
    if (s.contains("$ref")) {
      if (!has_validation_siblings(s)) return ref_rule(s["$ref"], path, depth);
      return visit(resolve_top(s, root_, path), path, depth + 1);
    }
    if (s.contains("allOf")) return visit(merge_all_of(s, root_, path), path, depth + 1);
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      if (s.contains("anyOf") && s.contains("oneOf")) refuse("oneOf", path, "anyOf and oneOf in one schema");
      const json& branches = s[key];
      if (!branches.is_array() || branches.empty()) refuse(key, path, "must be a non-empty list of schemas");
      json siblings = s;
      siblings.erase(key);
      std::vector<json> merged;
      for (size_t i = 0; i < branches.size(); ++i) {
        const std::string branch_path = fmt::format("{}/{}/{}", path, key, i);
        merged.push_back(merge_schemas(siblings, resolve_top(branches[i], root_, branch_path), branch_path));
      }
      if (std::string_view(key) == "oneOf")
        for (size_t i = 0; i < merged.size(); ++i)
          for (size_t j = i + 1; j < merged.size(); ++j)
            if (!exclusive_schemas(merged[i], merged[j]) && !written_objects_exclusive(merged[i], merged[j]))
              refuse("oneOf", path,
                     fmt::format("branches {} and {} may both match (exactly one must)", i, j));
      std::vector<std::string> alts;
      for (size_t i = 0; i < branches.size(); ++i) {
        const std::string branch_path = fmt::format("{}/{}/{}", path, key, i);
        alts.push_back(visit(merged[i], branch_path, depth + 1));
      }
      return rule(path, join(alts));
    }
    return typed(s, path, depth);
  }

  static std::string join(const std::vector<std::string>& alts) {
    std::string out;
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out;
  }

  static std::u32string to_u32(const std::string& utf8) {
    std::u32string out;
    for (size_t i = 0; i < utf8.size();) out += decode_utf8(utf8, i);
    return out;
  }
  static std::string to_utf8(std::u32string_view text) {
    std::string out;
    for (char32_t c : text) append_utf8(out, c);
    return out;
  }

  // Sorted, distinct texts[begin, end) that share their first `at` characters, as a tree of
  // alternatives on common prefixes: one parse per enum, however many values (a flat list of
  // literals would start one parse per value).
  std::string literal_tree(const std::vector<std::u32string>& texts, size_t begin, size_t end, size_t at,
                           const std::string& path) {
    size_t common = at;
    for (;; ++common) {
      if (texts[begin].size() == common) break;
      const char32_t c = texts[begin][common];
      if (!std::all_of(texts.begin() + static_cast<std::ptrdiff_t>(begin) + 1,
                       texts.begin() + static_cast<std::ptrdiff_t>(end),
                       [&](const std::u32string& t) { return t.size() > common && t[common] == c; }))
        break;
    }
    const std::string prefix =
        common > at ? gbnf_literal(to_utf8(std::u32string_view(texts[begin]).substr(at, common - at))) : "";
    if (end - begin == 1) return prefix.empty() ? "\"\"" : prefix;
    std::vector<std::string> alts;
    size_t i = begin;
    if (texts[i].size() == common) {  // the shortest ends here (sorted first)
      alts.push_back("\"\"");
      ++i;
    }
    while (i < end) {
      size_t j = i + 1;
      while (j < end && texts[j][common] == texts[i][common]) ++j;
      alts.push_back(literal_tree(texts, i, j, common, path));
      i = j;
    }
    return prefix + " " + rule(path + "-enum", join(alts));
  }

  std::string ref_rule(const json& ref, const std::string& path, int depth) {
    if (!ref.is_string()) refuse("$ref", path, "$ref must be a string");
    const std::string target = ref.get<std::string>();
    if (const auto it = refs_.find(target); it != refs_.end()) return it->second;
    const json& resolved = resolve_pointer(root_, target, path);
    const std::string name = fresh_name("ref" + target);
    refs_.emplace(target, name);
    const std::string body = visit(resolved, target, depth + 1);
    rules_.emplace_back(name, body);
    return name;
  }

  std::vector<std::string> types_of(const json& s, const std::string& path) {
    if (s.contains("type")) return type_list(s, path);
    // No type: the keywords present say which types they constrain; none at all is any value.
    std::vector<std::string> out;
    auto any = [&](std::initializer_list<const char*> keys) {
      return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
    };
    if (any({"properties", "required", "additionalProperties", "minProperties", "maxProperties",
             "patternProperties"}))
      out.push_back("object");
    if (any({"items", "prefixItems", "minItems", "maxItems", "additionalItems"})) out.push_back("array");
    if (any({"pattern", "format", "minLength", "maxLength"})) out.push_back("string");
    if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) out.push_back("number");
    return out;
  }

  std::string typed(const json& s, const std::string& path, int depth) {
    std::vector<std::string> types = types_of(s, path);
    if (s.contains("const") || s.contains("enum")) {
      std::vector<json> values;
      if (s.contains("const")) values.push_back(s["const"]);
      if (s.contains("enum")) {
        if (!s["enum"].is_array()) refuse("enum", path, "enum must be a list");
        for (const json& v : s["enum"])
          if (!s.contains("const") || v == s["const"]) values.push_back(v);
      }
      std::vector<std::u32string> texts;
      for (const json& v : values)
        if (types.empty() || std::any_of(types.begin(), types.end(),
                                         [&](const std::string& t) { return value_has_type(v, t); }))
          texts.push_back(to_u32(v.dump()));
      if (texts.empty())
        refuse(s.contains("enum") ? "enum" : "const", path, "no value is allowed by the other keywords");
      std::sort(texts.begin(), texts.end());
      texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
      return literal_tree(texts, 0, texts.size(), 0, path);
    }
    if (types.empty()) return "json-value";
    std::vector<std::string> alts;
    for (const std::string& t : types) {
      if (t == "object") alts.push_back(object(s, path, depth));
      if (t == "array") alts.push_back(array(s, path, depth));
      if (t == "string") alts.push_back(string(s, path));
      if (t == "number" || t == "integer") alts.push_back(number_grammar(s, t == "integer", path));
      if (t == "boolean") alts.push_back("(\"true\" | \"false\")");
      if (t == "null") alts.push_back("\"null\"");
    }
    return alts.size() == 1 ? alts[0] : rule(path, join(alts));
  }

  std::string object(const json& s, const std::string& path, int depth) {
    const json empty = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) refuse("properties", path, "properties must be an object");
    json additional = s.contains("additionalProperties")    ? s["additionalProperties"]
                      : s.contains("unevaluatedProperties") ? s["unevaluatedProperties"]
                                                            : json(true);
    std::vector<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) refuse("required", path, "required must be a list of names");
      for (const json& r : s["required"]) {
        if (!r.is_string()) refuse("required", path, "required must be a list of names");
        if (std::find(required.begin(), required.end(), r.get<std::string>()) == required.end())
          required.push_back(r);
      }
    }
    struct Prop {
      std::string name;
      const json* schema;
      bool required;
    };
    std::vector<Prop> declared;
    for (const auto& [name, sub] : props.items())
      declared.push_back({name, &sub, std::find(required.begin(), required.end(), name) != required.end()});
    for (const std::string& r : required) {
      if (props.contains(r)) continue;
      if (additional == false)
        refuse("required", path, fmt::format("\"{}\" is required but no property may be added", r));
      declared.push_back({r, &additional, true});
    }
    // patternProperties: no property is added beside the declared ones, so it matters only for
    // declared names its patterns match (refused), or where extra properties may be written: there
    // the names written match the one pattern (so its schema alone applies to their values), or,
    // with several patterns (a name may match more than one), none are written.
    std::string extra_name = "json-string";
    std::optional<std::string> extra_value;
    if (s.contains("patternProperties")) {
      const json& patterns = s["patternProperties"];
      if (!patterns.is_object()) refuse("patternProperties", path, "must be an object");
      if (declared.empty() && additional != false && !patterns.empty()) {
        if (patterns.size() > 1) {
          additional = false;
        } else {
          const auto only = patterns.begin();
          try {
            extra_name = "\"\\\"\" " + regex_to_gbnf(only.key(), "json-char") + " \"\\\"\"";
          } catch (const Error& e) {
            refuse("patternProperties", path, e.what());
          }
          extra_value = visit(only.value(), path + "/patternProperties", depth + 1);
        }
      }
      for (const auto& [pattern, sub] : patterns.items())
        for (const Prop& prop : declared) {
          bool match = true;
          try {
            match = pattern_matches(pattern, prop.name);
          } catch (const Error& e) {
            refuse("patternProperties", path, e.what());
          }
          if (match)
            refuse("patternProperties", path,
                   fmt::format("its pattern \"{}\" applies to the declared property \"{}\"", pattern,
                               prop.name));
        }
    }
    const int64_t min_props = s.value("minProperties", int64_t{0});
    const int64_t max_props = s.value("maxProperties", int64_t{-1});
    const std::string kv_sep = " ws \":\" ws ";
    if (declared.empty()) {
      if (additional == false) {
        if (min_props > 0) refuse("minProperties", path, "no property may be added");
        return "(\"{\" ws \"}\")";
      }
      const std::string value = extra_value ? *extra_value
                                : additional.is_object()
                                    ? visit(additional, path + "/additionalProperties", depth + 1)
                                    : "json-value";
      const std::string kv = rule(path + "-kv", extra_name + kv_sep + value + " ws");
      if (max_props == 0) return "(\"{\" ws \"}\")";
      const std::string more =
          max_props < 0 ? fmt::format("{{{},}}", std::max<int64_t>(0, min_props - 1))
                        : fmt::format("{{{},{}}}", std::max<int64_t>(0, min_props - 1), max_props - 1);
      const std::string body = fmt::format("{} ( \",\" ws {} ){}", kv, kv, more);
      return rule(path, "\"{\" ws " + (min_props > 0 ? "(" + body + ")" : "(" + body + ")?") + " \"}\"");
    }
    const auto n_required =
        std::count_if(declared.begin(), declared.end(), [](const Prop& p) { return p.required; });
    if (min_props > n_required) refuse("minProperties", path, "more properties than the required ones");
    if (max_props >= 0 && static_cast<int64_t>(declared.size()) > max_props)
      refuse("maxProperties", path, "fewer properties than the declared ones");
    // first_i: properties i.. with none written yet; rest_i: properties i.. after one was written.
    std::vector<std::string> kv(declared.size());
    for (size_t i = 0; i < declared.size(); ++i) {
      const std::string value =
          visit(*declared[i].schema, path + "/properties/" + declared[i].name, depth + 1);
      kv[i] = gbnf_literal(json(declared[i].name).dump()) + kv_sep + value + " ws";
    }
    const size_t n = declared.size();
    std::vector<std::string> rest(n + 1), first(n + 1);
    rest[n] = "\"\"";
    first[n] = "\"\"";
    for (size_t i = n; i-- > 0;) {
      const std::string after = rest[i + 1];
      rest[i] = rule(path + "-rest", declared[i].required ? "\",\" ws " + kv[i] + " " + after
                                                          : "( \",\" ws " + kv[i] + " )? " + after);
      first[i] = rule(path + "-first", declared[i].required ? kv[i] + " " + after
                                                            : kv[i] + " " + after + " | " + first[i + 1]);
    }
    return rule(path, "\"{\" ws " + first[0] + " \"}\"");
  }

  std::string array(const json& s, const std::string& path, int depth) {
    std::vector<const json*> prefix;
    const json* tail = nullptr;  // nullptr: no items after the prefix
    static const json kAny = true;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) refuse("prefixItems", path, "must be a list of schemas");
      for (const json& x : s["prefixItems"]) prefix.push_back(&x);
      tail = s.contains("items") ? &s["items"] : &kAny;
    } else if (s.contains("items") && s["items"].is_array()) {
      for (const json& x : s["items"]) prefix.push_back(&x);
      tail = s.contains("additionalItems") ? &s["additionalItems"] : &kAny;
    } else {
      tail = s.contains("items") ? &s["items"] : &kAny;
    }
    if (tail && *tail == false) tail = nullptr;
    const int64_t min = s.value("minItems", int64_t{0});
    int64_t max = s.value("maxItems", int64_t{-1});
    // uniqueItems: arrays of at most one item are unique (more would need the items compared).
    if (s.value("uniqueItems", false) == true) max = max < 0 ? 1 : std::min<int64_t>(max, 1);
    if (min > options_.max_repeat || max > options_.max_repeat)
      refuse(min > options_.max_repeat ? "minItems" : "maxItems", path, "too many items");
    if (max >= 0 && static_cast<int64_t>(prefix.size()) > max) prefix.resize(static_cast<size_t>(max));
    const auto k = static_cast<int64_t>(prefix.size());
    // After a tuple, more items are written only when minItems asks for them.
    if (k > 0 && tail == &kAny && min <= k) tail = nullptr;
    if (!tail) max = max < 0 ? k : std::min(max, k);
    if (max >= 0 && min > max) refuse("minItems", path, "more items than the schema allows");
    if (max == 0) return "(\"[\" ws \"]\")";
    std::vector<std::string> items;
    for (int64_t i = 0; i < k; ++i)
      items.push_back(visit(*prefix[static_cast<size_t>(i)], fmt::format("{}/items/{}", path, i), depth + 1));
    const std::string t = tail ? visit(*tail, path + "/items", depth + 1) : "";
    // The items after the first `i` ones, nested right to left.
    std::string after;
    if (tail && (max < 0 || max > k)) {
      const int64_t lo = std::max<int64_t>(0, min - std::max<int64_t>(k, 1));
      const int64_t hi = max < 0 ? -1 : max - std::max<int64_t>(k, 1);
      after = hi < 0   ? fmt::format("( \",\" ws {} ws ){{{},}}", t, lo)
              : hi > 0 ? fmt::format("( \",\" ws {} ws ){{{},{}}}", t, lo, hi)
                       : "";
    }
    for (int64_t i = k - 1; i >= 1; --i) {
      const std::string step = "\",\" ws " + items[static_cast<size_t>(i)] + " ws " + after;
      after = i < min ? step : "( " + step + " )?";
    }
    const std::string first = (k > 0 ? items[0] : t) + " ws " + after;
    return rule(path, "\"[\" ws " + (min > 0 ? "( " + first + " )" : "( " + first + " )?") + " \"]\"");
  }

  std::string string(const json& s, const std::string& path) {
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) refuse("pattern", path, "pattern must be a string");
      if (s.contains("format") && kFormats.contains(s["format"].get<std::string>()))
        refuse("format", path, "a format together with a pattern");
      const std::string pattern = s["pattern"].get<std::string>();
      std::string body;
      RegexLength length;
      try {
        body = regex_to_gbnf(pattern, "json-char", 1000, &length);
      } catch (const Error& e) {
        refuse("pattern", path, e.what());
      }
      // A length beside a pattern is kept only where every string written satisfies it: a
      // maxLength bounds the pattern's repetitions at the largest count whose matches all fit.
      const int64_t min = s.value("minLength", int64_t{0}), max = s.value("maxLength", int64_t{-1});
      if (length.min < min) refuse("minLength", path, "the pattern also matches shorter strings");
      if (max >= 0 && (length.max < 0 || length.max > max)) {
        std::optional<std::string> bounded;
        for (int64_t lo = 0, hi = std::min<int64_t>(max, options_.max_repeat); lo <= hi;) {
          const int64_t cap = lo + (hi - lo) / 2;
          RegexLength capped;
          std::string text = regex_to_gbnf(pattern, "json-char", 1000, &capped, cap);
          if (capped.max >= 0 && capped.max <= max) {
            bounded = std::move(text);
            lo = cap + 1;
          } else {
            hi = cap - 1;
          }
        }
        if (!bounded) refuse("maxLength", path, "the pattern's shortest matches are longer");
        body = std::move(*bounded);
      }
      return rule(path, "\"\\\"\" " + body + " \"\\\"\"");
    }
    if (s.contains("format")) {
      if (!s["format"].is_string()) refuse("format", path, "format must be a string");
      if (const auto format = string_format_gbnf(s["format"].get<std::string>())) {
        // A length beside a format is kept where every string of the format's grammar has it.
        const auto [shortest, longest] = format_lengths(s["format"].get<std::string>());
        if (shortest < s.value("minLength", int64_t{0}))
          refuse("minLength", path, "the format also matches shorter strings");
        if (s.contains("maxLength") && longest > s.value("maxLength", int64_t{-1}))
          refuse("maxLength", path, fmt::format("the format writes up to {} characters", longest));
        return rule(path, "\"\\\"\" " + *format + " \"\\\"\"");
      }
    }
    if (!lengths) return "json-string";
    const int64_t min = s.value("minLength", int64_t{0});
    const int64_t max = s.value("maxLength", int64_t{-1});
    if (min < 0 || min > options_.max_repeat)
      refuse("minLength", path, fmt::format("minLength must be 0 to {}", options_.max_repeat));
    if (max > options_.max_repeat)
      refuse("maxLength", path, fmt::format("maxLength above {}", options_.max_repeat));
    if (max >= 0 && max < min) refuse("maxLength", path, "maxLength below minLength");
    const std::string count = max < 0 ? fmt::format("{{{},}}", min) : fmt::format("{{{},{}}}", min, max);
    return rule(path, "\"\\\"\" json-char" + count + " \"\\\"\"");
  }

  std::string number_grammar(const json& s, bool integer, const std::string& path) {
    const std::optional<std::string> bounded = bounded_number(s, integer, path);
    if (bounded) return rule(path, *bounded);
    return integer ? "json-int" : "json-number";
  }

  const json& root_;
  const JsonSchemaOptions& options_;
  std::string prefix_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> refs_;
  size_t rule_count_ = 0;
};

}  // namespace

void refuse_keyword(const std::string& keyword, const std::string& path, const std::string& why) {
  throw UnsupportedSchema(
      keyword, fmt::format("JSON Schema keyword '{}' is not supported (at {}): {}", keyword, path, why));
}

std::optional<std::string> string_format_gbnf(std::string_view format) {
  if (format == "date-time") return kFormats.at("date") + " \"T\" " + kFormats.at("time");
  if (format == "uri-reference" || format == "url" || format == "iri") format = "uri";
  if (const auto it = kFormats.find(format); it != kFormats.end()) return it->second;
  return std::nullopt;
}

std::string json_schema_primitives(const JsonSchemaOptions& options, std::string_view excluded_chars) {
  std::string out = fmt::format("ws ::= [ \\t\\n]{{0,{}}}\n", options.max_whitespace);
  out += json_char_rule(excluded_chars);
  out += kPrimitives;
  out += kFormatRules;
  return out;
}

SchemaRules json_schema_rules(
    const nlohmann::ordered_json& root,
    const std::vector<std::pair<std::string, const nlohmann::ordered_json*>>& schemas,
    const std::string& prefix, const JsonSchemaOptions& options) {
  Compiler compiler(root, options, prefix);
  SchemaRules out;
  for (const auto& [path, schema] : schemas) out.values.push_back(compiler.value(*schema, path));
  out.rules = compiler.rules();
  return out;
}

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options) {
  Compiler compiler(schema, options);
  const std::string value = compiler.value(schema, "#");
  return "root ::= ws " + value + " ws\n" + json_schema_primitives(options) + compiler.rules();
}

std::string json_object_gbnf(const JsonSchemaOptions& options) {
  return json_schema_to_gbnf(nlohmann::ordered_json{{"type", "object"}}, options);
}

}  // namespace qwick
