// Streaming detokenizer: token ids in, text out as soon as it is whole UTF-8.
//
// A character can be split across tokens (byte-level BPE cuts anywhere), so the bytes of an
// unfinished multi-byte sequence at the end are held back until the token that completes it.
// Bytes that can never become valid are replaced by U+FFFD, each maximal invalid subpart once, so
// the concatenated output equals utf8_lossy(decode(all ids)) however the ids arrive.
//
// Tested in tests/text/stream_decoder_test.cpp (emoji split over tokens, invalid bytes, the
// concatenation property over random byte tokens).
#pragma once

#include <cstdint>
#include <string>

#include "text/tokenizer.h"

namespace qwick {

class StreamDecoder {
 public:
  // `skip_control`: control tokens (Tokenizer::is_control) give no text.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_control = false)
      : tokenizer_(&tokenizer), skip_control_(skip_control) {}

  // Text completed by this token (valid UTF-8, possibly empty).
  std::string push(int32_t id);
  // End of the stream: an unfinished sequence left over becomes U+FFFD.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_control_;
  std::string pending_;  // bytes not yet returned: at most an unfinished sequence
};

}  // namespace qwick
