// UTF-8 helpers the text path shares: validation, code point decoding, the longest prefix that
// ends on a character boundary (streaming), lossy repair, and Python's notion of whitespace.
//
// Tested in tests/text/utf8_test.cpp (boundaries, every invalid-sequence class, U+FFFD policy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace qwick {

// Offset of the first byte that does not start a valid UTF-8 sequence, or npos when all is valid.
// Overlong forms, surrogates and code points past U+10FFFF are invalid, as in RFC 3629.
size_t find_invalid_utf8(std::string_view text);
inline bool is_valid_utf8(std::string_view text) {
  return find_invalid_utf8(text) == std::string_view::npos;
}

// Decodes the code point at `pos` of valid UTF-8 and advances `pos` past it.
char32_t decode_utf8(std::string_view text, size_t& pos);
void append_utf8(std::string& out, char32_t cp);

// Length of the longest prefix of `bytes` that does not end inside an incomplete (but so far valid)
// multi-byte sequence. Bytes that can never become valid count as complete: they are not worth
// waiting for.
size_t utf8_complete_prefix(std::string_view bytes);

// Valid UTF-8 with each maximal invalid subpart replaced by U+FFFD (the Unicode recommendation,
// what Rust's String::from_utf8_lossy and Python's errors="replace" do).
std::string utf8_lossy(std::string_view bytes);

// Python's str.isspace() for one code point (what Jinja's |trim and str.strip() remove).
bool is_python_space(char32_t cp);
// Python's str.strip() with no argument.
std::string_view python_strip(std::string_view text);

}  // namespace qwick
