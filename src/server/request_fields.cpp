#include "server/request_fields.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "server/api_error.h"

namespace qwick {

using ojson = nlohmann::ordered_json;

int nesting_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

const ojson* field(const ojson& object, const std::string& name) {
  const auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::string type_name(const ojson& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

[[noreturn]] void wrong_type(const std::string& param, const char* expected, const ojson& v) {
  throw invalid_request(param + " must be " + expected + ", got " + type_name(v), param);
}

std::optional<double> get_number(const ojson& body, const std::string& name, double lo, double hi) {
  const ojson* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) wrong_type(name, "a number", *v);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw invalid_request(fmt::format("{} must be between {} and {}, got {}", name, lo, hi, v->dump()), name);
  return x;
}

std::optional<int64_t> get_integer(const ojson& body, const std::string& name, int64_t lo, int64_t hi) {
  const ojson* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_unsigned()) {  // (non-negative integers parse as unsigned)
    if (v->get<uint64_t>() > static_cast<uint64_t>(hi))
      throw invalid_request(fmt::format("{} must be between {} and {}, got {}", name, lo, hi, v->dump()),
                            name);
    x = static_cast<int64_t>(v->get<uint64_t>());
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::trunc(v->get<double>()) == v->get<double>() &&
             std::abs(v->get<double>()) < 9e15) {
    x = static_cast<int64_t>(v->get<double>());  // 5.0 from a client that has only doubles
  } else {
    wrong_type(name, "an integer", *v);
  }
  if (x < lo || x > hi)
    throw invalid_request(fmt::format("{} must be between {} and {}, got {}", name, lo, hi, v->dump()), name);
  return x;
}

std::optional<bool> get_bool(const ojson& body, const std::string& name) {
  const ojson* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) wrong_type(name, "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::string> get_string(const ojson& body, const std::string& name) {
  const ojson* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) wrong_type(name, "a string", *v);
  return v->get<std::string>();
}

}  // namespace qwick
