// A grammar applied to one generation: which tokens may come next, and the state after each.
//
// It may start later than the first token: with `start_after` set, tokens pass freely until that
// token (</think>: the reasoning is never constrained) has been generated. Once active, apply()
// sets the logits of every token the grammar does not allow to -inf; the end tokens are allowed
// exactly where the text so far is complete. complete() says the grammar allows nothing more, so
// the caller ends the generation there.
//
// The runtime calls apply() before sampling and accept() with the token chosen (BackendEngine).
// Tested in tests/constrain/token_mask_test.cpp and with the engine in
// tests/server/backend_engine_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "constrain/grammar_matcher.h"
#include "constrain/token_mask.h"
#include "constrain/token_trie.h"

namespace qwick {

class TokenConstraint {
 public:
  TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie,
                  std::vector<int32_t> end_ids, int32_t start_after = -1);

  bool active() const { return active_; }
  // Throws Error when no token at all can continue (a grammar no vocabulary can finish).
  void apply(std::span<float> logits);
  // Throws Error if the grammar does not allow `token` here.
  void accept(int32_t token);
  bool complete() const;
  const TokenMask& mask();

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> end_ids_;
  int32_t start_after_;
  bool active_;
  GrammarMatcher matcher_;
  TokenMasker masker_;
  std::vector<std::pair<int32_t, float>> saved_;
};

}  // namespace qwick
