// UTF-8 helpers: validation, the streaming boundary, lossy repair (maximal subparts), Python's
// whitespace and strip().
#include <gtest/gtest.h>

#include "text/utf8.h"

namespace qwick {
namespace {

TEST(Utf8, FindsTheFirstInvalidByte) {
  EXPECT_TRUE(is_valid_utf8("plain, caf\xC3\xA9, \xF0\x9F\x98\x80"));
  EXPECT_EQ(find_invalid_utf8("ab\x80"), 2u);            // stray continuation
  EXPECT_EQ(find_invalid_utf8("\xC0\xAF"), 0u);          // overlong
  EXPECT_EQ(find_invalid_utf8("x\xED\xA0\x80"), 1u);     // surrogate
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(find_invalid_utf8("ok\xE2\x82"), 2u);        // cut short
}

TEST(Utf8, DecodesAndEncodes) {
  const std::string s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";
  size_t pos = 0;
  std::u32string cps;
  while (pos < s.size()) cps.push_back(decode_utf8(s, pos));
  EXPECT_EQ(cps, U"a\u00E9\u20AC\U0001F600");
  std::string back;
  for (char32_t c : cps) append_utf8(back, c);
  EXPECT_EQ(back, s);
}

TEST(Utf8, CompletePrefixHoldsBackOnlyAnUnfinishedCharacter) {
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(utf8_complete_prefix("\xE2"), 0u);
  // Never valid, so nothing to wait for.
  EXPECT_EQ(utf8_complete_prefix("ab\xFF"), 3u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE0\x80"), 4u);  // E0 80 is overlong already
  EXPECT_EQ(utf8_complete_prefix("\xE2\x82\x41"), 3u);
}

TEST(Utf8, LossyReplacesEachMaximalSubpart) {
  EXPECT_EQ(utf8_lossy("ok"), "ok");
  EXPECT_EQ(utf8_lossy("a\xE2\x82"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");                                                 // one subpart
  EXPECT_EQ(utf8_lossy("\xE0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // two
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");          // cut short at the end
  EXPECT_EQ(utf8_lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Utf8, PythonWhitespace) {
  EXPECT_TRUE(is_python_space(0x1C));
  EXPECT_TRUE(is_python_space(0x85));
  EXPECT_TRUE(is_python_space(0x3000));
  EXPECT_FALSE(is_python_space(0xFEFF));
  EXPECT_FALSE(is_python_space(0x200B));
  EXPECT_EQ(python_strip(" \t\xE3\x80\x80 x y\xC2\x85\n"), "x y");
  EXPECT_EQ(python_strip("\xEF\xBB\xBFx"), "\xEF\xBB\xBFx");
  EXPECT_EQ(python_strip("  "), "");
}

}  // namespace
}  // namespace qwick
