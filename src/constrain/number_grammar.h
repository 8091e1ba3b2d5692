// GBNF for numbers within JSON Schema bounds (minimum, maximum, exclusiveMinimum,
// exclusiveMaximum, in both the draft-04 boolean form and the later numeric one).
//
// Integers: any bounds, built digit by digit (the numbers of d digits at or above a bound are the
// ones whose first differing digit is larger), at most 16 digits. Non-integers: integer-valued
// bounds at or above 0, written without exponent; other bounds are refused.
//
// Tested in tests/constrain/json_schema_test.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace qwick {

// nullopt when `s` has no bounds.
std::optional<std::string> bounded_number(const nlohmann::ordered_json& s, bool integer,
                                          const std::string& path);

// GBNF for the integers in [lo, hi] (either side may be open: nullopt).
std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace qwick
