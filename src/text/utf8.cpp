#include "text/utf8.h"

namespace qwick {
namespace {

// Length of the valid sequence starting at `p` (1-4), or 0 when the bytes at `p` are not valid.
// `n` bytes are available. `*need` gets the full length a valid lead byte announces, so a caller
// can tell "invalid" from "valid so far but cut short" (return 0 with *need > n).
size_t sequence_length(const unsigned char* p, size_t n, size_t* need) {
  const unsigned char b = p[0];
  *need = 1;
  if (b < 0x80) return 1;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    *need = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    *need = 3;
    if (b == 0xE0) lo = 0xA0;  // no overlongs
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    *need = 4;
    if (b == 0xF0) lo = 0x90;  // no overlongs
    if (b == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    *need = 0;  // never a lead byte
    return 0;
  }
  for (size_t i = 1; i < *need; ++i) {
    if (i >= n) return 0;
    const unsigned char c = p[i];
    if (i == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) {
      *need = i;  // the invalid subpart ends before this byte
      return 0;
    }
  }
  return *need;
}

}  // namespace

size_t find_invalid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    size_t need = 0;
    const size_t len = sequence_length(p + i, n - i, &need);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

char32_t decode_utf8(std::string_view text, size_t& pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  const unsigned char b = p[0];
  if (b < 0x80) {
    pos += 1;
    return b;
  }
  if (b < 0xE0) {
    pos += 2;
    return (char32_t{b & 0x1Fu} << 6) | (p[1] & 0x3Fu);
  }
  if (b < 0xF0) {
    pos += 3;
    return (char32_t{b & 0x0Fu} << 12) | (char32_t{p[1] & 0x3Fu} << 6) | (p[2] & 0x3Fu);
  }
  pos += 4;
  return (char32_t{b & 0x07u} << 18) | (char32_t{p[1] & 0x3Fu} << 12) | (char32_t{p[2] & 0x3Fu} << 6) |
         (p[3] & 0x3Fu);
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t utf8_complete_prefix(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  // Only the last three bytes can belong to an unfinished sequence.
  const size_t from = n > 3 ? n - 3 : 0;
  for (size_t i = from; i < n; ++i) {
    if (p[i] < 0xC2 || p[i] > 0xF4) continue;  // not a lead byte
    size_t need = 0;
    // Cut short by the end of the buffer (rather than invalid): sequence_length then reports
    // the full length the lead byte announced.
    if (sequence_length(p + i, n - i, &need) == 0 && i + need > n) return i;
  }
  return n;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      out.push_back(static_cast<char>(p[i++]));
      continue;
    }
    size_t need = 0;
    const size_t len = sequence_length(p + i, n - i, &need);
    if (len > 0) {
      out.append(bytes.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      // A maximal subpart: a valid lead byte and the valid continuation bytes after it.
      i += need == 0 ? 1 : std::min(need, n - i);
    }
  }
  return out;
}

bool is_python_space(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string_view python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t pos = begin;
    if (!is_python_space(decode_utf8(text, pos))) break;
    begin = pos;
  }
  size_t end = begin;
  for (size_t pos = begin; pos < text.size();) {
    if (!is_python_space(decode_utf8(text, pos))) end = pos;
  }
  return text.substr(begin, end - begin);
}

}  // namespace qwick
