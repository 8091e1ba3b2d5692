#include "core/cpu_features.h"

#include <atomic>
#include <cstdlib>

#include "core/error.h"

namespace qwick {
namespace {

std::atomic<int> g_active{-1};

}  // namespace

std::string_view simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return "scalar";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
  }
  return "?";
}

SimdLevel detected_simd_level() {
  // libgcc's checks include the OS-enabled register state (XCR0), not only the CPUID bits. F16C is
  // not asked for: every CPU with AVX2 has it (Intel since Ivy Bridge, AMD since Piledriver), and
  // clang's builtin does not know the name.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16") &&
      __builtin_cpu_supports("fma"))
    return SimdLevel::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdLevel::kAvx2;
  return SimdLevel::kScalar;
}

SimdLevel parse_simd_level(std::string_view name) {
  if (name == "scalar") return SimdLevel::kScalar;
  if (name == "avx2") return SimdLevel::kAvx2;
  if (name == "avx512") return SimdLevel::kAvx512;
  fail("unknown SIMD level \"{}\" (expected scalar, avx2 or avx512)", name);
}

void set_active_simd_level(SimdLevel level) {
  if (static_cast<int>(level) > static_cast<int>(detected_simd_level()))
    fail("SIMD level {} is not supported by this CPU (best: {})", simd_level_name(level),
         simd_level_name(detected_simd_level()));
  g_active.store(static_cast<int>(level));
}

SimdLevel active_simd_level() {
  int v = g_active.load();
  if (v < 0) {
    const char* env = std::getenv("QWICK_SIMD");
    SimdLevel level = detected_simd_level();
    if (env != nullptr && *env != '\0') {
      level = parse_simd_level(env);
      set_active_simd_level(level);  // validates against the CPU
    }
    g_active.store(static_cast<int>(level));
    v = static_cast<int>(level);
  }
  return static_cast<SimdLevel>(v);
}

}  // namespace qwick
