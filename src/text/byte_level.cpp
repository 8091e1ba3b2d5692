#include "text/byte_level.h"

#include <array>

#include "text/utf8.h"

namespace qwick {
namespace {

bool maps_to_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> to_unicode{};
  std::array<int, 324> from_unicode{};  // code points used are all below U+0144; -1 = unused
  Tables() {
    from_unicode.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_unicode[b] = maps_to_itself(b) ? static_cast<char32_t>(b) : next++;
      from_unicode[to_unicode[b]] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_unicode(unsigned char byte) {
  return tables().to_unicode[byte];
}

std::string bytes_to_byte_level(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, t.to_unicode[static_cast<unsigned char>(c)]);
  return out;
}

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  if (!is_valid_utf8(text)) return std::nullopt;
  const Tables& t = tables();
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const char32_t cp = decode_utf8(text, pos);
    if (cp >= t.from_unicode.size() || t.from_unicode[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(t.from_unicode[cp]));
  }
  return out;
}

}  // namespace qwick
