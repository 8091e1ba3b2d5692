// The GPT-2 byte-to-unicode map that byte-level BPE vocabularies are written in.
//
// Every byte gets a printable code point: the printable Latin-1 bytes map to themselves and the
// other 68 bytes (controls, space, DEL, NBSP, soft hyphen) to U+0100.. in byte order. Vocabulary
// and merge strings in tokenizer.json use these characters; the engine itself works on raw bytes
// and converts only when loading or writing such a file.
//
// Tested in tests/text/tokenizer_test.cpp (round trip over all 256 bytes, known entries).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace qwick {

char32_t byte_to_unicode(unsigned char byte);

// Raw bytes -> the byte-level string (each byte one character).
std::string bytes_to_byte_level(std::string_view bytes);
// The byte-level string -> raw bytes; nullopt when a character is not in the map.
std::optional<std::string> byte_level_to_bytes(std::string_view text);

}  // namespace qwick
