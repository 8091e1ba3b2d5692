// libFuzzer target: arbitrary bytes through the safetensors reader. Every input must either parse
// or throw qwick::Error; anything else (a crash, a sanitizer report, another exception) is a bug.
// Seeds: the fixture shards (tests/fixtures/reference/*/*/*.safetensors).
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto file = qwick::SafetensorsFile::parse(std::span<const uint8_t>(data, size), "fuzz.safetensors");
    size_t sum = 0;
    for (const auto& t : file->tensors())  // touch every tensor's bytes: offsets must be in bounds
      for (size_t i = 0; i < t.nbytes; i += 4096) sum += t.data[i];
    (void)sum;
  } catch (const qwick::Error&) {
  }
  return 0;
}
