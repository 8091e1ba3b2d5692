// Combining JSON subschemas into one: allOf, $ref beside other keywords, and the keywords beside
// anyOf / oneOf (which apply to every branch). The merged schema accepts only what all of its
// parts accept; where that cannot be written as one schema the keyword is refused.
//
// Tested in tests/constrain/json_schema_test.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace qwick {

// The subschema a "#..." reference (a JSON pointer into `root`) names; refuses other references.
const nlohmann::ordered_json& resolve_pointer(const nlohmann::ordered_json& root, const std::string& ref,
                                              const std::string& path);

// Whether `s` has keywords besides $ref that constrain values (not annotations or definitions).
bool has_validation_siblings(const nlohmann::ordered_json& s);

// `s` with its top-level $ref (followed through chains) merged in.
nlohmann::ordered_json resolve_top(const nlohmann::ordered_json& s, const nlohmann::ordered_json& root,
                                   const std::string& path);

// `s` with the schemas of its allOf merged into it.
nlohmann::ordered_json merge_all_of(const nlohmann::ordered_json& s, const nlohmann::ordered_json& root,
                                    const std::string& path);

// A schema accepting what both `a` and `b` accept.
nlohmann::ordered_json merge_schemas(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b,
                                     const std::string& path);

// Whether no value can match both schemas (as far as a cheap check sees): their types are
// disjoint, or both require a property whose const / enum values are disjoint. oneOf needs it:
// its branches are generated as alternatives, so a value matching two would be invalid.
bool exclusive_schemas(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b);

// Whether no value the compiler writes for one of two object schemas matches the other, where
// values of both may exist: an object that declares properties is written with those (and its
// required ones) only, so it never matches a schema that requires another property, nor one
// closed (additionalProperties false) to a property it requires. Enough for oneOf, whose
// generated branches then each match exactly one.
bool written_objects_exclusive(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b);

}  // namespace qwick
