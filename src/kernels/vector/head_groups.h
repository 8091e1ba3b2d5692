// Grouped-query attention runs the query heads of a kv head in groups of up to 8, each group
// through kernels templated on its size (so the per-head accumulators stay in registers).
#pragma once

#include <type_traits>

namespace qwick {

inline constexpr int kMaxHeadGroup = 8;

// f(std::integral_constant<int, G>{}) for G = min(n, kMaxHeadGroup), n >= 1.
template <typename F>
void with_head_group(int n, F&& f) {
  switch (n >= kMaxHeadGroup ? kMaxHeadGroup : n) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 5:
      return f(std::integral_constant<int, 5>{});
    case 6:
      return f(std::integral_constant<int, 6>{});
    case 7:
      return f(std::integral_constant<int, 7>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

}  // namespace qwick
