// libFuzzer target: arbitrary text as a JSON Schema through the schema compiler, the GBNF it
// writes through the parser, and a matcher started on it. Every input must compile or throw
// qwick::Error (UnsupportedSchema included) or a JSON parse error. Seeds: the JSONSchemaBench
// sample beside the checkout, where present.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "constrain/gbnf_parser.h"
#include "constrain/grammar_matcher.h"
#include "constrain/json_schema.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
  if (schema.is_discarded()) return 0;
  try {
    qwick::JsonSchemaOptions options;
    options.max_repeat = 1000;
    const std::string gbnf = qwick::json_schema_to_gbnf(schema, options);
    auto grammar = std::make_shared<const qwick::Grammar>(qwick::parse_gbnf(gbnf));
    qwick::GrammarMatcher matcher(grammar);
    (void)matcher.accept("{\"a\": [1, \"x\", null]}");
  } catch (const qwick::Error&) {
  }
  return 0;
}
