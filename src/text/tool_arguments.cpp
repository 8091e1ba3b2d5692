#include "text/tool_arguments.h"

#include <algorithm>
#include <set>
#include <string>

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

void collect_types(const ojson& schema, std::set<std::string>& types) {
  if (!schema.is_object()) return;
  if (const auto t = schema.find("type"); t != schema.end()) {
    if (t->is_string()) types.insert(t->get<std::string>());
    if (t->is_array())
      for (const auto& name : *t)
        if (name.is_string()) types.insert(name.get<std::string>());
    return;
  }
  for (const char* key : {"anyOf", "oneOf"})
    if (const auto list = schema.find(key); list != schema.end() && list->is_array()) {
      for (const auto& member : *list) collect_types(member, types);
      return;
    }
  auto kind_of = [](const ojson& v) -> std::string {
    if (v.is_string()) return "string";
    if (v.is_boolean()) return "boolean";
    if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
    if (v.is_number()) return "number";
    if (v.is_null()) return "null";
    return v.is_array() ? "array" : "object";
  };
  if (const auto e = schema.find("enum"); e != schema.end() && e->is_array())
    for (const auto& v : *e) types.insert(kind_of(v));
  if (const auto c = schema.find("const"); c != schema.end()) types.insert(kind_of(*c));
}

std::string_view trim_ascii(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

const ojson* find_parameter_schema(const ojson& tools, std::string_view function,
                                   std::string_view parameter) {
  if (!tools.is_array()) return nullptr;
  for (const auto& tool : tools) {
    const ojson* f = tool.is_object() && tool.contains("function") ? &tool["function"] : &tool;
    if (!f->is_object() || !f->contains("name") || (*f)["name"] != function) continue;
    const auto params = f->find("parameters");
    if (params == f->end() || !params->is_object()) return nullptr;
    const auto props = params->find("properties");
    if (props == params->end() || !props->is_object()) return nullptr;
    const auto p = props->find(std::string(parameter));
    return p == props->end() ? nullptr : &*p;
  }
  return nullptr;
}

ojson convert_parameter(std::string_view text, const ojson* schema) {
  std::set<std::string> types;
  if (schema != nullptr) collect_types(*schema, types);
  const std::string_view value = trim_ascii(text);
  auto has = [&](const char* t) { return types.count(t) > 0; };
  if (value == "null" && (has("null") || (!types.empty() && !has("string")))) return nullptr;
  auto parsed = [&]() { return ojson::parse(value, nullptr, false); };
  if (has("integer") || has("number")) {
    const ojson v = parsed();
    if (v.is_number()) return v;
  }
  if (has("boolean")) {
    std::string lower(value);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    if (lower == "true" || lower == "false") return lower == "true";
  }
  if (has("object") || has("array")) {
    const ojson v = parsed();
    if ((v.is_object() && has("object")) || (v.is_array() && has("array"))) return v;
  }
  return std::string(text);
}

}  // namespace qwick
