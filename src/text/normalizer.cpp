#include "text/normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <memory>

#include "core/error.h"
#include "text/nfc_unicode9_table.h"
#include "text/utf8.h"

namespace qwick {
namespace {

// Adds the normalizers in `config` to `nfc`, refusing everything but NFC.
void collect(const nlohmann::json& config, bool* nfc) {
  if (config.is_null()) return;
  const std::string type = config.value("type", "");
  if (type == "NFC") {
    *nfc = true;
  } else if (type == "Sequence" && config.contains("normalizers") && config["normalizers"].is_array()) {
    for (const auto& step : config["normalizers"]) collect(step, nfc);
  } else {
    fail("normalizer type \"{}\" is not supported (supported: NFC, or a Sequence of it)", type);
  }
}

bool normalizing_after_unicode9(char32_t cp) {
  if (cp < kNormalizingAfterUnicode9[0].first) return false;
  const auto* end = std::end(kNormalizingAfterUnicode9);
  const auto* it = std::upper_bound(std::begin(kNormalizingAfterUnicode9), end, cp,
                                    [](char32_t c, const CodePointRange& r) { return c < r.first; });
  return it != std::begin(kNormalizingAfterUnicode9) && cp <= (it - 1)->last;
}

void append_nfc(std::string_view text, std::string& out) {
  if (text.empty()) return;
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &result,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  if (n < 0) fail("NFC normalization failed: {}", utf8proc_errmsg(n));
  out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& config) {
  Normalizer n;
  collect(config, &n.nfc_);
  return n;
}

std::string_view Normalizer::apply(std::string_view text, std::string& storage) const {
  if (!nfc_) return text;
  bool may_change = false;
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0xCC) {
      may_change = true;
      break;
    }
  if (!may_change) return text;
  // Characters newer than Unicode 9.0 that normalization would touch split the text; each piece
  // between them is normalized on its own and they stay as written.
  storage.clear();
  size_t piece = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    if (!normalizing_after_unicode9(decode_utf8(text, pos))) continue;
    append_nfc(text.substr(piece, start - piece), storage);
    storage.append(text.substr(start, pos - start));
    piece = pos;
  }
  append_nfc(text.substr(piece), storage);
  return storage;
}

}  // namespace qwick
