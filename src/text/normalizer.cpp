#include "text/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

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
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (n < 0) fail("NFC normalization failed: {}", utf8proc_errmsg(n));
  storage.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  return storage;
}

}  // namespace qwick
