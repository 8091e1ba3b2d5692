#include "constrain/schema_merge.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <set>
#include <vector>

#include "constrain/json_schema.h"

namespace qwick {
namespace {

using json = nlohmann::ordered_json;

// Keywords that describe rather than constrain; the first schema's win in a merge.
const std::set<std::string, std::less<>> kAnnotations = {
    "title",   "description",      "default",        "examples",    "example",  "$comment",  "$id",
    "id",      "$schema",          "$defs",          "definitions", "readOnly", "writeOnly", "deprecated",
    "$anchor", "contentMediaType", "contentEncoding"};

std::string unescape_pointer(const std::string& token) {
  std::string out;
  for (size_t i = 0; i < token.size(); ++i) {
    if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
      out += token[i + 1] == '0' ? '~' : '/';
      ++i;
    } else if (token[i] == '%' && i + 2 < token.size() &&
               std::isxdigit(static_cast<unsigned char>(token[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(token[i + 2]))) {
      out += static_cast<char>(std::stoi(token.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += token[i];
    }
  }
  return out;
}

json types_of(const json& t) {
  return t.is_array() ? t : json::array({t});
}

// The JSON types a schema's values may have ("integer" counted as "number").
std::set<std::string> value_types(const json& s) {
  const std::set<std::string> all = {"object", "array", "string", "number", "boolean", "null"};
  if (!s.is_object()) return all;
  auto type_of = [](const json& v) -> std::string {
    if (v.is_object()) return "object";
    if (v.is_array()) return "array";
    if (v.is_string()) return "string";
    if (v.is_number()) return "number";
    if (v.is_boolean()) return "boolean";
    return "null";
  };
  std::set<std::string> out;
  if (s.contains("const")) return {type_of(s["const"])};
  if (s.contains("enum") && s["enum"].is_array()) {
    for (const json& v : s["enum"]) out.insert(type_of(v));
    return out;
  }
  if (!s.contains("type")) return all;
  for (const json& t : types_of(s["type"]))
    if (t.is_string()) out.insert(t == "integer" ? std::string("number") : t.get<std::string>());
  return out;
}

// The values a property schema allows when it lists them (const / enum), else empty.
std::vector<json> listed_values(const json& s) {
  if (!s.is_object()) return {};
  if (s.contains("const")) return {s["const"]};
  if (s.contains("enum") && s["enum"].is_array()) return {s["enum"].begin(), s["enum"].end()};
  return {};
}

bool is_required(const json& s, const std::string& name) {
  if (!s.is_object() || !s.contains("required") || !s["required"].is_array()) return false;
  return std::find(s["required"].begin(), s["required"].end(), name) != s["required"].end();
}

}  // namespace

bool exclusive_schemas(const json& a, const json& b) {
  const std::set<std::string> ta = value_types(a), tb = value_types(b);
  std::vector<std::string> common;
  std::set_intersection(ta.begin(), ta.end(), tb.begin(), tb.end(), std::back_inserter(common));
  if (common.empty()) return true;
  if (common != std::vector<std::string>{"object"}) return false;
  if (!a.contains("properties") || !b.contains("properties") || !a["properties"].is_object() ||
      !b["properties"].is_object())
    return false;
  for (const auto& [name, pa] : a["properties"].items()) {
    if (!b["properties"].contains(name) || !is_required(a, name) || !is_required(b, name)) continue;
    const std::vector<json> va = listed_values(pa), vb = listed_values(b["properties"][name]);
    if (va.empty() || vb.empty()) continue;
    if (std::none_of(va.begin(), va.end(),
                     [&](const json& v) { return std::find(vb.begin(), vb.end(), v) != vb.end(); }))
      return true;
  }
  return false;
}

namespace {

std::set<std::string> required_names(const json& s) {
  std::set<std::string> out;
  if (s.contains("required") && s["required"].is_array())
    for (const json& r : s["required"])
      if (r.is_string()) out.insert(r.get<std::string>());
  return out;
}

// Whether every object the compiler writes for `a` fails `b`.
bool written_fail(const json& a, const json& b) {
  if (value_types(a) != std::set<std::string>{"object"} || value_types(b) != std::set<std::string>{"object"})
    return false;
  std::set<std::string> keys = required_names(a);
  if (a.contains("properties") && a["properties"].is_object())
    for (const auto& [name, sub] : a["properties"].items()) keys.insert(name);
  if (keys.empty()) return false;  // written with any properties
  for (const std::string& r : required_names(b))
    if (!keys.contains(r)) return true;
  if (b.value("additionalProperties", json(true)) == false && !b.contains("patternProperties"))
    for (const std::string& r : required_names(a))
      if (!b.contains("properties") || !b["properties"].is_object() || !b["properties"].contains(r))
        return true;
  return false;
}

}  // namespace

bool written_objects_exclusive(const json& a, const json& b) {
  return written_fail(a, b) && written_fail(b, a);
}

const json& resolve_pointer(const json& root, const std::string& ref, const std::string& path) {
  if (ref.empty() || ref[0] != '#')
    refuse_keyword(
        "$ref", path,
        fmt::format("only references inside the schema (\"#...\") are supported, got \"{}\"", ref));
  const json* at = &root;
  size_t pos = 1;
  if (ref.size() > 1 && ref[1] != '/')
    refuse_keyword("$ref", path, fmt::format("anchors are not supported, got \"{}\"", ref));
  while (pos < ref.size()) {
    const size_t next = ref.find('/', pos + 1);
    const std::string token =
        unescape_pointer(ref.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1));
    if (at->is_object() && at->contains(token)) {
      at = &(*at)[token];
    } else if (at->is_array() && !token.empty() && std::all_of(token.begin(), token.end(), ::isdigit) &&
               std::stoul(token) < at->size()) {
      at = &(*at)[std::stoul(token)];
    } else {
      refuse_keyword("$ref", path, fmt::format("\"{}\" does not resolve", ref));
    }
    pos = next == std::string::npos ? ref.size() : next;
  }
  return *at;
}

bool has_validation_siblings(const json& s) {
  for (const auto& [key, value] : s.items())
    if (key != "$ref" && !kAnnotations.contains(key)) return true;
  return false;
}

json resolve_top(const json& s, const json& root, const std::string& path) {
  json out = s;
  for (int hops = 0; out.is_object() && out.contains("$ref"); ++hops) {
    if (hops >= 32) refuse_keyword("$ref", path, "references loop or chain too deep");
    if (!out["$ref"].is_string()) refuse_keyword("$ref", path, "$ref must be a string");
    const json target = resolve_pointer(root, out["$ref"].get<std::string>(), path);
    out.erase("$ref");
    out = merge_schemas(target, out, path);
  }
  return out;
}

json merge_all_of(const json& s, const json& root, const std::string& path) {
  json out = s;
  for (int rounds = 0; out.is_object() && out.contains("allOf"); ++rounds) {
    if (rounds >= 32) refuse_keyword("allOf", path, "allOf nested too deeply");
    const json parts = out["allOf"];
    out.erase("allOf");
    if (!parts.is_array() || parts.empty())
      refuse_keyword("allOf", path, "must be a non-empty list of schemas");
    for (size_t i = 0; i < parts.size(); ++i)
      out = merge_schemas(out, resolve_top(parts[i], root, fmt::format("{}/allOf/{}", path, i)), path);
  }
  return out;
}

json merge_schemas(const json& a, const json& b, const std::string& path) {
  if (a.is_boolean() || b.is_boolean()) {
    if (a == false || b == false) refuse_keyword("allOf", path, "a part is the false schema");
    return a.is_boolean() ? b : a;
  }
  if (!a.is_object() || !b.is_object()) refuse_keyword("allOf", path, "schemas must be objects or booleans");
  json out = a;
  for (const auto& [key, value] : b.items()) {
    if (!out.contains(key)) {
      out[key] = value;
      continue;
    }
    json& mine = out[key];
    if (mine == value || kAnnotations.contains(key)) continue;
    if (key == "properties" && mine.is_object() && value.is_object()) {
      for (const auto& [name, sub] : value.items())
        mine[name] = mine.contains(name) && mine[name] != sub ? json{{"allOf", {mine[name], sub}}} : sub;
    } else if (key == "required" && mine.is_array() && value.is_array()) {
      for (const json& r : value)
        if (std::find(mine.begin(), mine.end(), r) == mine.end()) mine.push_back(r);
    } else if (key == "type") {
      json both = json::array();
      for (const json& x : types_of(mine))
        for (const json& y : types_of(value)) {
          if (x == y)
            both.push_back(x);
          else if ((x == "integer" && y == "number") || (x == "number" && y == "integer"))
            both.push_back("integer");
        }
      if (both.empty()) refuse_keyword("allOf", path, "the parts allow no common type");
      mine = both.size() == 1 ? both[0] : both;
    } else if ((key == "minimum" || key == "minLength" || key == "minItems" || key == "minProperties") &&
               mine.is_number() && value.is_number()) {
      mine = std::max(mine.get<double>(), value.get<double>()) == mine.get<double>() ? mine : value;
    } else if ((key == "maximum" || key == "maxLength" || key == "maxItems" || key == "maxProperties") &&
               mine.is_number() && value.is_number()) {
      mine = std::min(mine.get<double>(), value.get<double>()) == mine.get<double>() ? mine : value;
    } else if (key == "allOf" && mine.is_array() && value.is_array()) {
      for (const json& x : value) mine.push_back(x);
    } else if (key == "additionalProperties" || key == "items") {
      mine = json{{"allOf", {mine, value}}};
    } else {
      refuse_keyword("allOf", path, fmt::format("the parts disagree on '{}'", key));
    }
  }
  return out;
}

}  // namespace qwick
