// Streaming detokenizer: characters split over tokens are held back until whole, invalid bytes
// become U+FFFD, and for any ids the concatenated output equals the lossy decode of all of them.
#include <gtest/gtest.h>

#include <random>

#include "text/stream_decoder.h"
#include "text/utf8.h"
#include "text_test_support.h"

namespace qwick {
namespace {

const Tokenizer& qwen3() {
  static const Tokenizer t = Tokenizer::from_file(test::tokenizer_fixture("qwen3"));
  return t;
}

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  const std::string text = "Hi 👩‍👩‍👧 and 你好 ☃";
  const auto ids = qwen3().encode(text, true);
  StreamDecoder decoder(qwen3());
  std::string out;
  bool held_something = false;
  for (int32_t id : ids) {
    const std::string piece = decoder.push(id);
    EXPECT_TRUE(is_valid_utf8(piece));
    if (piece.size() < qwen3().token_bytes(id).size()) held_something = true;
    out += piece;
  }
  out += decoder.flush();
  EXPECT_EQ(out, text);
  EXPECT_TRUE(held_something) << "the test text should split a character over tokens";
}

TEST(StreamDecoder, MatchesLossyDecodeOfRandomByteTokens) {
  // The single-byte tokens, by byte value.
  std::vector<int32_t> byte_token(256, -1);
  for (int32_t id = 0; id < qwen3().model().id_limit(); ++id)
    if (qwen3().model().token_bytes(id).size() == 1)
      byte_token[static_cast<unsigned char>(qwen3().model().token_bytes(id)[0])] = id;
  const unsigned char alphabet[] = {'a',  ' ',  0xC3, 0xA9, 0xE2, 0x82, 0xAC,
                                    0xF0, 0x9F, 0x98, 0x80, 0xFF, 0xED, 0xA0};
  std::mt19937 rng(7);
  for (int round = 0; round < 500; ++round) {
    std::vector<int32_t> ids;
    for (int i = 0, n = static_cast<int>(rng() % 12); i < n; ++i) {
      ids.push_back(byte_token[alphabet[rng() % sizeof alphabet]]);
      if (rng() % 4 == 0) ids.push_back(9707);  // a multi-byte ordinary token now and then
    }
    StreamDecoder decoder(qwen3());
    std::string out;
    for (int32_t id : ids) out += decoder.push(id);
    out += decoder.flush();
    EXPECT_EQ(out, utf8_lossy(qwen3().decode(ids)));
  }
}

TEST(StreamDecoder, SkipsControlTokensWhenAsked) {
  const auto ids = qwen3().encode("<|im_start|>hi<|fim_suffix|><think>", true);
  StreamDecoder keep(qwen3()), skip(qwen3(), true);
  std::string a, b;
  for (int32_t id : ids) {
    a += keep.push(id);
    b += skip.push(id);
  }
  EXPECT_EQ(a, "<|im_start|>hi<|fim_suffix|><think>");
  EXPECT_EQ(b, "hi<think>");
}

}  // namespace
}  // namespace qwick
