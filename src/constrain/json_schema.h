// JSON Schema -> GBNF text for the JSON documents the schema accepts (a subset of them, never
// more: whatever the grammar allows validates).
//
// Supported: type (and lists of types), properties / required / additionalProperties (declared
// properties in their order, required ones always, optional ones optionally; extra properties
// only in objects that declare none), patternProperties matching no declared property (an open
// object writes names of its one pattern), minProperties / maxProperties where the declared ones
// settle them, items / prefixItems / the draft-04 items array with additionalItems, minItems /
// maxItems, uniqueItems (at most one item written), enum / const, anyOf, oneOf whose branches
// cannot overlap or whose written objects cannot (schema_merge.h), allOf (merged), $ref to
// "#..." JSON pointers with recursion, $defs / definitions, string pattern (regex_grammar.h;
// beside a maxLength its repetitions are bounded to fit), format (date-time, date, time, uuid,
// email, ipv4, hostname, uri; other formats are annotations), minLength / maxLength, integer
// bounds, number bounds at integers >= 0 (number_grammar.h). Annotations and unknown keywords
// are ignored, as the specification says.
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

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// Several values in one grammar (a tool's parameters): for each (path, schema) in `schemas`, a
// subschema of `root` (its $refs resolve in `root`), the rule of its JSON text in values[i].
// `rules` defines them under names that start with `prefix`, so the rules of several roots can
// share one grammar with json_schema_primitives() and a root rule of the caller's.
struct SchemaRules {
  std::string rules;
  std::vector<std::string> values;
};
SchemaRules json_schema_rules(
    const nlohmann::ordered_json& root,
    const std::vector<std::pair<std::string, const nlohmann::ordered_json*>>& schemas,
    const std::string& prefix, const JsonSchemaOptions& options = {});

// The rules every schema grammar uses: ws, json-char (any character of a JSON string, escapes
// included, less the characters in `excluded_chars`, a GBNF class fragment such as "<"), the JSON
// values and the format helpers.
std::string json_schema_primitives(const JsonSchemaOptions& options = {},
                                   std::string_view excluded_chars = "");

// The characters of a string `format` the compiler enforces (no quotes: they match the decoded
// text, which for these formats needs no escapes); nullopt for a format that is an annotation.
std::optional<std::string> string_format_gbnf(std::string_view format);

// Any JSON object (response_format json_object), with the same whitespace bound.
std::string json_object_gbnf(const JsonSchemaOptions& options = {});

}  // namespace qwick
