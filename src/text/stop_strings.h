// Stop strings over streamed text: the text before the first stop string passes, the stop string
// and everything after it do not, and text that could still turn into a stop string is held back
// until it is known either way (so a client never sees part of a stop string).
//
// Works on whole UTF-8 (what StreamDecoder emits); a held-back tail always starts on a character
// boundary, because stop strings are valid UTF-8 too.
//
// Tested in tests/text/stop_strings_test.cpp (fed whole, byte by byte and in random chunks).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qwick {

class StopStrings {
 public:
  // Empty strings are ignored.
  explicit StopStrings(std::vector<std::string> stops);

  // Appends `text`; returns what is now certain to come before any stop string. Once a stop
  // string has appeared, stopped() is true and everything from it on is dropped.
  std::string feed(std::string_view text);
  // End of the stream: the held-back tail (it did not become a stop string).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that stopped the stream (the one that starts first, the first listed
  // of those starting together); empty while not stopped.
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace qwick
