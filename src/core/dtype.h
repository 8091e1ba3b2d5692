// Element types as safetensors names them, with their storage size in bits.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace qwick {

enum class DType : uint8_t {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kC64,
  kF8_E5M2,
  kF8_E4M3,
  kF8_E8M0,
  kF6_E2M3,
  kF6_E3M2,
  kF4,
};

// Storage size of one element in bits (4 and 6 for the packed float formats).
int dtype_bits(DType t);
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);
bool is_float_dtype(DType t);  // F16, BF16, F32 (the float types the engine computes from)

}  // namespace qwick
