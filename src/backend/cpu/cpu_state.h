// Sequence state on the CPU: what a conversation carries from one token to the next.
//
//   attention layers: KV rows in the backend's block pool (cpu_kv_pool.h); the sequence holds the
//                     table of its blocks. A KvCache stores the rows: per kv head a [capacity, head_dim]
//                     array of keys and one of values (bf16 by default; f32 on request for exact
//                     comparisons; q8: kv_q8.h's bytes plus a [capacity] array of f32 scales for each)
//   DeltaNet layers:  conv window  [K-1, channels]  the last K-1 pre-conv qkv rows, f32
//                     recurrent S  [Hv, Dv, Dk]     f32 (rounding accumulates over long sequences)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "kernels/attention/attention.h"
#include "model/config.h"

namespace qwick {

// Consecutive rows [row, row + count) of a KvCache.
struct KvRowRun {
  int64_t row = 0, count = 0;
};

class KvCache {
 public:
  KvCache(KvDtype dtype, int n_kv_heads, int head_dim);
  // Makes room for positions [0, n); grows by doubling (never past `limit`), keeping what is stored.
  void reserve(int64_t n, int64_t limit);
  // Stores one position's keys and values ([n_kv_heads, head_dim] each), rounding to the cache type.
  void write(int64_t pos, const float* k, const float* v);
  // Head `kv_head`'s rows from `first_row` on.
  KvHeadView head(int kv_head, int64_t first_row = 0) const;
  int64_t capacity() const { return capacity_; }

  // The rows of `runs`, in order, of head `kv_head` copied to `dst` (gather_bytes(rows) of 64-byte
  // aligned memory) and shown there as one view: how attention reads a sequence whose blocks are
  // not adjacent.
  size_t gather_bytes(int64_t rows) const;
  KvHeadView gather(int kv_head, std::span<const KvRowRun> runs, uint8_t* dst) const;

  // The rows of `runs` of every head, plane by plane (keys, values, then kQ8's key and value
  // scales), and back into rows already reserved. save(n) / load(.., n, limit) take rows [0, n).
  std::vector<uint8_t> save(std::span<const KvRowRun> runs) const;
  void load(const std::vector<uint8_t>& rows, std::span<const KvRowRun> runs);
  std::vector<uint8_t> save(int64_t n) const;
  void load(const std::vector<uint8_t>& rows, int64_t n, int64_t limit);

 private:
  // The arrays a position has a row in; the scales are kQ8's (one f32 a row), empty for the others.
  enum Plane { kKeys, kValues, kKeyScales, kValueScales, kPlanes };
  size_t row_bytes(int plane) const;  // one position's bytes in one head of `plane`
  size_t offset(int plane, int kv_head, int64_t pos) const {
    return static_cast<size_t>(kv_head * capacity_ + pos) * row_bytes(plane);
  }
  KvDtype dtype_;
  int n_kv_heads_, head_dim_;
  int64_t capacity_ = 0;
  AlignedBuffer<uint8_t> planes_[kPlanes];  // each [n_kv_heads, capacity, row_bytes(plane)]
};

struct DeltaNetState {
  AlignedBuffer<float> conv;       // [K-1, channels]
  AlignedBuffer<float> recurrent;  // [Hv, Dv, Dk]
};

struct CpuSequence {
  explicit CpuSequence(const ModelConfig& cfg);
  void clear();  // back to an empty sequence (the caller returns its blocks to the pool)
  void copy_deltanet_from(const std::vector<DeltaNetState>& other);
  // Makes room in row_states for a step of `rows` rows.
  void reserve_row_states(int64_t rows);
  // Makes the state after row `row` of the last step the live DeltaNet state.
  void keep_row(int64_t row);

  int64_t position = 0;
  std::vector<int> slot;        // per layer: index into the KV pool's layers or into deltanet
  std::vector<int32_t> blocks;  // the KV pool's blocks holding positions [0, blocks * block rows)
  std::vector<DeltaNetState> deltanet;
  // Per DeltaNet layer, the state after each row of the last multi-row step (Backend::step), so
  // that the step can be committed up to any of its rows.
  std::vector<std::vector<DeltaNetState>> row_states;
};

}  // namespace qwick
