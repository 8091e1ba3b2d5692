#include <gtest/gtest.h>

#include <string>

#include "constrain/json_schema.h"
#include "constrain/number_grammar.h"
#include "constrain_test_support.h"

namespace qwick {
namespace {

using test::full_match;
using test::gbnf;

std::shared_ptr<const Grammar> schema(const char* text) {
  return gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(text)));
}

void expect_refused(const char* text, const std::string& keyword) {
  try {
    json_schema_to_gbnf(nlohmann::ordered_json::parse(text));
    ADD_FAILURE() << "accepted: " << text;
  } catch (const UnsupportedSchema& e) {
    EXPECT_EQ(e.keyword(), keyword) << e.what();
    EXPECT_NE(std::string(e.what()).find("'" + keyword + "'"), std::string::npos) << e.what();
  }
}

TEST(JsonSchema, Primitives) {
  const auto s = schema(R"({"type":"string"})");
  EXPECT_TRUE(full_match(s, R"("héllo \"q\" \\ \n \u00e9 /")"));
  EXPECT_FALSE(full_match(s, "\"a\nb\""));  // a raw control character
  EXPECT_FALSE(full_match(s, R"("\x")"));
  EXPECT_FALSE(full_match(s, R"("\u12")"));
  const auto n = schema(R"({"type":"number"})");
  for (const char* ok : {"0", "-0", "12.5", "-3.25e10", "1E-2", "7e+99"})
    EXPECT_TRUE(full_match(n, ok)) << ok;
  for (const char* bad : {"01", "1.", ".5", "+1", "1e", "1e100", "--1", "NaN"})
    EXPECT_FALSE(full_match(n, bad)) << bad;
  const auto i = schema(R"({"type":"integer"})");
  EXPECT_TRUE(full_match(i, "-42"));
  EXPECT_FALSE(full_match(i, "4.0"));
  EXPECT_TRUE(full_match(schema(R"({"type":"boolean"})"), "false"));
  EXPECT_TRUE(full_match(schema(R"({"type":"null"})"), "null"));
  const auto multi = schema(R"({"type":["string","null"]})");
  EXPECT_TRUE(full_match(multi, "null"));
  EXPECT_TRUE(full_match(multi, "\"x\""));
  EXPECT_FALSE(full_match(multi, "1"));
}

TEST(JsonSchema, ObjectsKeepDeclaredOrderAndRequiredProperties) {
  const auto s = schema(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
                            "required":["b"]})");
  EXPECT_TRUE(full_match(s, R"({"b":"x"})"));
  EXPECT_TRUE(full_match(s, R"({"a":1,"b":"x","c":true})"));
  EXPECT_TRUE(full_match(s, "{\n  \"a\": 1,\n  \"b\": \"x\"\n}"));
  EXPECT_FALSE(full_match(s, R"({"a":1})"));          // b is required
  EXPECT_FALSE(full_match(s, R"({"b":"x","a":1})"));  // declared order
  EXPECT_FALSE(full_match(s, R"({"b":"x","d":1})"));  // no extra properties next to declared ones
  EXPECT_FALSE(full_match(s, R"({"b":"x",})"));
}

TEST(JsonSchema, FreeObjectsAndPropertyCounts) {
  const auto any = schema(R"({"type":"object"})");
  EXPECT_TRUE(full_match(any, R"({"k":[1,{"z":null}],"j":"v"})"));
  EXPECT_TRUE(full_match(any, "{}"));
  const auto typed = schema(
      R"({"type":"object","additionalProperties":{"type":"integer"},"minProperties":1,"maxProperties":2})");
  EXPECT_TRUE(full_match(typed, R"({"x":1,"y":2})"));
  EXPECT_FALSE(full_match(typed, "{}"));
  EXPECT_FALSE(full_match(typed, R"({"x":1,"y":2,"z":3})"));
  EXPECT_FALSE(full_match(typed, R"({"x":"s"})"));
  EXPECT_TRUE(full_match(schema(R"({"type":"object","additionalProperties":false})"), "{ }"));
}

