#include "text/bpe_model.h"

#include <algorithm>
#include <bit>
#include <queue>

#include "core/error.h"
#include "text/byte_level.h"

namespace qwick {
namespace {

constexpr size_t kCacheLimit = 1 << 16;   // pieces
constexpr size_t kCachePieceLimit = 256;  // bytes; longer pieces are rare and not worth keeping
constexpr size_t kShortPiece = 128;       // symbols; above this the heap beats rescanning

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

BpeModel::BpeModel(const std::vector<std::pair<std::string, int32_t>>& vocab,
                   const std::vector<Merge>& merges, bool ignore_merges)
    : ignore_merges_(ignore_merges) {
  int32_t max_id = -1;
  vocab_.reserve(vocab.size());
  for (const auto& [bytes, id] : vocab) {
    if (id < 0) fail("negative id {} in the vocabulary", id);
    vocab_[bytes] = id;
    max_id = std::max(max_id, id);
  }
  id_bytes_.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [bytes, id] : vocab) id_bytes_[static_cast<size_t>(id)] = bytes;
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(std::string(1, static_cast<char>(b)));
    if (it == vocab_.end()) fail("the vocabulary has no token for byte 0x{:02X}", b);
    byte_ids_[b] = it->second;
  }
  const size_t capacity = std::bit_ceil(std::max<size_t>(16, merges.size() * 2));
  table_.assign(capacity, Slot{});
  table_mask_ = capacity - 1;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Merge& m = merges[rank];
    auto id_of = [&](const std::string& s) {
      const auto it = vocab_.find(s);
      if (it == vocab_.end())
        fail("merge {} (\"{}\" \"{}\") uses \"{}\", which is not in the vocabulary", rank,
             bytes_to_byte_level(m.left), bytes_to_byte_level(m.right), bytes_to_byte_level(s));
      return it->second;
    };
    const int32_t left = id_of(m.left), right = id_of(m.right), result = id_of(m.left + m.right);
    int32_t existing = 0;
    // A repeated pair keeps its first (lowest) rank, as in Hugging Face tokenizers.
    if (find_merge(left, right, &existing) == kNoMerge)
      insert_merge(left, right, static_cast<uint32_t>(rank), result);
  }
  n_merges_ = merges.size();
}

BpeModel::BpeModel(BpeModel&& other) noexcept
    : vocab_(std::move(other.vocab_)),
      id_bytes_(std::move(other.id_bytes_)),
      table_(std::move(other.table_)),
      table_mask_(other.table_mask_),
      n_merges_(other.n_merges_),
      ignore_merges_(other.ignore_merges_),
      cache_(std::move(other.cache_)) {
  std::copy(std::begin(other.byte_ids_), std::end(other.byte_ids_), byte_ids_);
}

BpeModel BpeModel::from_json(const nlohmann::json& model) {
  if (!model.is_object()) fail("no \"model\" object");
  const std::string type = model.value("type", "");
  if (type != "BPE") fail("model type \"{}\" is not supported (supported: BPE)", type);
  if (model.value("byte_fallback", false)) fail("BPE byte_fallback is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty())
      fail("BPE {} is not supported", key);
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() > 0)
    fail("BPE dropout is not supported");
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail("BPE model without a vocab");
  if (!model.contains("merges") || !model["merges"].is_array()) fail("BPE model without merges");

  auto to_bytes = [](const std::string& s) {
    auto bytes = byte_level_to_bytes(s);
    if (!bytes) fail("\"{}\" is not a byte-level token (this tokenizer is not byte-level BPE)", s);
    return std::move(*bytes);
  };
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(model["vocab"].size());
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer()) fail("vocabulary entry \"{}\" has no integer id", token);
    vocab.emplace_back(to_bytes(token), id.get<int32_t>());
  }
  std::vector<Merge> merges;
  merges.reserve(model["merges"].size());
  for (const auto& m : model["merges"]) {
    // Two forms: ["a", "b"] (current) and "a b" (older files).
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.push_back({to_bytes(m[0].get<std::string>()), to_bytes(m[1].get<std::string>())});
    } else if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) fail("merge \"{}\" is not two tokens", s);
      merges.push_back({to_bytes(s.substr(0, space)), to_bytes(s.substr(space + 1))});
    } else {
      fail("malformed merge {}", m.dump());
    }
  }
  return BpeModel(vocab, merges, model.value("ignore_merges", false));
}

