// Tokenizer: the goldens of shared/reference/tokenizer (copied to tests/fixtures/tokenizer) byte
// for byte, for the real Qwen3 tokenizer.json and the same vocabulary with the Qwen3.5/3.6 split
// regex; plus the byte-level map, the special-token switch and the errors for what is unsupported.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "core/error.h"
#include "text/byte_level.h"
#include "text/normalizer.h"
#include "text/tokenizer.h"
#include "text_test_support.h"

namespace qwick {
namespace {

const Tokenizer& fixture(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& t = loaded[name];
  if (!t) t = std::make_unique<Tokenizer>(Tokenizer::from_file(test::tokenizer_fixture(name)));
  return *t;
}

const nlohmann::ordered_json& goldens() {
  static const nlohmann::ordered_json g =
      test::read_json(std::string(QWICK_FIXTURES) + "/tokenizer/goldens.json");
  return g;
}

TEST(ByteLevel, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string mapped = bytes_to_byte_level(all);
  EXPECT_EQ(byte_level_to_bytes(mapped), all);
  EXPECT_EQ(byte_to_unicode(' '), U'\u0120');   // the familiar "Ġ"
  EXPECT_EQ(byte_to_unicode('\n'), U'\u010A');  // "Ċ"
  EXPECT_EQ(byte_to_unicode('a'), U'a');
  EXPECT_FALSE(byte_level_to_bytes("\xE4\xBD\xA0").has_value());  // 你 is not a byte-level character
}

TEST(TokenizerGoldens, EncodeDecodeAndPiecesMatchTheReference) {
  int checked = 0;
  for (const auto& c : goldens()["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>() + " / " + c["tokenizer"].get<std::string>());
    const Tokenizer& t = fixture(c["tokenizer"].get<std::string>());
    const std::string text = c["text"];
    const auto ids = t.encode(text, true);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(t.decode(ids), c["decoded"].get<std::string>());
    EXPECT_EQ(t.decode(ids, true), c.value("decoded_skip_special", c["decoded"].get<std::string>()));
    EXPECT_EQ(t.pieces(text, true), c["pre_tokens"].get<std::vector<std::string>>());
    ++checked;
  }
  EXPECT_EQ(checked, 68);
}

TEST(Tokenizer, ParseSpecialOnlyAffectsSpecialTokens) {
  const Tokenizer& t = fixture("qwen3");
  const std::string text = "<|im_start|>user\nhi<think>x</think><|im_end|>";
  const auto with = t.encode(text, true);
  const auto without = t.encode(text, false);
  const int32_t im_start = *t.added_token_id("<|im_start|>"), think = *t.added_token_id("<think>");
  EXPECT_EQ(with.front(), im_start);
  EXPECT_EQ(std::count(without.begin(), without.end(), im_start), 0);
  // <think> is an added token but not special: matched either way.
  EXPECT_EQ(std::count(without.begin(), without.end(), think), 1);
  EXPECT_EQ(t.decode(without), text);
  EXPECT_GT(without.size(), with.size());
}

TEST(Tokenizer, LongPiecesTakeTheHeapPathAndRoundTrip) {
  const Tokenizer& t = fixture("qwen35-regex");
  // A piece far longer than the short-path limit, with varied pairs so many merges apply.
  std::string word;
  for (int i = 0; i < 600; ++i) word += "abracadabra"[i % 11];
  const auto ids = t.encode(word, true);
  EXPECT_EQ(t.decode(ids), word);
  EXPECT_LT(ids.size(), word.size() / 2);
  // The cache must not change results: encode twice, and inside a sentence.
  EXPECT_EQ(t.encode(word, true), ids);
}

TEST(Tokenizer, RejectsInvalidUtf8WithTheOffset) {
  const Tokenizer& t = fixture("qwen3");
  try {
    t.encode(std::string("ok\xC3("), true);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte offset 2"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, DecodeSkipsUndefinedIds) {
  const Tokenizer& t = fixture("qwen3");
  const std::vector<int32_t> ids = {9707, 151700, -1, 11};
  EXPECT_EQ(t.decode(ids), t.decode(std::vector<int32_t>{9707, 11}));
  EXPECT_FALSE(t.has_token(151700));
  EXPECT_TRUE(t.has_token(151643));
  EXPECT_TRUE(t.is_special(151643));
  EXPECT_FALSE(t.is_special(*t.added_token_id("<think>")));
}

// A minimal byte-level tokenizer.json with one merge, to vary one section at a time.
nlohmann::json tiny_tokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[bytes_to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  vocab["ab"] = 256;
  nlohmann::json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array({{"a", "b"}})}};
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+|\\S+"}}}, {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = {{{"id", 257}, {"content", "<x>"}, {"special", true}}};
  return j;
}

std::string load_error(const nlohmann::json& j) {
  try {
    Tokenizer::from_json_text(j.dump(), "test.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Tokenizer, TinyTokenizerMergesAndNormalizes) {
  const Tokenizer t = Tokenizer::from_json_text(tiny_tokenizer().dump(), "test.json");
  EXPECT_EQ(t.encode("ab ab<x>", true), (std::vector<int32_t>{256, ' ', 256, 257}));
  // NFD "e" + combining acute is composed to U+00E9 before BPE.
  EXPECT_EQ(t.encode("e\xCC\x81", true), (std::vector<int32_t>{0xC3, 0xA9}));
  EXPECT_EQ(t.id_limit(), 258);
}

// The reference's regex engine (Oniguruma) has Unicode 16 classes and the White_Space \s; PCRE2's
// own tables are Unicode 14 and its \s takes U+180E. Expected pieces and ids: the Rust library.
TEST(Tokenizer, SplitFollowsTheReferencesUnicode) {
  const Tokenizer& t = fixture("qwen35-regex");
  using Pieces = std::vector<std::string>;
  EXPECT_EQ(t.pieces("a\U00031350b", true), Pieces{"a\U00031350b"});  // CJK extension H (15.0): a letter
  EXPECT_EQ(t.encode("a\U00031350b", true), (std::vector<int32_t>{64, 172, 109, 235, 238, 65}));
  EXPECT_EQ(t.pieces("x\u180E  y", true), (Pieces{"x", "\u180E", " ", " y"}));  // U+180E is not a space
  EXPECT_EQ(t.encode("x\u180E  y", true), (std::vector<int32_t>{87, 123970, 236, 220, 379}));
  // Ol Onal (16.0): a letter and a mark join, digits go one by one.
  EXPECT_EQ(t.pieces("\U0001E5D0\U0001E5EE!\U0001E5F1\U0001E5F2", true),
            (Pieces{"\U0001E5D0\U0001E5EE", "!", "\U0001E5F1", "\U0001E5F2"}));
  EXPECT_EQ(t.pieces("\U00010940x", true), Pieces{"\U00010940x"});  // Sidetic (17.0): not a letter there yet
}

// Hugging Face normalizes with Unicode 9.0 data: later marks are starters there (no reordering, no
// composition across them), later compositions do not happen. Expected values: the Rust library.
TEST(Tokenizer, NfcFollowsUnicode9LikeTheReference) {
  const Normalizer nfc = Normalizer::from_json(nlohmann::json::parse(R"({"type": "NFC"})"));
  std::string storage;
  auto normalize = [&](const std::string& s) { return std::string(nfc.apply(s, storage)); };
  EXPECT_EQ(normalize("a\u1ABF\u0301"), "a\u1ABF\u0301");  // U+1ABF is Unicode 14
  EXPECT_EQ(normalize("a\u0301\u1ABF"), "\u00E1\u1ABF");
  EXPECT_EQ(normalize("a\u1DF6\u0316"), "a\u1DF6\u0316");                // no reordering (U+1DF6: 10.0)
  EXPECT_EQ(normalize("a\U0001E944\u0316"), "a\u0316\U0001E944");        // reordered (U+1E944: 9.0)
  EXPECT_EQ(normalize("\U00011935\U00011930"), "\U00011935\U00011930");  // a Unicode 13 composition
  EXPECT_EQ(normalize("e\u0301 x e\u0301"), "\u00E9 x \u00E9");
  EXPECT_EQ(normalize("plain ascii"), "plain ascii");
}

// The rewrite for the reference's Unicode keeps other property escapes, negations and quoting.
TEST(Tokenizer, SplitRegexRewriteKeepsOtherSyntax) {
  auto j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = R"(\p{Han}+|\P{L}+|\pL+|\Q[x]\E)";
  const Tokenizer t = Tokenizer::from_json_text(j.dump(), "test.json");
  using Pieces = std::vector<std::string>;
  EXPECT_EQ(t.pieces("你好ab12 \U00031350c", true), (Pieces{"你好", "ab", "12 ", "\U00031350c"}));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = R"([\]\s]+|[^\S\n]+|[[:digit:]]+)";
  const Tokenizer u = Tokenizer::from_json_text(j.dump(), "test.json");
  EXPECT_EQ(u.pieces("a] \n 12", true), (Pieces{"a", "] \n ", "12"}));
}

TEST(Tokenizer, RefusesWhatItDoesNotSupport) {
  auto j = tiny_tokenizer();
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_NE(load_error(j).find("normalizer type \"Lowercase\""), std::string::npos) << load_error(j);

  j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_NE(load_error(j).find("pre-tokenizer type \"Whitespace\""), std::string::npos) << load_error(j);

  j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  EXPECT_NE(load_error(j).find("Split behavior \"Removed\""), std::string::npos) << load_error(j);

  j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  EXPECT_NE(load_error(j).find("cannot compile the split regex"), std::string::npos) << load_error(j);

  j = tiny_tokenizer();
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(load_error(j).find("model type \"WordPiece\""), std::string::npos) << load_error(j);

  j = tiny_tokenizer();
  j["model"]["merges"].push_back({"a", "zz"});
  EXPECT_NE(load_error(j).find("not in the vocabulary"), std::string::npos) << load_error(j);

  j = tiny_tokenizer();
  j["added_tokens"][0]["lstrip"] = true;
  EXPECT_NE(load_error(j).find("lstrip=true"), std::string::npos) << load_error(j);

  j = tiny_tokenizer();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_NE(load_error(j).find("decoder type \"WordPiece\""), std::string::npos) << load_error(j);

  j = tiny_tokenizer();
  j["model"]["dropout"] = "high";
  EXPECT_NE(load_error(j).find("test.json: "), std::string::npos) << load_error(j);

  EXPECT_NE(load_error(nlohmann::json::object()).find("test.json: no \"model\" object"), std::string::npos);
}

}  // namespace
}  // namespace qwick
