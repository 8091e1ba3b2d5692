#include "text/bpe_builder.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/byte_level.h"

namespace qwick {
namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
}

// The byte order of GPT-2 style vocabularies: the bytes that map to themselves first.
std::vector<int> byte_order() {
  std::vector<int> order;
  for (int b = 0; b < 256; ++b)
    if (byte_to_unicode(static_cast<unsigned char>(b)) == static_cast<char32_t>(b)) order.push_back(b);
  for (int b = 0; b < 256; ++b)
    if (byte_to_unicode(static_cast<unsigned char>(b)) != static_cast<char32_t>(b)) order.push_back(b);
  return order;
}

std::string json_string(std::string_view s) {
  return nlohmann::json(std::string(s)).dump();
}

}  // namespace

BpeVocabulary learn_bpe(std::string_view text, const PreTokenizer& pre_tokenizer, size_t n_tokens) {
  BpeVocabulary v;
  int32_t byte_id[256];
  for (int b : byte_order()) {
    byte_id[b] = static_cast<int32_t>(v.tokens.size());
    v.tokens.emplace_back(1, static_cast<char>(b));
  }
  // Unique pieces with their counts, each as a list of symbols.
  std::vector<std::string_view> pieces;
  pre_tokenizer.split(text, pieces);
  std::map<std::string_view, int64_t> counts;
  for (std::string_view p : pieces) ++counts[p];
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> weights;
  for (const auto& [piece, count] : counts) {
    std::vector<int32_t> symbols;
    for (char c : piece) symbols.push_back(byte_id[static_cast<unsigned char>(c)]);
    words.push_back(std::move(symbols));
    weights.push_back(count);
  }
  std::unordered_map<uint64_t, int64_t> pair_counts;
  for (size_t w = 0; w < words.size(); ++w)
    for (size_t i = 0; i + 1 < words[w].size(); ++i)
      pair_counts[pair_key(words[w][i], words[w][i + 1])] += weights[w];

  while (v.tokens.size() < n_tokens) {
    uint64_t best = 0;
    int64_t best_count = 1;  // a merge must occur at least twice
    for (const auto& [key, count] : pair_counts)
      if (count > best_count || (count == best_count && count > 1 && key < best)) {
        best = key;
        best_count = count;
      }
    if (best_count < 2) break;
    const auto left = static_cast<int32_t>(best >> 32), right = static_cast<int32_t>(best & 0xFFFFFFFFu);
    const auto merged = static_cast<int32_t>(v.tokens.size());
    v.tokens.push_back(v.tokens[static_cast<size_t>(left)] + v.tokens[static_cast<size_t>(right)]);
    v.merges.emplace_back(left, right);
    // Apply the merge everywhere, keeping the pair counts current.
    for (size_t w = 0; w < words.size(); ++w) {
      std::vector<int32_t>& s = words[w];
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        if (s[i] != left || s[i + 1] != right) continue;
        const int64_t n = weights[w];
        if (i > 0) {
          pair_counts[pair_key(s[i - 1], left)] -= n;
          pair_counts[pair_key(s[i - 1], merged)] += n;
        }
        if (i + 2 < s.size()) {
          pair_counts[pair_key(right, s[i + 2])] -= n;
          pair_counts[pair_key(merged, s[i + 2])] += n;
        }
        pair_counts[best] -= n;
        s[i] = merged;
        s.erase(s.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      }
    }
    std::erase_if(pair_counts, [](const auto& entry) { return entry.second <= 0; });
  }
  return v;
}

void extend_bpe(BpeVocabulary& v, size_t n_tokens) {
  std::unordered_set<std::string> present(v.tokens.begin(), v.tokens.end());
  int32_t letter_id[26];
  for (int i = 0; i < 26; ++i) {
    const auto it = std::find(v.tokens.begin(), v.tokens.end(), std::string(1, static_cast<char>('a' + i)));
    if (it == v.tokens.end())
      fail("extend_bpe: the vocabulary lacks the byte '{}'", static_cast<char>('a' + i));
    letter_id[i] = static_cast<int32_t>(it - v.tokens.begin());
  }
  for (size_t base = 0; v.tokens.size() < n_tokens; ++base) {
    for (int i = 0; i < 26 && v.tokens.size() < n_tokens; ++i) {
      std::string token = v.tokens[base] + static_cast<char>('a' + i);
      if (!present.insert(token).second) continue;
      v.merges.emplace_back(static_cast<int32_t>(base), letter_id[i]);
      v.tokens.push_back(std::move(token));
    }
  }
}

std::string bpe_tokenizer_json(const BpeVocabulary& v, const std::vector<AddedToken>& added,
                               std::string_view split_regex) {
  // Written by hand rather than through a JSON object: the vocabulary stays in id order, as in
  // the files Hugging Face writes, and a 248k-entry vocabulary costs milliseconds.
  std::string out =
      "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [";
  for (size_t i = 0; i < added.size(); ++i) {
    out += i ? ",\n    " : "\n    ";
    out += "{\"id\": " + std::to_string(added[i].id) + ", \"content\": " + json_string(added[i].content) +
           ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
           "\"special\": " +
           (added[i].special ? "true}" : "false}");
  }
  const std::string byte_level =
      R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false})";
  out += "\n  ],\n  \"normalizer\": {\"type\": \"NFC\"},\n";
  out +=
      "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
      "{\"Regex\": " +
      json_string(split_regex) + "}, \"behavior\": \"Isolated\", \"invert\": false}, " + byte_level + "]},\n";
  out += "  \"post_processor\": " + byte_level + ",\n  \"decoder\": " + byte_level + ",\n";
  out +=
      "  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
      "\"continuing_subword_prefix\": \"\", "
      "\"end_of_word_suffix\": \"\", \"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": "
      "false,\n"
      "    \"vocab\": {";
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    out += id ? ",\n      " : "\n      ";
    out += json_string(bytes_to_byte_level(v.tokens[id])) + ": " + std::to_string(id);
  }
  out += "\n    },\n    \"merges\": [";
  for (size_t r = 0; r < v.merges.size(); ++r) {
    out += r ? ",\n      [" : "\n      [";
    out += json_string(bytes_to_byte_level(v.tokens[static_cast<size_t>(v.merges[r].first)])) + ", " +
           json_string(bytes_to_byte_level(v.tokens[static_cast<size_t>(v.merges[r].second)])) + "]";
  }
  out += "\n    ]\n  }\n}\n";
  return out;
}

}  // namespace qwick
