#include <gtest/gtest.h>

#include "constrain/gbnf_parser.h"
#include "constrain_test_support.h"
#include "core/error.h"

namespace qwick {
namespace {

using test::full_match;
using test::gbnf;

TEST(GbnfParser, LiteralsClassesAndAlternatives) {
  const auto g = gbnf(R"(root ::= "ab" [0-9] | "c" [^a-z]  # comment
)");
  EXPECT_TRUE(full_match(g, "ab7"));
  EXPECT_TRUE(full_match(g, "cZ"));
  EXPECT_FALSE(full_match(g, "cz"));
  EXPECT_FALSE(full_match(g, "ab"));
  EXPECT_FALSE(full_match(g, "ab77"));
}

TEST(GbnfParser, RulesContinueAcrossLinesUntilTheNextDefinition) {
  const auto g = gbnf("root ::= a\n  | b\na ::= \"x\"\nb ::=\n  \"y\" \"z\"\n");
  EXPECT_TRUE(full_match(g, "x"));
  EXPECT_TRUE(full_match(g, "yz"));
  EXPECT_FALSE(full_match(g, "y"));
}

TEST(GbnfParser, Repetitions) {
  const auto g = gbnf(R"(root ::= "a"* "b"+ "c"? ("de"){2} [x]{1,3} "y"{2,})");
  EXPECT_TRUE(full_match(g, "bdedexyy"));
  EXPECT_TRUE(full_match(g, "aaabbcdedexxxyyyy"));
  EXPECT_FALSE(full_match(g, "dedexyy"));      // b+ needs one
  EXPECT_FALSE(full_match(g, "bdexyy"));       // {2}
  EXPECT_FALSE(full_match(g, "bdedexxxxyy"));  // {1,3}
  EXPECT_FALSE(full_match(g, "bdedexy"));      // {2,}
}

TEST(GbnfParser, RepeatingTheEmptyLiteral) {
  const auto g = gbnf(R"(root ::= ""* "a" ""{2,5})");
  EXPECT_TRUE(full_match(g, "a"));
  EXPECT_FALSE(full_match(g, "aa"));
}

TEST(GbnfParser, EscapesAndUnicode) {
  const auto g = gbnf(R"(root ::= "\"\\\n\t" [\x41-\x43] "\u00e9" [\U0001F600] "ü")");
  EXPECT_TRUE(full_match(g, "\"\\\n\tB\xC3\xA9\xF0\x9F\x98\x80\xC3\xBC"));
  EXPECT_FALSE(full_match(g, "\"\\\n\tD\xC3\xA9\xF0\x9F\x98\x80\xC3\xBC"));
}

TEST(GbnfParser, AnyCharacterDot) {
  const auto g = gbnf(R"(root ::= "<" . ">")");
  EXPECT_TRUE(full_match(g, "<\xE4\xB8\xAD>"));
  EXPECT_FALSE(full_match(g, "<>"));
}

TEST(GbnfParser, RecursionThroughRules) {
  const auto g = gbnf(R"g(root ::= "(" root ")" | "x")g");
  EXPECT_TRUE(full_match(g, "((x))"));
  EXPECT_FALSE(full_match(g, "((x)"));
}

TEST(GbnfParser, LiteralRoundTrip) {
  const std::string text = "a\"b\\c\nd\x01\xC3\xA9";
  EXPECT_TRUE(full_match(gbnf("root ::= " + gbnf_literal(text)), text));
}

void expect_error(const std::string& text, const std::string& fragment) {
  try {
    parse_gbnf(text);
    ADD_FAILURE() << "no error for: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(GbnfParser, Errors) {
  expect_error("root ::= \"abc", "unterminated string");
  expect_error("root ::= [abc", "unterminated character class");
  expect_error("root ::= other", "'other' is used but never defined");
  expect_error("a ::= \"x\"", "no rule named 'root'");
  expect_error("root ::= \"x\"\nroot ::= \"y\"", "defined twice");
  expect_error("root ::= root \"x\" | \"y\"", "left-recursive");
  expect_error("root ::= (\"a\"?)*", "left-recursive");  // a nullable repetition
  expect_error("root ::= \"x\"{5,2}", "max below min");
  expect_error("root ::= \"x\"{99999999}", "above the limit");
  expect_error("root ::= \"\\q\"", "unknown escape");
  expect_error("root ::= (\"a\"", "expected )");
  expect_error("root ::= [^\\x00-\\U0010FFFF]", "matches nothing");
  expect_error("root = \"x\"", "line 1, column 6");
}

TEST(GbnfParser, SizeLimits) {
  GbnfOptions options;
  options.limits.max_elements = 1000;
  EXPECT_THROW(parse_gbnf("root ::= \"x\"{0,5000}", options), Error);
  EXPECT_THROW(parse_gbnf("root ::= " + std::string(300, '(') + "\"x\"" + std::string(300, ')'), options),
               Error);
}

}  // namespace
}  // namespace qwick
