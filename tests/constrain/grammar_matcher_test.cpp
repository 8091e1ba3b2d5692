#include <gtest/gtest.h>

#include "constrain/grammar_matcher.h"
#include "constrain_test_support.h"
#include "core/error.h"

namespace qwick {
namespace {

using test::full_match;
using test::gbnf;
using test::prefix_match;

TEST(GrammarMatcher, RejectedInputLeavesTheStateUnchanged) {
  GrammarMatcher m(gbnf(R"(root ::= "ab" | "ac")"));
  EXPECT_TRUE(m.accept("a"));
  EXPECT_FALSE(m.accept("bx"));  // b would fit, x not: all or nothing
  EXPECT_TRUE(m.accept("c"));
  EXPECT_TRUE(m.accepting(m.current()));
  EXPECT_FALSE(m.can_continue(m.current()));
}

TEST(GrammarMatcher, AcceptingAndContinuing) {
  GrammarMatcher m(gbnf(R"(root ::= "a" "b"*)"));
  EXPECT_FALSE(m.accepting(m.current()));
  ASSERT_TRUE(m.accept("a"));
  EXPECT_TRUE(m.accepting(m.current()));
  EXPECT_TRUE(m.can_continue(m.current()));
}

TEST(GrammarMatcher, Utf8SplitAcrossPieces) {
  const auto g = gbnf(R"(root ::= [\u00e0-\u00ff]+ "\U0001F600")");
  const std::string text = "\xC3\xA9\xC3\xA0\xF0\x9F\x98\x80";  // é à 😀
  for (size_t piece = 1; piece <= 3; ++piece) EXPECT_TRUE(full_match(g, text, piece)) << piece;
  // A partial character is held only while it can still become an allowed one.
  EXPECT_TRUE(prefix_match(g, "\xC3"));   // U+00C0..U+00FF can follow
  EXPECT_FALSE(prefix_match(g, "\xC4"));  // U+0100..: none allowed
  EXPECT_TRUE(prefix_match(g, "\xC3\xA9\xF0\x9F"));
  EXPECT_FALSE(prefix_match(g, "\xC3\xA9\xF0\x9E"));
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept("\xC3\xA9\xF0"));
  EXPECT_FALSE(m.accepting(m.current()));  // mid-character is never complete
}

TEST(GrammarMatcher, InvalidUtf8IsRejected) {
  const auto g = gbnf(R"(root ::= .*)");
  EXPECT_TRUE(prefix_match(g, "\xE4\xB8\xAD"));
  EXPECT_FALSE(prefix_match(g, "\x80"));              // a lone continuation byte
  EXPECT_FALSE(prefix_match(g, "\xC0\x80"));          // overlong
  EXPECT_FALSE(prefix_match(g, "\xE0\x80"));          // overlong three-byte form
  EXPECT_FALSE(prefix_match(g, "\xED\xA0\x80"));      // a surrogate
  EXPECT_FALSE(prefix_match(g, "\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(prefix_match(g, "\xC3\x41"));          // a lead byte without its continuation
}

TEST(GrammarMatcher, NestingIsBounded) {
  const auto g = gbnf(R"(root ::= "[" root "]" | "x")");
  MatcherLimits limits;
  limits.max_depth = 8;
  GrammarMatcher m(g, limits);
  int opened = 0;
  while (m.accept("[")) ++opened;
  EXPECT_GT(opened, 3);
  EXPECT_LE(opened, 8);
  EXPECT_TRUE(m.accept("x"));
  for (int i = 0; i < opened; ++i) EXPECT_TRUE(m.accept("]"));
  EXPECT_TRUE(m.accepting(m.current()));
}

TEST(GrammarMatcher, RightRecursionDoesNotGrowTheStack) {
  // 100k repetitions under a depth limit of 16: x* must run in constant stack depth.
  MatcherLimits limits;
  limits.max_depth = 16;
  GrammarMatcher m(gbnf(R"(root ::= "<" [a-z]* ">")"), limits);
  ASSERT_TRUE(m.accept("<"));
  for (int i = 0; i < 100000; ++i) ASSERT_TRUE(m.accept("q")) << i;
  EXPECT_TRUE(m.accept(">"));
}

TEST(GrammarMatcher, AmbiguityIsMergedNotMultiplied) {
  // Every split of the a's is a parse; identical stacks are merged so the count stays small.
  GrammarMatcher m(gbnf(R"(root ::= ("a" | "a" "a")* "b")"));
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(m.accept("a"));
  EXPECT_LT(m.current().end - m.current().begin, 8u);
  EXPECT_TRUE(m.accept("b"));
}

TEST(GrammarMatcher, TooManyLiveParsesIsAnError) {
  MatcherLimits limits;
  limits.max_stacks = 4;
  EXPECT_THROW(GrammarMatcher(gbnf(R"(root ::= "a" "1" | "a" "2" | "a" "3" | "a" "4" | "a" "5")"), limits),
               Error);
}

TEST(GrammarMatcher, ChainedEmptyAlternativesStayCheap) {
  // 40 optional groups: 2^40 ways to skip them, one set of stacks. Without merging the frames that
  // end on each path this would not finish.
  GrammarMatcher m(gbnf("root ::= (| x){40} \"z\"\nx ::= \"a\"*"));
  EXPECT_TRUE(m.accept("aaa"));
  EXPECT_TRUE(m.accept("z"));
  EXPECT_TRUE(m.accepting(m.current()));
  GrammarMatcher fresh(gbnf("root ::= (| x){40} \"z\"\nx ::= \"a\"*"));
  EXPECT_TRUE(fresh.accept("z"));
  EXPECT_FALSE(fresh.accept("a"));
}

TEST(GrammarMatcher, ExpansionWorkIsBounded) {
  MatcherLimits limits;
  limits.max_stacks = 4;
  limits.work_per_stack = 2;  // 8 expansion steps for a set
  EXPECT_THROW(GrammarMatcher(gbnf("root ::= a\na ::= b\nb ::= c\nc ::= d\nd ::= e\ne ::= f\n"
                                   "f ::= g\ng ::= h\nh ::= \"x\""),
                              limits),
               Error);
  EXPECT_NO_THROW(GrammarMatcher(gbnf("root ::= a\na ::= \"x\""), limits));
}

}  // namespace
}  // namespace qwick
