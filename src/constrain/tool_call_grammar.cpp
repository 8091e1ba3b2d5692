#include "constrain/tool_call_grammar.h"

#include <fmt/format.h>

#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "constrain/gbnf_parser.h"
#include "core/error.h"
#include "text/tool_arguments.h"

namespace qwick {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kCallTag = "<tool_call>";
constexpr size_t kMaxNameLength = 256;  // the output parser's bound on function and parameter names

// Keywords that say nothing about a value's text.
const std::set<std::string, std::less<>> kAnnotations = {"description", "title",     "default",
                                                         "examples",    "$comment",  "deprecated",
                                                         "readOnly",    "writeOnly", "nullable"};

// Raw string text: any characters but no tag ("<" before "/" or "p", or ending the text); with
// lengths, no "<" at all, so that each character is one.
constexpr const char* kRawRules = R"(tool-text ::= ( [^<] | "<"+ [^/p<] )*
tool-char ::= [^<]
)";

// Text that never holds "<tool_call>": after each prefix of the tag, the next character either
// continues it (short of the whole tag), breaks it, or starts it again ("<"). The text may stop
// inside a prefix (tool-free-tail).
std::string free_text_rules() {
  const std::string_view tag = kCallTag;
  std::string out = "tool-free ::= ( [^<] | \"<\" tool-free-1 )* tool-free-tail?\n";
  out += "tool-free-tail ::= \"<\" tool-free-t1\n";
  for (size_t i = 1; i < tag.size(); ++i) {
    const std::string next = gbnf_literal(std::string(1, tag[i]));
    const bool last = i + 1 == tag.size();
    out += fmt::format("tool-free-{} ::= \"<\" tool-free-1 | [^<{}]", i, tag[i]);
    if (!last) out += fmt::format(" | {} tool-free-{}", next, i + 1);
    out += fmt::format("\ntool-free-t{} ::= \"<\" tool-free-t1 | \"\"", i);
    if (!last) out += fmt::format(" | {} tool-free-t{}", next, i + 1);
    out += "\n";
  }
  return out;
}

std::string checked_name(const json& value, const std::string& what) {
  if (!value.is_string() || value.get<std::string>().empty()) fail("{} must be a non-empty string", what);
  const std::string name = value.get<std::string>();
  if (name.size() > kMaxNameLength || name.find_first_of("<>\n") != std::string::npos)
    fail("{} \"{}\" cannot be written in a tool call (at most {} bytes, without <, > or newlines)", what,
         name, kMaxNameLength);
  return name;
}

class ToolGrammar {
 public:
  explicit ToolGrammar(const JsonSchemaOptions& options) : options_(options) {}

  // The rule for one function's name and parameters, after "<function=".
  std::string function(const json& f, size_t index) {
    const std::string name = checked_name(f.value("name", json()), "a function name");
    static const json kNoParameters = json::object();
    const json& params =
        f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"] : kNoParameters;
    try {
      return function_body(name, params, index);
    } catch (const UnsupportedSchema& e) {
      throw UnsupportedSchema(e.keyword(), fmt::format("tool \"{}\": {}", name, e.what()));
    }
  }

  std::string rules() const { return rules_; }

