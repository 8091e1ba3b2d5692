// Builds a byte-level BPE vocabulary: learns merges from a text, tops it up to a requested size,
// and writes it as a Hugging Face tokenizer.json that Tokenizer (and the tokenizers library) load.
//
// Learning is classic BPE: the text is cut by the pre-tokenizer, then the most frequent adjacent
// pair (ties: lowest ids) is merged, again and again, until the vocabulary has the requested size
// or no pair occurs twice. A vocabulary larger than the text supports (the full model's 248,044
// regular tokens from a small built-in text) is topped up with synthetic merges: each existing
// token, in id order, extended by one letter a-z, skipping strings already present. They are
// valid merges, so ids up to the requested size exist and round-trip.
//
// Tested in tests/text/synthetic_tokenizer_test.cpp (learned merges reproduce the training words,
// the written file loads and round-trips, sizes, determinism).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/added_tokens.h"
#include "text/pre_tokenizer.h"

namespace qwick {

struct BpeVocabulary {
  std::vector<std::string> tokens;                  // raw bytes by id; ids 0..255 are the bytes
  std::vector<std::pair<int32_t, int32_t>> merges;  // rank r merges into token 256 + r
};

// Learns up to `n_tokens` tokens from `text`.
BpeVocabulary learn_bpe(std::string_view text, const PreTokenizer& pre_tokenizer, size_t n_tokens);

// Adds synthetic merges until the vocabulary has `n_tokens` tokens.
void extend_bpe(BpeVocabulary& vocabulary, size_t n_tokens);

// tokenizer.json text: NFC normalizer, Split(split_regex, Isolated) + ByteLevel pre-tokenizer,
// ByteLevel post-processor and decoder, the BPE model, and `added` tokens.
std::string bpe_tokenizer_json(const BpeVocabulary& vocabulary, const std::vector<AddedToken>& added,
                               std::string_view split_regex);

}  // namespace qwick
