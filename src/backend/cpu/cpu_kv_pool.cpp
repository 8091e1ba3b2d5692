#include "backend/cpu/cpu_kv_pool.h"

#include <algorithm>

#include "core/error.h"

namespace qwick {

std::vector<KvRowRun> kv_row_runs(std::span<const int32_t> blocks, int64_t n) {
  std::vector<KvRowRun> out;
  for (int64_t p = 0; p < n;) {
    const int64_t count = blocks.empty() ? n : std::min(kKvBlockRows, n - p);
    const int64_t row = KvRows{nullptr, blocks}.row(p);
    if (!out.empty() && out.back().row + out.back().count == row)
      out.back().count += count;
    else
      out.push_back({row, count});
    p += count;
  }
  return out;
}

std::vector<KvRowRun> KvRows::runs(int64_t n) const {
  return kv_row_runs(blocks, n);
}

KvBlockPool::KvBlockPool(const ModelConfig& cfg, KvDtype dtype, int64_t tokens, int sequences)
    : n_blocks_(blocks_for(tokens) + sequences - 1) {
  for (LayerKind kind : cfg.layers)
    if (kind == LayerKind::kAttention) layers_.emplace_back(dtype, cfg.n_kv_heads, cfg.head_dim);
  for (int64_t b = 0; b < n_blocks_; ++b) free_.insert(static_cast<int32_t>(b));
}

void KvBlockPool::grow(std::vector<int32_t>& table, int64_t n) {
  const int64_t need = blocks_for(n) - static_cast<int64_t>(table.size());
  if (need <= 0) return;
  if (need > free_blocks())
    fail(
        "the KV pool is full: {} more blocks of {} positions are needed and {} of its {} are free (the "
        "sequences share the context size)",
        need, kKvBlockRows, free_blocks(), n_blocks_);
  for (int64_t i = 0; i < need; ++i) {
    const int32_t b = *free_.begin();
    free_.erase(free_.begin());
    table.push_back(b);
    for (KvCache& cache : layers_) cache.reserve((b + 1) * kKvBlockRows, n_blocks_ * kKvBlockRows);
  }
}

void KvBlockPool::shrink(std::vector<int32_t>& table, int64_t n) {
  while (static_cast<int64_t>(table.size()) > blocks_for(n)) {
    free_.insert(table.back());
    table.pop_back();
  }
}

}  // namespace qwick
