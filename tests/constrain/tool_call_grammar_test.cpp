#include "constrain/tool_call_grammar.h"

#include <gtest/gtest.h>

#include <string>

#include "constrain_test_support.h"
#include "text/output_parser.h"

namespace qwick {
namespace {

using json = nlohmann::ordered_json;
using test::full_match;
using test::gbnf;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object",
    "properties": {
      "city": {"type": "string"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
      "days": {"type": "integer", "minimum": 1, "maximum": 7},
      "hourly": {"type": "boolean"},
      "where": {"$ref": "#/$defs/point"}
    },
    "required": ["city", "days"],
    "$defs": {"point": {"type": "object", "properties": {"lat": {"type": "number"}, "tag": {"type": "string"}},
                        "required": ["lat"], "additionalProperties": false}}}}},
  {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
])");

std::shared_ptr<const Grammar> grammar(ToolCallRule rule) {
  return gbnf(tool_call_gbnf(rule));
}

ToolCallRule required(std::string name = "", bool parallel = true) {
  return {kTools, std::move(name), parallel, false};
}

// The calls the output parser reads from `text` (with the same tools).
ParsedMessage parse(const std::string& text) {
  OutputParser parser({false, kTools, true, true});
  std::vector<OutputDelta> deltas;
  parser.feed(text, deltas);
  parser.finish(deltas);
  return parser.message();
}

std::string call(const std::string& name, const std::string& params) {
  return "<tool_call>\n<function=" + name + ">\n" + params + "</function>\n</tool_call>";
}
std::string param(const std::string& key, const std::string& value) {
  return "<parameter=" + key + ">\n" + value + "\n</parameter>\n";
}

TEST(ToolCallGrammar, AcceptsTheTemplatesMarkupAndTheParserReadsIt) {
  const auto g = grammar(required());
  const std::string weather =
      call("get_weather", param("city", "Paris <b>& co<i>\nline two") + param("unit", "celsius") +
                              param("days", "3") + param("hourly", "false") +
                              param("where", R"({"lat": -1.5, "tag": "x"})"));
  for (const std::string& text :
       {weather, "\n\n" + weather, call("ping", ""), weather + "\n" + call("ping", "")}) {
    EXPECT_TRUE(full_match(g, text)) << text;
    EXPECT_TRUE(full_match(g, text, 7)) << text;
    const ParsedMessage m = parse(text);
    ASSERT_FALSE(m.tool_calls.empty()) << text;
    EXPECT_TRUE(m.content.empty()) << m.content;
  }
  const ParsedMessage m = parse(weather);
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(
      json::parse(m.tool_calls[0].arguments),
      json::parse(R"({"city": "Paris <b>& co<i>\nline two", "unit": "celsius", "days": 3, "hourly": false,
                            "where": {"lat": -1.5, "tag": "x"}})"));
}

TEST(ToolCallGrammar, RefusesWhatWouldNotBeACallThatFits) {
  const auto g = grammar(required());
  const std::string days = param("days", "3");
  for (const std::string& text : {
           std::string("hello"),                                          // text instead of a call
           call("get_weather", days),                                     // a required parameter missing
           call("get_weather", param("city", "a") + param("days", "9")),  // out of bounds
           call("get_weather", param("city", "a") + param("days", "\"3\"")),
           call("get_weather", param("city", "a") + param("unit", "kelvin") + days),
           call("get_weather", param("city", "a </parameter> b") + days),  // a tag inside a raw string
           call("get_weather", param("city", "a <parameter=x> b") + days),
           call("get_weather", param("city", "a") + days + param("where", R"({"lat": 1, "z": 2})")),
           call("get_weather", param("city", "a") + days + param("where", R"({"lat": 1, "tag": "</x>"})")),
           call("get_weather", param("city", "a") + days + param("extra", "1")),  // undeclared
           call("nope", ""),
           "text first " + call("ping", ""),
       })
    EXPECT_FALSE(full_match(g, text)) << text;
}

TEST(ToolCallGrammar, NamedAndSingleCalls) {
  const auto named = grammar(required("ping"));
  EXPECT_TRUE(full_match(named, call("ping", "")));
  EXPECT_FALSE(full_match(named, call("get_weather", param("city", "a") + param("days", "1"))));
  EXPECT_FALSE(full_match(grammar(required("", false)), call("ping", "") + "\n" + call("ping", "")));
  EXPECT_THROW(tool_call_gbnf(required("missing")), Error);
}

TEST(ToolCallGrammar, TextFirstAllowsTextButNoOtherCalls) {
  const auto g = grammar({kTools, "", true, true});
  for (const std::string& text : {std::string("just text <to <tool <tool_call"), std::string(""),
                                  "I will call it. " + call("ping", ""), std::string("a<<tool_cal>")})
    EXPECT_TRUE(full_match(g, text)) << text;
  EXPECT_FALSE(full_match(g, "x " + call("get_weather", param("days", "1"))));
  EXPECT_FALSE(full_match(g, "<tool_call>\nfree"));
}

TEST(ToolCallGrammar, StringParametersAreRawText) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {
      "s": {"type": "string", "minLength": 2, "maxLength": 3},
      "d": {"type": "string", "format": "date"},
      "n": {"type": ["string", "null"]},
      "any": {"description": "anything"}},
    "required": ["s", "d", "n", "any"]}}}])");
  const auto g = grammar({tools, "", false, false});
  auto text = [](const std::string& s, const std::string& d, const std::string& n) {
    return call("f", param("s", s) + param("d", d) + param("n", n) + param("any", "x"));
  };
  EXPECT_TRUE(full_match(g, text("ab", "2024-02-28", "null")));
  EXPECT_TRUE(full_match(g, text("abc", "2024-01-01", "free text")));
  EXPECT_FALSE(full_match(g, text("a", "2024-01-01", "x")));
  EXPECT_FALSE(full_match(g, text("abcd", "2024-01-01", "x")));
  EXPECT_FALSE(full_match(g, text("ab", "\"2024-01-01\"", "x")));
}

void expect_refused(const char* parameters, const std::string& keyword) {
  const json tools = {
      {{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::parse(parameters)}}}}};
  try {
    tool_call_gbnf({tools, "", true, false});
    ADD_FAILURE() << "accepted: " << parameters;
  } catch (const UnsupportedSchema& e) {
    EXPECT_EQ(e.keyword(), keyword) << e.what();
    EXPECT_NE(std::string(e.what()).find("tool \"f\""), std::string::npos) << e.what();
  }
}

TEST(ToolCallGrammar, RefusesWhatTheMarkupCannotCarry) {
  expect_refused(R"({"type": "object", "properties": {"a": {"type": ["string", "integer"]}}})", "type");
  expect_refused(R"({"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}})", "$ref");
  expect_refused(
      R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"minimum": 1}}})",
      "minimum");
  expect_refused(R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "^a"}}})",
                 "pattern");
  expect_refused(
      R"({"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"$ref": "#"}]}}})", "anyOf");
  expect_refused(R"({"type": "object", "properties": {"a": {"type": "integer", "not": {"const": 1}}}})",
                 "not");
  expect_refused(R"({"type": "object", "anyOf": [{"required": ["a"]}]})", "anyOf");
  expect_refused(R"({"type": "object", "required": ["ghost"]})", "required");
  expect_refused(R"({"type": "array"})", "type");
  const json bad_name = {{{"type", "function"}, {"function", {{"name", "a>b"}}}}};
  EXPECT_THROW(tool_call_gbnf({bad_name, "", true, false}), Error);
}

}  // namespace
}  // namespace qwick