 private:
  std::string function_body(const std::string& name, const json& params, size_t index) {
    if (!params.is_object())
      refuse_keyword("parameters", "#", "a function's parameters must be a schema object");
    for (const auto& [key, value] : params.items()) {
      static const std::set<std::string, std::less<>> kObjectKeys = {
          "type", "properties", "required", "additionalProperties", "$defs", "definitions", "$schema", "$id"};
      if (!kObjectKeys.contains(key) && !kAnnotations.contains(key))
        refuse_keyword(key, "#", "a tool's parameters are an object of named parameters");
    }
    if (params.contains("type") && params["type"] != "object")
      refuse_keyword("type", "#", "a tool's parameters must be of type object");
    static const json kNone = json::object();
    const json& props = params.contains("properties") ? params["properties"] : kNone;
    if (!props.is_object()) refuse_keyword("properties", "#", "properties must be an object");
    std::set<std::string> required;
    if (params.contains("required")) {
      if (!params["required"].is_array()) refuse_keyword("required", "#", "required must be a list of names");
      for (const json& r : params["required"]) {
        if (!r.is_string()) refuse_keyword("required", "#", "required must be a list of names");
        if (!props.contains(r.get<std::string>()))
          refuse_keyword("required", "#",
                         fmt::format("\"{}\" is required but not described", r.get<std::string>()));
        required.insert(r.get<std::string>());
      }
    }
    // JSON values first, in one compiler run: the parameters share the schema's $defs.
    std::vector<std::string> values(props.size());
    std::vector<std::pair<std::string, const json*>> json_values;
    std::vector<size_t> json_index;
    size_t i = 0;
    for (const auto& [key, schema] : props.items()) {
      const std::string path = "#/properties/" + key;
      checked_name(json(key), "a parameter name");
      if (const auto raw = raw_value(resolve_local_ref(params, schema), path)) {
        values[i] = *raw;
      } else {
        json_values.emplace_back(path, &schema);
        json_index.push_back(i);
      }
      ++i;
    }
    const SchemaRules compiled = json_schema_rules(params, json_values, fmt::format("t{}", index), options_);
    rules_ += compiled.rules;
    for (size_t j = 0; j < json_index.size(); ++j) values[json_index[j]] = compiled.values[j];

    std::string body = gbnf_literal(name + ">\n");
    i = 0;
    for (const auto& [key, schema] : props.items()) {
      const std::string param =
          fmt::format("{} {} \"\\n</parameter>\\n\"", gbnf_literal("<parameter=" + key + ">\n"), values[i++]);
      body += required.contains(key) ? " " + param : " ( " + param + " )?";
    }
    const std::string rule = fmt::format("tool-f{}", index);
    rules_ += rule + " ::= " + body + "\n";
    return rule;
  }

  // A parameter read as a string: its raw-text rule. nullopt for one read as JSON. `s` is the
  // schema as the output parser sees it (a local $ref followed).
  std::optional<std::string> raw_value(const json& s, const std::string& path) {
    if (!s.is_object()) {
      if (s == true) return "tool-text";
      refuse_keyword("schema", path, "a parameter's schema must be an object");
    }
    const std::set<std::string> types = parameter_types(s);
    if (types.empty()) {
      for (const auto& [key, value] : s.items())
        if (!kAnnotations.contains(key))
          refuse_keyword(key, path,
                         "the schema declares no type (type, anyOf/oneOf types, enum or const), so the "
                         "parameter would be read as a string");
      return "tool-text";
    }
    if (!types.contains("string")) {
      // Read as JSON by the types the parser sees: every branch must show one.
      for (const char* key : {"anyOf", "oneOf"})
        if (!s.contains("type") && s.contains(key) && s[key].is_array())
          for (const json& branch : s[key])
            if (!branch.is_object() || parameter_types(branch).empty())
              refuse_keyword(key, path, "a branch without a type: the parameter could not be read back");
      return std::nullopt;
    }
    for (const std::string& t : types)
      if (t != "string" && t != "null")
        refuse_keyword("type", path,
                       fmt::format("a parameter that may be a string or a {}: its raw text could not be "
                                   "told apart",
                                   t));
    static const std::set<std::string, std::less<>> kStringKeys = {"type",      "enum",      "const",
                                                                   "minLength", "maxLength", "format"};
    for (const auto& [key, value] : s.items())
      if (!kStringKeys.contains(key) && !kAnnotations.contains(key))
        refuse_keyword(key, path,
                       "string parameters are written as raw text, which this keyword cannot constrain");
    const bool null = types.contains("null");
    if (s.contains("enum") || s.contains("const")) return literals(s, null, path);
    std::string text = "tool-text";
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    const std::optional<std::string> format = s.contains("format") && s["format"].is_string()
                                                  ? string_format_gbnf(s["format"].get<std::string>())
                                                  : std::nullopt;
    if (format) {
      if (lengths) refuse_keyword("format", path, "a length together with a format");
      text = "( " + *format + " )";
    } else if (lengths) {
      const int64_t min = s.value("minLength", int64_t{0}), max = s.value("maxLength", int64_t{-1});
      if (min < 0 || min > options_.max_repeat || max > options_.max_repeat || (max >= 0 && max < min))
        refuse_keyword(max >= 0 && max < min ? "maxLength" : "minLength", path,
                       fmt::format("lengths must be 0 to {}, minLength <= maxLength", options_.max_repeat));
      text = max < 0 ? fmt::format("tool-char{{{},}}", min) : fmt::format("tool-char{{{},{}}}", min, max);
    }
    return null ? "( " + text + " | \"null\" )" : text;
  }

