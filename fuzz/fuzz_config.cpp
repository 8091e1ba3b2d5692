// libFuzzer target: arbitrary text through the config.json and generation_config.json readers.
// Every input must either parse or throw qwick::Error. Seeds: the fixture config.json files.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const qwick::ModelConfig c = qwick::parse_model_config(text, "fuzz/config.json");
    (void)c.conv_channels();
  } catch (const qwick::Error&) {
  }
  try {
    qwick::parse_generation_config(text, "fuzz/generation_config.json");
  } catch (const qwick::Error&) {
  }
  return 0;
}
