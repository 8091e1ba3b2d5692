// Stop strings over streamed text: the same output fed whole, byte by byte and in random chunks
// gives the same text, the stop string never leaks, and held-back text is released when it
// cannot become a stop string.
#include <gtest/gtest.h>

#include <random>

#include "text/stop_strings.h"

namespace qwick {
namespace {

struct Outcome {
  std::string text;
  bool stopped;
};

Outcome run(const std::vector<std::string>& stops, const std::vector<std::string>& chunks) {
  StopStrings s(stops);
  Outcome o{"", false};
  for (const auto& c : chunks) {
    o.text += s.feed(c);
    if (s.stopped()) break;
  }
  o.text += s.flush();
  o.stopped = s.stopped();
  return o;
}

Outcome run_all_ways(const std::vector<std::string>& stops, const std::string& text) {
  const Outcome whole = run(stops, {text});
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  std::mt19937 rng(static_cast<unsigned>(text.size()));
  std::vector<std::string> random;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = std::min<size_t>(text.size() - pos, 1 + rng() % 5);
    random.push_back(text.substr(pos, n));
    pos += n;
  }
  for (const auto* chunks : {&bytes, &random}) {
    const Outcome o = run(stops, *chunks);
    EXPECT_EQ(o.text, whole.text) << text;
    EXPECT_EQ(o.stopped, whole.stopped) << text;
  }
  return whole;
}

TEST(StopStrings, CutsBeforeTheFirstStopString) {
  Outcome o = run_all_ways({"STOP", "\n\n"}, "one two STOP three");
  EXPECT_EQ(o.text, "one two ");
  EXPECT_TRUE(o.stopped);
  o = run_all_ways({"STOP", "\n\n"}, "line\n\nnext STOP");
  EXPECT_EQ(o.text, "line");
  // Overlapping candidates: "abc" inside "ababc".
  o = run_all_ways({"abc"}, "xxababcyy");
  EXPECT_EQ(o.text, "xxab");
  o = run_all_ways({"héllo wörld"}, "say héllo wörld!");
  EXPECT_EQ(o.text, "say ");
}

TEST(StopStrings, ReleasesWhatDidNotBecomeAStopString) {
  Outcome o = run_all_ways({"STOP"}, "STO STOP? no: ST");
  EXPECT_EQ(o.text, "STO ");
  o = run_all_ways({"STOP"}, "ends with ST");
  EXPECT_EQ(o.text, "ends with ST");
  EXPECT_FALSE(o.stopped);
  o = run_all_ways({}, "no stops at all");
  EXPECT_EQ(o.text, "no stops at all");
  o = run_all_ways({""}, "empty stop strings are ignored");
  EXPECT_FALSE(o.stopped);
}

TEST(StopStrings, HoldsBackOnlyAPossibleStart) {
  StopStrings s({"</answer>"});
  EXPECT_EQ(s.feed("the answer is 4</"), "the answer is 4");
  EXPECT_EQ(s.feed("ans"), "");
  EXPECT_EQ(s.feed("wer> more"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.feed("ignored"), "");
  StopStrings t({"</answer>"});
  EXPECT_EQ(t.feed("a </an"), "a ");
  EXPECT_EQ(t.feed("d"), "</and");
}

TEST(StopStrings, NamesTheStopStringThatMatched) {
  StopStrings s({"END", "\n\n"});
  EXPECT_EQ(s.matched(), "");
  s.feed("first\n\nthen END");
  EXPECT_EQ(s.matched(), "\n\n");  // the earliest in the text, not the first listed
  StopStrings t({"ab", "a"});
  t.feed("xab");
  EXPECT_EQ(t.matched(), "ab");  // starting together: the first listed
  StopStrings u({"END"});
  u.feed("EN");
  u.feed("D");
  EXPECT_EQ(u.matched(), "END");
}

}  // namespace
}  // namespace qwick
