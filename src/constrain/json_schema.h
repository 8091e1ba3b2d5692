// JSON Schema -> GBNF text for the JSON documents the schema accepts (a subset of them, never
// more: whatever the grammar allows validates).
//
// Supported: type (and lists of types), properties / required / additionalProperties (declared
// properties in their order, required ones always, optional ones optionally; extra properties
// only in objects that declare none), patternProperties matching no declared property,
// minProperties / maxProperties where the declared ones settle them, items / prefixItems / the
// draft-04 items array with additionalItems, minItems / maxItems, enum / const, anyOf, oneOf
// whose branches cannot overlap (schema_merge.h), allOf (merged), $ref to "#..." JSON pointers
// with recursion, $defs / definitions, string pattern (regex_grammar.h), format (date-time, date,
// time, uuid, email, ipv4, hostname, uri; other formats are annotations), minLength / maxLength,
// integer bounds, number bounds at integers >= 0 (number_grammar.h). Annotations and unknown
// keywords are ignored, as the specification says.
//
// Whitespace follows the model's style but is bounded: at most `max_whitespace` characters at each
// place, and numbers have at most 16 integer and 16 fraction digits, so a model cannot run on
// forever inside one token class.
//
// What cannot be enforced is an UnsupportedSchema error naming the keyword and where it is.
//
// Tested in tests/constrain/json_schema_test.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"

namespace qwick {

class UnsupportedSchema : public Error {
 public:
  UnsupportedSchema(std::string keyword, const std::string& message)
      : Error(message), keyword_(std::move(keyword)) {}
  const std::string& keyword() const { return keyword_; }

 private:
  std::string keyword_;
};

// Throws UnsupportedSchema: "JSON Schema keyword '<keyword>' is not supported (at <path>): <why>".
[[noreturn]] void refuse_keyword(const std::string& keyword, const std::string& path, const std::string& why);

struct JsonSchemaOptions {
  int max_whitespace = 24;
  int max_depth = 64;         // nesting of subschemas (recursion through $ref is bounded at run time)
  size_t max_rules = 100000;  // generated rules
  int max_repeat = 100000;    // the largest minLength / maxLength / minItems / maxItems
};

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options = {});

// Any JSON object (response_format json_object), with the same whitespace bound.
std::string json_object_gbnf(const JsonSchemaOptions& options = {});

}  // namespace qwick
