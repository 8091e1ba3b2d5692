#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "constrain/json_schema.h"
#include "constrain/token_constraint.h"
#include "constrain/token_mask.h"
#include "constrain_test_support.h"
#include "core/error.h"
#include "text/tokenizer.h"

namespace qwick {
namespace {

using test::gbnf;

// Whether the matcher can take all of `bytes` from its current position (byte by byte, without
// the trie): the reference the mask is checked against.
bool allows_bytes(GrammarMatcher& m, const std::string& bytes) {
  const GrammarMatcher::Mark mark = m.mark();
  GrammarMatcher::Position p = m.current();
  bool ok = !bytes.empty();
  for (char c : bytes) {
    const auto next = m.step(p, static_cast<uint8_t>(c));
    if (!next) {
      ok = false;
      break;
    }
    p = *next;
  }
  m.release(mark);
  return ok;
}

void expect_mask_matches_reference(GrammarMatcher& m, const TokenTrie& trie, TokenMasker& masker) {
  const TokenMask& mask = masker.compute(m);
  int64_t allowed = 0;
  for (int32_t id = 0; id < trie.vocab_size(); ++id) {
    const bool expected = allows_bytes(m, trie.bytes(id));
    ASSERT_EQ(mask.allows(id), expected) << "token " << id << " '" << trie.bytes(id) << "'";
    allowed += expected;
  }
  EXPECT_EQ(mask.count(), allowed);
}

TokenTrie small_trie() {
  std::vector<std::pair<int32_t, std::string>> tokens = {
      {0, "{"},   {1, "\""},   {2, "\":"},  {3, "a"},         {4, "ab"},        {5, "abc"},     {6, " "},
      {7, "}"},   {8, "\xC3"}, {9, "\xA9"}, {10, "\xC3\xA9"}, {11, "\xE4\xB8"}, {12, "\xAD\""}, {13, "1"},
      {14, "12"}, {15, "\\"},  {16, "\\n"}, {17, "\\u00"},    {18, "\"}"},      {19, ""},       {20, "\x80"}};
  return TokenTrie(tokens, 22);  // id 21 is undefined, 19 empty: never allowed
}

TEST(TokenTrie, SharesPrefixes) {
  const TokenTrie trie = small_trie();
  // Root children: distinct first bytes.
  std::vector<uint8_t> first;
  for (const auto& c : trie.children(trie.root())) first.push_back(c.byte);
  EXPECT_TRUE(std::is_sorted(first.begin(), first.end()));
  EXPECT_EQ(std::adjacent_find(first.begin(), first.end()), first.end());
  EXPECT_EQ(trie.bytes(5), "abc");
  EXPECT_EQ(trie.bytes(21), "");
}

TEST(TokenMask, MatchesTheByteByByteReferenceOnASmallVocabulary) {
  const TokenTrie trie = small_trie();
  GrammarMatcher m(
      std::make_shared<const Grammar>(parse_gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(
          R"({"type":"object","properties":{"ab":{"type":"string"},"n":{"type":"integer"}}})")))));
  TokenMasker masker(trie);
  for (const char* piece : {"", "{", "\"", "ab", "\":", "\"", "\xC3", "\xA9", "\xE4\xB8", "\xAD\"", "}"}) {
    ASSERT_TRUE(m.accept(piece)) << piece;
    expect_mask_matches_reference(m, trie, masker);
  }
  EXPECT_TRUE(m.accepting(m.current()));
}

TEST(TokenMask, MatchesTheReferenceOverTheQwenVocabulary) {
  const Tokenizer tok = Tokenizer::from_file(std::string(QWICK_TOKENIZER_FIXTURES) + "/qwen3/tokenizer.json");
  const TokenTrie trie = TokenTrie::from_tokenizer(tok, tok.id_limit());
  EXPECT_GT(trie.node_count(), 100000u);
  GrammarMatcher m(std::make_shared<
                   const Grammar>(parse_gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":5},"n":{"type":"number"}},"required":["name","n"]})")))));
  TokenMasker masker(trie);
  // At the start, after a key, inside a string (one multi-byte character open), in a number.
  for (const char* piece : {"", "{\"name", "\": \"\xE4", "\xB8\xAD\\n", "\", \"n\": -1"}) {
    ASSERT_TRUE(m.accept(piece)) << piece;
    expect_mask_matches_reference(m, trie, masker);
  }
}

TEST(TokenMask, CachedByState) {
  const TokenTrie trie = small_trie();
  GrammarMatcher m(gbnf(R"(root ::= "\"" [a-c]* "\"")"));
  TokenMasker masker(trie);
  ASSERT_TRUE(m.accept("\""));
  const TokenMask* first = &masker.compute(m);
  ASSERT_TRUE(m.accept("ab"));
  EXPECT_EQ(&masker.compute(m), first);  // same stacks inside the string: the cached mask
  EXPECT_TRUE(first->allows(5));
  EXPECT_TRUE(first->allows(1));
  EXPECT_FALSE(first->allows(13));
}

TEST(TokenConstraint, StartsAfterItsTokenAndEndsWhereTheGrammarDoes) {
  auto trie = std::make_shared<const TokenTrie>(small_trie());
  TokenConstraint c(gbnf(R"(root ::= "ab" "c"?)"), trie, {21}, 7);
  std::vector<float> logits(22, 1.0f);
  c.apply(logits);  // inactive: untouched
  EXPECT_EQ(logits[13], 1.0f);
  c.accept(13);
  c.accept(7);
  EXPECT_TRUE(c.active());
  c.apply(logits);
  EXPECT_EQ(logits[4], 1.0f);           // "ab"
  EXPECT_EQ(logits[5], 1.0f);           // "abc"
  EXPECT_EQ(logits[3], 1.0f);           // "a": a prefix of "ab"
  EXPECT_TRUE(std::isinf(logits[13]));  // "1"
  EXPECT_TRUE(std::isinf(logits[21]));  // the end token before the grammar is complete
  c.accept(4);
  std::fill(logits.begin(), logits.end(), 1.0f);
  c.apply(logits);
  EXPECT_EQ(logits[21], 1.0f);  // complete: the end token keeps its logit
  EXPECT_FALSE(c.complete());   // "c" may still follow
  EXPECT_THROW(c.accept(13), Error);
}

}  // namespace
}  // namespace qwick
