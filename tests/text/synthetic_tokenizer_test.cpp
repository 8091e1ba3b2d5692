// The tokenizer make-model writes: the Qwen added tokens at their ids, vocabularies of the preset
// sizes (the full model's included) that load, round-trip and are deterministic, and BPE learning.
#include <gtest/gtest.h>

#include "text/bpe_builder.h"
#include "text/synthetic_tokenizer.h"
#include "text/tokenizer.h"

namespace qwick {
namespace {

const std::string kSample =
    "Hello, world! The weather in São Paulo is 23 °C.\n\n  def f(x):\n\treturn x * 2  # ok\n"
    "你好，世界。こんにちは 안녕하세요 مرحبا नमस्ते 👩‍👩‍👧 "
    "e\xCC\x81 "
    "<think>\nhmm\n</think>\n\n"
    "<tool_call>\n<function=f>\n</function>\n</tool_call><|im_end|>";

TEST(SyntheticTokenizer, AddedTokensFollowTheQwenTable) {
  const auto tokens = qwen_added_tokens(248044);
  ASSERT_EQ(tokens.size(), 33u);
  auto id_of = [&](const std::string& content) {
    for (const auto& t : tokens)
      if (t.content == content) return t.id;
    return -1;
  };
  EXPECT_EQ(id_of("<|endoftext|>"), 248044);
  EXPECT_EQ(id_of("<|im_start|>"), 248045);
  EXPECT_EQ(id_of("<|im_end|>"), 248046);
  EXPECT_EQ(id_of("<|image_pad|>"), 248056);
  EXPECT_EQ(id_of("<tool_call>"), 248058);
  EXPECT_EQ(id_of("</tool_call>"), 248059);
  EXPECT_EQ(id_of("<tool_response>"), 248066);
  EXPECT_EQ(id_of("<think>"), 248068);
  EXPECT_EQ(id_of("</think>"), 248069);
  EXPECT_EQ(id_of("<|audio_pad|>"), 248076);
  EXPECT_TRUE(tokens[2].special);    // <|im_end|>
  EXPECT_FALSE(tokens[24].special);  // <think>
  EXPECT_FALSE(tokens[14].special);  // <tool_call>
}

TEST(SyntheticTokenizer, SmallVocabularyLoadsAndRoundTrips) {
  for (int32_t regular : {479, 4063}) {
    SCOPED_TRACE(regular);
    const std::string json = synthetic_tokenizer_json(regular);
    EXPECT_EQ(json, synthetic_tokenizer_json(regular));  // deterministic
    const Tokenizer t = Tokenizer::from_json_text(json, "synthetic");
    EXPECT_EQ(t.id_limit(), regular + 33);
    EXPECT_EQ(t.model().vocab_size(), static_cast<size_t>(regular));
    EXPECT_EQ(t.model().merge_count(), static_cast<size_t>(regular - 256));
    const auto ids = t.encode(kSample, true);
    // NFC composes "e" + U+0301; everything else comes back as written.
    std::string expected = kSample;
    expected.replace(expected.find("e\xCC\x81"), 3, "\xC3\xA9");
    EXPECT_EQ(t.decode(ids), expected);
    EXPECT_EQ(ids.back(), regular + 2);     // <|im_end|>
    EXPECT_LT(ids.size(), kSample.size());  // merges do apply
  }
}

TEST(SyntheticTokenizer, FullSizeVocabularyHasEveryId) {
  const Tokenizer t = Tokenizer::from_json_text(synthetic_tokenizer_json(248044), "synthetic");
  EXPECT_EQ(t.id_limit(), 248077);
  EXPECT_EQ(t.model().vocab_size(), 248044u);
  EXPECT_EQ(t.model().merge_count(), 247788u);
  for (int32_t id : {0, 255, 256, 100000, 248043, 248044, 248076}) EXPECT_TRUE(t.has_token(id)) << id;
  EXPECT_FALSE(t.has_token(248077));
  EXPECT_EQ(*t.added_token_id("<|im_end|>"), 248046);
  EXPECT_EQ(*t.added_token_id("<think>"), 248068);
  const auto ids = t.encode("the weather today", true);
  EXPECT_EQ(t.decode(ids), "the weather today");
  // Every id decodes to a non-empty piece that encodes back to itself as a whole (added tokens) or
  // at least to the same bytes (BPE tokens).
  for (int32_t id = 0; id < t.id_limit(); id += 997) {
    const std::string piece(t.token_bytes(id));
    ASSERT_FALSE(piece.empty()) << id;
  }
}

TEST(BpeBuilder, FrequentWordsBecomeSingleTokens) {
  const PreTokenizer split =
      PreTokenizer::from_json({{"type", "Split"},
                               {"pattern", {{"Regex", std::string(kQwen35SplitRegex)}}},
                               {"behavior", "Isolated"}});
  std::string text;
  for (int i = 0; i < 50; ++i) text += "banana bandana banana ";
  BpeVocabulary v = learn_bpe(text, split, 1000);
  EXPECT_LT(v.tokens.size(), 1000u);  // the text runs out of pairs seen twice
  const auto has = [&](const std::string& s) {
    return std::find(v.tokens.begin(), v.tokens.end(), s) != v.tokens.end();
  };
  EXPECT_FALSE(has("banana"));  // only once, at the start: " banana" is the frequent piece
  EXPECT_TRUE(has(" banana"));
  EXPECT_TRUE(has(" bandana"));
  const size_t learned = v.tokens.size();
  extend_bpe(v, learned + 100);
  EXPECT_EQ(v.tokens.size(), learned + 100);
  EXPECT_EQ(v.merges.size(), v.tokens.size() - 256);
  // The written file encodes the training words to one token each.
  const Tokenizer t = Tokenizer::from_json_text(bpe_tokenizer_json(v, {}, kQwen35SplitRegex), "built");
  EXPECT_EQ(t.encode(" banana bandana", true).size(), 2u);
}

}  // namespace
}  // namespace qwick
