// The CPU backend's attention KV memory: one pool of fixed-size blocks shared by its sequences.
//
// A block holds kKvBlockRows consecutive positions of one sequence in every attention layer. Block b
// is rows [b * kKvBlockRows, (b + 1) * kKvBlockRows) of each layer's KvCache, which grows (by
// doubling) as higher blocks come into use; the lowest free block is handed out first, so a lone
// sequence's blocks stay adjacent and attention reads them in place. A sequence keeps the table of
// its blocks (CpuSequence::blocks): position p lives in block blocks[p / kKvBlockRows].
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <vector>

#include "backend/cpu/cpu_state.h"
#include "model/config.h"

namespace qwick {

inline constexpr int64_t kKvBlockRows = 64;

// Where one attention layer keeps one sequence's rows: `cache`, through the block table `blocks`
// (empty: position p is row p, as in the MTP head's own cache).
struct KvRows {
  KvCache* cache = nullptr;
  std::span<const int32_t> blocks;

  int64_t row(int64_t position) const {
    if (blocks.empty()) return position;
    return blocks[static_cast<size_t>(position / kKvBlockRows)] * kKvBlockRows + position % kKvBlockRows;
  }
  std::vector<KvRowRun> runs(int64_t n) const;  // kv_row_runs of this table
};

// Positions [0, n) of the block table `blocks` (empty: position p is row p) as runs of adjacent cache
// rows: one run when the blocks are adjacent.
std::vector<KvRowRun> kv_row_runs(std::span<const int32_t> blocks, int64_t n);

class KvBlockPool {
 public:
  // Room for any `sequences` sequences whose lengths add up to `tokens`: the blocks `tokens` fill, plus
  // one for each sequence but the first, as each may leave its last block part empty.
  KvBlockPool(const ModelConfig& cfg, KvDtype dtype, int64_t tokens, int sequences);

  int64_t blocks() const { return n_blocks_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  static int64_t blocks_for(int64_t positions) { return (positions + kKvBlockRows - 1) / kKvBlockRows; }

  KvCache& layer(int attention_layer) { return layers_[static_cast<size_t>(attention_layer)]; }
  const KvCache& layer(int attention_layer) const { return layers_[static_cast<size_t>(attention_layer)]; }
  KvRows rows(int attention_layer, const std::vector<int32_t>& table) {
    return KvRows{&layer(attention_layer), table};
  }

  // Adds blocks to `table` until it holds positions [0, n). Throws Error, leaving `table` and the pool
  // as they were, when too few blocks are free.
  void grow(std::vector<int32_t>& table, int64_t n);
  // Returns the blocks of `table` past those positions [0, n) need.
  void shrink(std::vector<int32_t>& table, int64_t n);

 private:
  int64_t n_blocks_;
  std::vector<KvCache> layers_;  // per attention layer
  std::set<int32_t> free_;       // ordered: the lowest free block goes first
};

}  // namespace qwick
