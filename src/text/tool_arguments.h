// Tool-call parameter values from model output, typed by the tool's JSON schema.
//
// Qwen writes each parameter as raw text (<parameter=k>\nVALUE\n</parameter>): strings unquoted,
// everything else as JSON. The value becomes JSON by the declared type: "string" stays the text,
// "integer"/"number" parse as a JSON number, "boolean" as true/false (any case), "object"/"array"
// as JSON of that kind, "null" (or the text null where the type allows no string) as null.
// Types come from "type" (a name or a list), else the members of anyOf/oneOf, else the kinds of an
// "enum"/"const". A value that does not parse as any declared type, and a parameter the schema
// does not describe, stay strings: text is never lost.
//
// Tested in tests/text/output_parser_test.cpp (a table of types and texts, calls that do not fit).
#pragma once

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <string_view>

namespace qwick {

// The schema of `parameter` of `function` in an OpenAI `tools` list; nullptr when not described.
const nlohmann::ordered_json* find_parameter_schema(const nlohmann::ordered_json& tools,
                                                    std::string_view function, std::string_view parameter);

nlohmann::ordered_json convert_parameter(std::string_view text, const nlohmann::ordered_json* schema);

// `schema`, or where it is a local reference ({"$ref": "#/..."}) the schema in `root` it points to
// (one level): tools generated from typed code refer to their $defs for nested types.
const nlohmann::ordered_json& resolve_local_ref(const nlohmann::ordered_json& root,
                                                const nlohmann::ordered_json& schema);

// The types convert_parameter() reads a value of `schema` as (as above: "type", else the members
// of anyOf/oneOf, else the kinds of enum/const values); empty when the schema names none.
std::set<std::string> parameter_types(const nlohmann::ordered_json& schema);

// Why a call of `function` with `arguments` (an object) does not fit the `tools` list: the
// function is not declared, an argument has a type (or enum value) its schema does not allow, a
// required argument is missing, or an undeclared one is given where additionalProperties is false.
// Empty when the call fits. Clients act on calls, so a call that does not fit is not one.
std::string tool_call_mismatch(const nlohmann::ordered_json& tools, std::string_view function,
                               const nlohmann::ordered_json& arguments);

}  // namespace qwick
