// The element type of an attention KV cache: a storage format of the sequence state that every layer
// above core names (the CLI's --kv-type, the backends, the attention kernels, the cost model).
#pragma once

#include <cstddef>

namespace qwick {

// kQ8: a byte a value and one f32 scale a row (kernels/attention/kv_q8.h's rows).
enum class KvDtype { kBF16, kF32, kQ8 };

// Bytes one stored value takes in a cache of type t (a kQ8 row also has its f32 scale).
constexpr size_t kv_value_bytes(KvDtype t) {
  return t == KvDtype::kF32 ? 4 : t == KvDtype::kBF16 ? 2 : 1;
}
// Bytes one position's keys (or values) of one kv head take, a kQ8 row's scale included.
constexpr size_t kv_row_bytes(KvDtype t, int head_dim) {
  return static_cast<size_t>(head_dim) * kv_value_bytes(t) + (t == KvDtype::kQ8 ? sizeof(float) : 0);
}

}  // namespace qwick
