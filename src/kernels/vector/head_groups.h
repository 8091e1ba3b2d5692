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

// f(g0, G) for each group of heads [g0, g0 + G) of n_heads, G a std::integral_constant.
template <typename F>
void for_head_groups(int n_heads, F&& f) {
  for (int g0 = 0; g0 < n_heads; g0 += kMaxHeadGroup)
    with_head_group(n_heads - g0, [&](auto G) { f(g0, G); });
}

}  // namespace qwick