  // enum / const of a string parameter: the allowed texts.
  static std::string literals(const json& s, bool null, const std::string& path) {
    std::vector<json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array()) refuse_keyword("enum", path, "enum must be a list");
      for (const json& v : s["enum"])
        if (!s.contains("const") || v == s["const"]) values.push_back(v);
    }
    std::set<std::string> alts;
    for (const json& v : values) {
      if (v.is_null() && null) alts.insert("\"null\"");
      if (!v.is_string()) continue;
      const std::string text = v.get<std::string>();
      if (text.find('<') != std::string::npos)
        refuse_keyword(s.contains("enum") ? "enum" : "const", path,
                       "a value with \"<\" in a raw string parameter");
      alts.insert(text.empty() ? "\"\"" : gbnf_literal(text));
    }
    if (alts.empty()) refuse_keyword(s.contains("enum") ? "enum" : "const", path, "no value fits the type");
    std::string out;
    for (const std::string& a : alts) out += (out.empty() ? "( " : " | ") + a;
    return out + " )";
  }

  const JsonSchemaOptions& options_;
  std::string rules_;
};

}  // namespace

std::string tool_call_gbnf(const ToolCallRule& rule, const JsonSchemaOptions& options) {
  if (!rule.tools.is_array() || rule.tools.empty()) fail("no tools are declared to call");
  ToolGrammar grammar(options);
  std::vector<std::string> functions;
  std::set<std::string> names;
  for (size_t i = 0; i < rule.tools.size(); ++i) {
    const json& tool = rule.tools[i];
    const json& f = tool.is_object() && tool.contains("function") ? tool["function"] : tool;
    if (!f.is_object()) fail("tools[{}] is not a function tool", i);
    const std::string name = checked_name(f.value("name", json()), "a function name");
    if (!names.insert(name).second) fail("two tools are named \"{}\"", name);
    if (!rule.name.empty() && name != rule.name) continue;
    functions.push_back(grammar.function(f, i));
  }
  if (functions.empty()) fail("no tool named \"{}\" was declared", rule.name);
  std::string alts;
  for (const std::string& f : functions) alts += (alts.empty() ? "" : " | ") + f;
  const std::string calls = rule.parallel ? "tool-call ( \"\\n\" tool-call )*" : "tool-call";
  std::string out =
      rule.text_first ? "root ::= tool-free ( " + calls + " )?\n" : "root ::= [ \\t\\n]{0,4} " + calls + "\n";
  out += "tool-call ::= \"<tool_call>\\n<function=\" ( " + alts + " ) \"</function>\\n</tool_call>\"\n";
  if (rule.text_first) out += free_text_rules();
  out += kRawRules;
  // JSON strings inside values hold no "<": no tag can appear in them.
  out += json_schema_primitives(options, "<");
  out += grammar.rules();
  return out;
}

}  // namespace qwick
