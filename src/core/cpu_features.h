// Which SIMD kernels this CPU can run, and which the engine uses.
//
// QWICK_SIMD=scalar|avx2|avx512 forces a level (tests run every path on one machine this way);
// asking for a level the CPU lacks is an error rather than a crash.
#pragma once

#include <string_view>

namespace qwick {

enum class SimdLevel { kScalar, kAvx2, kAvx512 };

std::string_view simd_level_name(SimdLevel level);
SimdLevel detected_simd_level();  // the best level the CPU (and OS) support
SimdLevel active_simd_level();    // detected, or the QWICK_SIMD override; read once
// For tests and benchmarks: switch every dispatcher to `level` (must be supported).
void set_active_simd_level(SimdLevel level);
SimdLevel parse_simd_level(std::string_view name);  // throws Error on an unknown name

// The one of a kernel's three builds that runs at `level`.
template <class T>
constexpr T by_simd_level(SimdLevel level, T avx512, T avx2, T scalar) {
  return level == SimdLevel::kAvx512 ? avx512 : level == SimdLevel::kAvx2 ? avx2 : scalar;
}

}  // namespace qwick
