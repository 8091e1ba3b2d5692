#include "text/tool_arguments.h"

#include <algorithm>
#include <cmath>
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

// The declared function object named `name` in a tools list, or nullptr.
const ojson* find_function(const ojson& tools, std::string_view name) {
  if (!tools.is_array()) return nullptr;
  for (const auto& tool : tools) {
    const ojson* f = tool.is_object() && tool.contains("function") ? &tool["function"] : &tool;
    if (f->is_object() && f->contains("name") && (*f)["name"] == name) return f;
  }
  return nullptr;
}

// The "parameters" schema of a declared function, or nullptr.
const ojson* parameters_of(const ojson& function) {
  const auto params = function.find("parameters");
  return params == function.end() || !params->is_object() ? nullptr : &*params;
}

bool has_kind(const ojson& v, const std::string& type) {
  if (type == "string") return v.is_string();
  if (type == "integer")
    return v.is_number_integer() || v.is_number_unsigned() ||
           (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>());
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "array") return v.is_array();
  if (type == "object") return v.is_object();
  return true;  // a type name JSON Schema does not define: not ours to refuse
}

// `value` has one of the schema's types and, where it lists an enum, one of its values.
bool fits(const ojson& value, const ojson& schema) {
  std::set<std::string> types;
  collect_types(schema, types);
  if (!types.empty() &&
      std::none_of(types.begin(), types.end(), [&](const auto& t) { return has_kind(value, t); }))
    return false;
  if (const auto e = schema.find("enum"); e != schema.end() && e->is_array())
    return std::find(e->begin(), e->end(), value) != e->end();
  return true;
}

}  // namespace

const ojson& resolve_local_ref(const ojson& root, const ojson& schema) {
  const auto ref = schema.is_object() ? schema.find("$ref") : schema.end();
  if (ref == schema.end() || !ref->is_string()) return schema;
  const std::string& target = ref->get_ref<const std::string&>();
  if (!target.starts_with("#")) return schema;
  try {
    const ojson::json_pointer pointer(target.substr(1));
    return root.contains(pointer) ? root.at(pointer) : schema;
  } catch (const ojson::exception&) {  // not a JSON pointer
    return schema;
  }
}

const ojson* find_parameter_schema(const ojson& tools, std::string_view function,
                                   std::string_view parameter) {
  const ojson* f = find_function(tools, function);
  const ojson* params = f != nullptr ? parameters_of(*f) : nullptr;
  if (params == nullptr) return nullptr;
  const auto props = params->find("properties");
  if (props == params->end() || !props->is_object()) return nullptr;
  const auto p = props->find(std::string(parameter));
  return p == props->end() ? nullptr : &resolve_local_ref(*params, *p);
}

std::string tool_call_mismatch(const ojson& tools, std::string_view function, const ojson& arguments) {
  const ojson* f = find_function(tools, function);
  if (f == nullptr) return "no tool named \"" + std::string(function) + "\" was declared";
  const ojson* params = parameters_of(*f);
  if (params == nullptr) return {};
  const auto props = params->find("properties");
  const bool closed = params->value("additionalProperties", ojson(true)) == false;
  for (const auto& [key, value] : arguments.items()) {
    const bool described = props != params->end() && props->is_object() && props->contains(key);
    if (!described) {
      if (closed) return "argument \"" + key + "\" is not declared";
      continue;
    }
    if (!fits(value, resolve_local_ref(*params, (*props)[key])))
      return "argument \"" + key + "\" does not fit its schema";
  }
  if (const auto required = params->find("required"); required != params->end() && required->is_array())
    for (const auto& name : *required)
      if (name.is_string() && !arguments.contains(name.get<std::string>()))
        return "required argument " + name.dump() + " is missing";
  return {};
}

std::set<std::string> parameter_types(const ojson& schema) {
  std::set<std::string> types;
  collect_types(schema, types);
  return types;
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
