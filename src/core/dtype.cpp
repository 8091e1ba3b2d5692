#include "core/dtype.h"

#include <array>
#include <utility>

namespace qwick {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  int bits;
};

constexpr std::array<DTypeInfo, 20> kDTypes{{
    {DType::kBool, "BOOL", 8},       {DType::kU8, "U8", 8},           {DType::kI8, "I8", 8},
    {DType::kI16, "I16", 16},        {DType::kU16, "U16", 16},        {DType::kF16, "F16", 16},
    {DType::kBF16, "BF16", 16},      {DType::kI32, "I32", 32},        {DType::kU32, "U32", 32},
    {DType::kF32, "F32", 32},        {DType::kF64, "F64", 64},        {DType::kI64, "I64", 64},
    {DType::kU64, "U64", 64},        {DType::kC64, "C64", 64},        {DType::kF8_E5M2, "F8_E5M2", 8},
    {DType::kF8_E4M3, "F8_E4M3", 8}, {DType::kF8_E8M0, "F8_E8M0", 8}, {DType::kF6_E2M3, "F6_E2M3", 6},
    {DType::kF6_E3M2, "F6_E3M2", 6}, {DType::kF4, "F4", 4},
}};

const DTypeInfo& info(DType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d;
  return kDTypes[0];  // unreachable: every enumerator is listed above
}

}  // namespace

int dtype_bits(DType t) {
  return info(t).bits;
}
std::string_view dtype_name(DType t) {
  return info(t).name;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& d : kDTypes)
    if (d.name == name) return d.type;
  return std::nullopt;
}

bool is_float_dtype(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32;
}

}  // namespace qwick