void BpeModel::insert_merge(int32_t left, int32_t right, uint32_t rank, int32_t result) {
  const uint64_t key = pair_key(left, right);
  for (uint64_t i = mix(key) & table_mask_;; i = (i + 1) & table_mask_) {
    if (table_[i].key == kEmpty) {
      table_[i] = {key, rank, result};
      return;
    }
  }
}

uint32_t BpeModel::find_merge(int32_t left, int32_t right, int32_t* result) const {
  const uint64_t key = pair_key(left, right);
  for (uint64_t i = mix(key) & table_mask_;; i = (i + 1) & table_mask_) {
    const Slot& s = table_[i];
    if (s.key == key) {
      *result = s.result;
      return s.rank;
    }
    if (s.key == kEmpty) return kNoMerge;
  }
}

// Keeps the rank of every adjacent pair; each merge recomputes only the two pairs it changes.
void BpeModel::merge_short(std::vector<int32_t>& symbols) const {
  const size_t n = symbols.size();
  uint32_t ranks[kShortPiece];
  int32_t results[kShortPiece];
  for (size_t i = 0; i + 1 < n; ++i) ranks[i] = find_merge(symbols[i], symbols[i + 1], &results[i]);
  size_t count = n;
  while (count > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < count; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == kNoMerge) break;
    symbols[best] = results[best];
    for (size_t i = best + 1; i + 1 < count; ++i) symbols[i] = symbols[i + 1];
    for (size_t i = best + 1; i + 2 < count; ++i) {
      ranks[i] = ranks[i + 1];
      results[i] = results[i + 1];
    }
    --count;
    if (best + 1 < count) ranks[best] = find_merge(symbols[best], symbols[best + 1], &results[best]);
    if (best > 0) ranks[best - 1] = find_merge(symbols[best - 1], symbols[best], &results[best - 1]);
  }
  symbols.resize(count);
}

// Symbols in a linked list, candidate merges in a heap ordered by (rank, position); entries made
// stale by an earlier merge are recognised when popped and skipped.
void BpeModel::merge_long(std::vector<int32_t>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  std::vector<int> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<bool> alive(static_cast<size_t>(n), true);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  using Candidate = std::pair<uint32_t, int>;  // (rank, left position)
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    int32_t result = 0;
    const uint32_t rank = find_merge(symbols[left], symbols[next[left]], &result);
    if (rank != kNoMerge) heap.emplace(rank, left);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [rank, left] = heap.top();
    heap.pop();
    if (!alive[left] || next[left] < 0) continue;
    int32_t result = 0;
    if (find_merge(symbols[left], symbols[next[left]], &result) != rank) continue;  // stale
    const int right = next[left];
    symbols[left] = result;
    alive[right] = false;
    next[left] = next[right];
    if (next[right] >= 0) prev[next[right]] = left;
    push(prev[left]);
    push(left);
  }
  size_t out = 0;
  for (int i = 0; i >= 0 && i < n; i = next[i]) symbols[out++] = symbols[i];
  symbols.resize(out);
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    if (const auto it = vocab_.find(piece); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() <= kCachePieceLimit;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (const auto it = cache_.find(piece); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) symbols[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
  if (symbols.size() <= kShortPiece)
    merge_short(symbols);
  else
    merge_long(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheLimit) cache_.emplace(std::string(piece), std::move(symbols));
  }
}

}  // namespace qwick
