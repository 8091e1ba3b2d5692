// Reading typed fields of a JSON request body, shared by every API's request parser (Chat
// Completions, Anthropic Messages, OpenAI Responses): each getter returns nullopt for an absent or
// null field and throws an ApiError 400 naming the field for a wrong type or an out-of-range value.
//
// Tested through the request parsers' tests (tests/server).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace qwick {

// Deeper JSON is refused before it is parsed: copying, rendering and freeing nested values
// recurse, so a body of a million '[' would overflow the stack.
constexpr int kMaxNesting = 100;

// The deepest nesting of arrays and objects in JSON text (strings skipped; no validation).
int nesting_depth(std::string_view text);

// The field's value, or nullptr when it is absent or null (null counts as absent).
const nlohmann::ordered_json* field(const nlohmann::ordered_json& object, const std::string& name);

// "an integer", "a string", ... for messages.
std::string type_name(const nlohmann::ordered_json& v);

// Throws "<param> must be <expected>, got <type>".
[[noreturn]] void wrong_type(const std::string& param, const char* expected, const nlohmann::ordered_json& v);

std::optional<double> get_number(const nlohmann::ordered_json& body, const std::string& name, double lo,
                                 double hi);
std::optional<int64_t> get_integer(const nlohmann::ordered_json& body, const std::string& name, int64_t lo,
                                   int64_t hi);
std::optional<bool> get_bool(const nlohmann::ordered_json& body, const std::string& name);
std::optional<std::string> get_string(const nlohmann::ordered_json& body, const std::string& name);

}  // namespace qwick