TEST(JsonSchema, Arrays) {
  const auto s = schema(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})");
  EXPECT_TRUE(full_match(s, "[1]"));
  EXPECT_TRUE(full_match(s, "[1, 2, 3]"));
  EXPECT_FALSE(full_match(s, "[]"));
  EXPECT_FALSE(full_match(s, "[1,2,3,4]"));
  EXPECT_FALSE(full_match(s, "[\"a\"]"));
  const auto tuple =
      schema(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})");
  EXPECT_TRUE(full_match(tuple, R"(["a",1])"));
  EXPECT_TRUE(full_match(tuple, R"(["a"])"));
  EXPECT_FALSE(full_match(tuple, R"([1,"a"])"));
  EXPECT_FALSE(full_match(tuple, R"(["a",1,2])"));
  const auto draft4 =
      schema(R"({"items":[{"type":"boolean"}],"additionalItems":{"type":"null"},"minItems":3})");
  EXPECT_TRUE(full_match(draft4, "[true,null,null]"));
  EXPECT_FALSE(full_match(draft4, "[true,null]"));
}

TEST(JsonSchema, EnumConstAndCombinators) {
  const auto e = schema(R"({"enum":["red", 3, null, {"k":[1]}]})");
  for (const char* ok : {"\"red\"", "3", "null", "{\"k\":[1]}"}) EXPECT_TRUE(full_match(e, ok)) << ok;
  EXPECT_FALSE(full_match(e, "\"blue\""));
  EXPECT_TRUE(full_match(schema(R"({"const":"only"})"), "\"only\""));
  const auto any = schema(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":2}]})");
  EXPECT_TRUE(full_match(any, "5"));
  EXPECT_TRUE(full_match(any, "\"ab\""));
  EXPECT_FALSE(full_match(any, "\"abc\""));
  const auto all =
      schema(R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                                       {"properties":{"b":{"type":"string"}},"required":["b"]}]})");
  EXPECT_TRUE(full_match(all, R"({"a":1,"b":"x"})"));
  EXPECT_FALSE(full_match(all, R"({"a":1})"));
  // oneOf: branches that cannot both match (other types, or a required discriminator with
  // other values); keywords beside it apply to each branch.
  const auto one = schema(R"({"type":"object","properties":{"a":{"type":"integer"}},
                              "oneOf":[{"properties":{"k":{"const":"x"}},"required":["k"]},
                                       {"properties":{"k":{"enum":["y","z"]}},"required":["k"]}]})");
  EXPECT_TRUE(full_match(one, R"({"a":1,"k":"z"})"));
  EXPECT_FALSE(full_match(one, R"({"a":1})"));
  EXPECT_TRUE(full_match(schema(R"({"oneOf":[{"type":"string"},{"type":"integer"}]})"), "7"));
  expect_refused(R"({"oneOf":[{"type":"number"},{"type":"integer"}]})", "oneOf");
  // Objects that may overlap, where what is written for each branch fails the other: a branch
  // writes only its own properties, so it lacks the property the other requires.
  const auto written = schema(R"({"type":"object","oneOf":[{"required":["a"]},
                                  {"properties":{"b":{"type":"integer"}},"required":["b"]}]})");
  EXPECT_TRUE(full_match(written, R"({"a":1})"));
  EXPECT_TRUE(full_match(written, R"({"b":2})"));
  EXPECT_FALSE(full_match(written, R"({"a":1,"b":2})"));
  EXPECT_FALSE(full_match(written, R"({"c":1})"));
  expect_refused(R"({"type":"object","oneOf":[{"properties":{"a":{}}},{"properties":{"b":{}}}]})", "oneOf");
  expect_refused(R"({"type":"object","oneOf":[{"required":["a"]},{"required":["a"]}]})", "oneOf");
}

