// Byte-level BPE: the vocabulary and ranked merges of tokenizer.json's "model", and encoding one
// pre-tokenized piece into ids.
//
// The model works on raw bytes: vocabulary strings are converted from the GPT-2 byte-level
// characters once, at load. A piece starts as one symbol per byte; the adjacent pair with the
// lowest merge rank (leftmost on a tie) is merged until no pair has a merge, which is exactly
// what Hugging Face tokenizers does. Pair lookups go through an open-addressing table keyed by the
// two ids; short pieces keep an array of pair ranks (one lookup per changed pair), long ones use a
// heap; results of pieces seen before come from a bounded cache.
//
// Tested in tests/text/tokenizer_test.cpp (goldens, short vs long path, cache) and tests/node.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace qwick {

class BpeModel {
 public:
  struct Merge {
    std::string left, right;  // raw bytes
  };

  // `vocab` maps raw bytes to ids; `merges` in rank order. Every merge's parts and result must be
  // in the vocabulary, and every single byte must be. Throws Error naming what is missing.
  BpeModel(const std::vector<std::pair<std::string, int32_t>>& vocab, const std::vector<Merge>& merges,
           bool ignore_merges);
  // From tokenizer.json's "model" object (type BPE, byte-level strings).
  static BpeModel from_json(const nlohmann::json& model);

  BpeModel(BpeModel&& other) noexcept;
  BpeModel& operator=(BpeModel&&) = delete;

  // Appends the ids of `piece` (raw bytes, non-empty) to `out`. Thread-safe.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  // Raw bytes of a vocabulary id; empty for ids the vocabulary does not define.
  std::string_view token_bytes(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < id_bytes_.size() ? std::string_view(id_bytes_[id]) : "";
  }
  // One past the largest vocabulary id.
  int32_t id_limit() const { return static_cast<int32_t>(id_bytes_.size()); }
  size_t vocab_size() const { return vocab_.size(); }
  size_t merge_count() const { return n_merges_; }

 private:
  struct Slot {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t result = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static constexpr uint32_t kNoMerge = ~uint32_t{0};

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };

  void insert_merge(int32_t left, int32_t right, uint32_t rank, int32_t result);
  // Rank of merging (left, right) and the merged id; kNoMerge when the pair has no merge.
  uint32_t find_merge(int32_t left, int32_t right, int32_t* result) const;
  void merge_short(std::vector<int32_t>& symbols) const;
  void merge_long(std::vector<int32_t>& symbols) const;

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
  std::vector<std::string> id_bytes_;
  int32_t byte_ids_[256];
  std::vector<Slot> table_;
  uint64_t table_mask_ = 0;
  size_t n_merges_ = 0;
  bool ignore_merges_ = false;

  // Pieces seen before -> ids. Bounded: once full, new pieces are not added.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace qwick