TEST(JsonSchema, RecursiveReferences) {
  const auto s = schema(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{
      "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}}})");
  EXPECT_TRUE(full_match(s, R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]})"));
  EXPECT_FALSE(full_match(s, R"({"v":1,"kids":[{"kids":[]}]})"));
  const auto legacy = schema(
      R"({"definitions":{"a~b/c":{"type":"integer"}},"properties":{"x":{"$ref":"#/definitions/a~0b~1c"}}})");
  EXPECT_TRUE(full_match(legacy, R"({"x":3})"));
}

TEST(JsonSchema, StringLengthsFormatsAndPatterns) {
  const auto len = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_TRUE(full_match(len, "\"ab\""));
  EXPECT_TRUE(full_match(len, "\"a\\n\xC3\xA9\""));  // an escape and a multi-byte character count as one each
  EXPECT_FALSE(full_match(len, "\"a\""));
  EXPECT_FALSE(full_match(len, "\"abcd\""));
  EXPECT_TRUE(
      full_match(schema(R"({"type":"string","format":"date-time"})"), "\"2024-02-28T13:05:59.5+01:00\""));
  EXPECT_FALSE(full_match(schema(R"({"type":"string","format":"date"})"), "\"2024-13-01\""));
  EXPECT_TRUE(
      full_match(schema(R"({"type":"string","format":"uuid"})"), "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_TRUE(full_match(schema(R"({"type":"string","format":"ipv4"})"), "\"192.168.0.255\""));
  EXPECT_FALSE(full_match(schema(R"({"type":"string","format":"ipv4"})"), "\"256.1.1.1\""));
  EXPECT_TRUE(full_match(schema(R"({"type":"string","format":"email"})"), "\"jo.x@mail.com\""));
  EXPECT_TRUE(full_match(schema(R"({"type":"string","format":"no-such-format"})"), "\"anything\""));
  const auto pat = schema(R"({"type":"string","pattern":"^[A-Z]{2}-\\d+(\\.\\d{1,2})?$"})");
  EXPECT_TRUE(full_match(pat, "\"AB-12.5\""));
  EXPECT_FALSE(full_match(pat, "\"AB-12.\""));
  EXPECT_FALSE(full_match(pat, "\"ab-1\""));
  const auto unanchored = schema(R"({"type":"string","pattern":"x[\"\\\\]y"})");
  EXPECT_TRUE(full_match(unanchored, R"("abx\"yz")"));
  EXPECT_TRUE(full_match(unanchored, R"("x\\y")"));
  EXPECT_FALSE(full_match(unanchored, R"("xy")"));
  // Lengths beside a pattern: kept where the pattern implies them.
  EXPECT_TRUE(full_match(schema(R"({"pattern":"^[a-z]{2,4}$","minLength":1,"maxLength":4})"), "\"abc\""));
  expect_refused(R"({"pattern":"^[a-z]{2,4}$","maxLength":3})", "maxLength");
  // Unbounded repetitions and unanchored ends are bounded to fit a maxLength.
  const auto capped = schema(R"({"pattern":"[a-z]","maxLength":3})");
  EXPECT_TRUE(full_match(capped, "\"1a2\""));
  EXPECT_FALSE(full_match(capped, "\"11a2\""));
  const auto word = schema(R"({"type":"string","pattern":"^[a-z]+$","maxLength":5})");
  EXPECT_TRUE(full_match(word, "\"abcde\""));
  EXPECT_FALSE(full_match(word, "\"abcdef\""));
  EXPECT_FALSE(full_match(word, "\"\""));
  // One bound for every repetition: the largest that keeps all of them within the length.
  const auto words = schema(R"({"type":"string","pattern":"^[a-z]+(-[a-z]+)*$","maxLength":5})");
  EXPECT_TRUE(full_match(words, "\"a-b\""));
  EXPECT_FALSE(full_match(words, "\"a-b-c\""));
  expect_refused(R"({"pattern":"^[a-z]{4}x+$","maxLength":4})", "maxLength");
  expect_refused(R"({"pattern":"^(ab|c)+$","minLength":2})", "minLength");
  EXPECT_TRUE(full_match(schema(R"({"pattern":"^(ab|cd)+$","minLength":2})"), "\"abcd\""));
  const auto alt = schema(R"({"pattern":"^(cat|dog)s?$|^[0-9]{3}$"})");
  EXPECT_TRUE(full_match(alt, "\"dogs\""));
  EXPECT_TRUE(full_match(alt, "\"123\""));
  EXPECT_FALSE(full_match(alt, "\"cow\""));
}

TEST(JsonSchema, IntegerBounds) {
  struct Case {
    std::optional<int64_t> lo, hi;
  };
  for (const Case c :
       {Case{0, std::nullopt}, Case{1, std::nullopt}, Case{17, 342}, Case{-25, 7}, Case{std::nullopt, -3},
        Case{-1000, -999}, Case{5, 5}, Case{99, 1000}, Case{std::nullopt, 65535}}) {
    const auto g = gbnf("root ::= " + integer_range(c.lo, c.hi));
    for (int64_t v = -1200; v <= 1200; ++v) {
      const bool in = (!c.lo || v >= *c.lo) && (!c.hi || v <= *c.hi);
      ASSERT_EQ(full_match(g, std::to_string(v)), in)
          << v << " in [" << c.lo.value_or(-1) << "," << c.hi.value_or(-1) << "]";
    }
  }
  const auto s = schema(R"({"type":"integer","minimum":10,"exclusiveMaximum":20})");
  EXPECT_TRUE(full_match(s, "19"));
  EXPECT_FALSE(full_match(s, "20"));
  const auto draft4 = schema(R"({"type":"integer","minimum":0,"exclusiveMinimum":true})");
  EXPECT_FALSE(full_match(draft4, "0"));
  EXPECT_TRUE(full_match(draft4, "1"));
}

TEST(JsonSchema, NumberBounds) {
  const auto s = schema(R"({"type":"number","minimum":0,"maximum":1})");
  for (const char* ok : {"0", "0.5", "1", "1.000"}) EXPECT_TRUE(full_match(s, ok)) << ok;
  for (const char* bad : {"-0.5", "1.5", "1.01", "2"}) EXPECT_FALSE(full_match(s, bad)) << bad;
  const auto pos = schema(R"({"type":"number","exclusiveMinimum":0})");
  EXPECT_TRUE(full_match(pos, "0.01"));
  EXPECT_TRUE(full_match(pos, "3"));
  EXPECT_FALSE(full_match(pos, "0"));
  EXPECT_FALSE(full_match(pos, "0.0"));
}

TEST(JsonSchema, PatternPropertiesOnlyWhereNoDeclaredNameMatches) {
  const auto s = schema(
      R"({"properties":{"a":{"type":"integer"}},"patternProperties":{"^x[0-9]+$":{"type":"string"}}})");
  EXPECT_TRUE(full_match(s, R"({"a":1})"));
  expect_refused(
      R"({"properties":{"x12":{"type":"integer"}},"patternProperties":{"^x[0-9]+$":{"type":"string"}}})",
      "patternProperties");
  expect_refused(R"x({"properties":{"a":{}},"patternProperties":{"(?=a)":{}}})x", "patternProperties");
  // An object open to any property: the names written match the one pattern, its schema the values.
  const auto open = schema(R"({"type":"object","patternProperties":{"^x-[a-z]+$":{"type":"integer"}}})");
  EXPECT_TRUE(full_match(open, R"({"x-ab":1,"x-c":2})"));
  EXPECT_TRUE(full_match(open, "{}"));
  EXPECT_FALSE(full_match(open, R"({"y":1})"));
  EXPECT_FALSE(full_match(open, R"({"x-ab":"s"})"));
  // Several patterns (a name may match two): no property is written.
  const auto several = schema(R"({"type":"object","patternProperties":{"^x":{"type":"integer"},"y$":{}}})");
  EXPECT_TRUE(full_match(several, "{}"));
  EXPECT_FALSE(full_match(several, R"({"xy":1})"));
  expect_refused(R"({"type":"object","minProperties":1,"patternProperties":{"^x":{},"y":{}}})",
                 "minProperties");
}

TEST(JsonSchema, LengthsBesideAFormatWhereTheFormatKeepsThem) {
  const auto uuid = schema(R"({"type":"string","format":"uuid","minLength":36,"maxLength":36})");
  EXPECT_TRUE(full_match(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_TRUE(
      full_match(schema(R"({"type":"string","format":"uri","maxLength":255})"), R"("https://a.io/x")"));
  expect_refused(R"({"type":"string","format":"email","maxLength":50})", "maxLength");
  expect_refused(R"({"type":"string","format":"date","minLength":11})", "minLength");
}

TEST(JsonSchema, UniqueItemsByWritingOneAtMost) {
  const auto unique = schema(R"({"type":"array","items":{"type":"integer"},"uniqueItems":true})");
  EXPECT_TRUE(full_match(unique, "[]"));
  EXPECT_TRUE(full_match(unique, "[3]"));
  EXPECT_FALSE(full_match(unique, "[3,4]"));
}

TEST(JsonSchema, WhitespaceIsBounded) {
  JsonSchemaOptions options;
  options.max_whitespace = 4;
  const auto g = gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(R"({"type":"array"})"), options));
  EXPECT_TRUE(full_match(g, "[    1]"));
  EXPECT_FALSE(full_match(g, "[     1]"));
}

TEST(JsonSchema, RefusesWhatItCannotEnforce) {
  expect_refused(R"({"not":{"type":"string"}})", "not");
  expect_refused(R"({"type":"object","if":{},"then":{}})", "if");
  expect_refused(R"({"type":"array","uniqueItems":true,"minItems":2})", "uniqueItems");
  expect_refused(R"({"type":"number","multipleOf":3})", "multipleOf");
  expect_refused(R"({"$ref":"other.json#/a"})", "$ref");
  expect_refused(R"({"$ref":"#/nowhere"})", "$ref");
  expect_refused(R"({"type":"integer","minimum":5,"maximum":2})", "minimum");
  expect_refused(R"({"type":"number","minimum":-1.5})", "minimum");
  expect_refused(R"({"pattern":"(a)\\1"})", "pattern");
  expect_refused(R"({"pattern":"(?=a)b"})", "pattern");
  expect_refused(R"({"type":"string","maxLength":1000000})", "maxLength");
  expect_refused(R"({"type":"tuple"})", "type");
  expect_refused(R"({"allOf":[{"type":"string"},{"type":"integer"}]})", "allOf");
  expect_refused(R"({"type":"object","properties":{"a":{}},"required":["b"],"additionalProperties":false})",
                 "required");
  expect_refused("false", "false");
}

TEST(JsonSchema, AdversarialSchemasAreBounded) {
  // Deep nesting without $ref.
  std::string deep = "{\"type\":\"integer\"}";
  for (int i = 0; i < 200; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  expect_refused(deep.c_str(), "$ref");
  // A reference cycle with no content: left recursion, refused by the grammar check.
  EXPECT_THROW(
      schema(R"({"$ref":"#/$defs/a","$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}}})"),
      Error);
  // A huge enum compiles to a bounded grammar.
  nlohmann::ordered_json big = nlohmann::ordered_json::array();
  for (int i = 0; i < 20000; ++i) big.push_back("value-" + std::to_string(i));
  const auto g = gbnf(json_schema_to_gbnf(nlohmann::ordered_json{{"enum", big}}));
  EXPECT_TRUE(full_match(g, "\"value-19999\""));
  // A catastrophic-backtracking regex is linear here: stacks are merged, not multiplied.
  const auto cat = schema(R"({"type":"string","pattern":"^(a+)+$"})");
  EXPECT_TRUE(full_match(cat, "\"" + std::string(5000, 'a') + "\""));
  EXPECT_FALSE(full_match(cat, "\"" + std::string(5000, 'a') + "b\""));
}

}  // namespace
}  // namespace qwick
