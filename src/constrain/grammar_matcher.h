// The state of a grammar over the bytes generated so far: a set of pushdown stacks.
//
// A stack is a chain of frames in an arena; a frame is "match the element at `elem` next, then
// continue with `parent`" (-1: the sentence is complete). Every stack in a set is normalized so
// its top is a character element, or it is the complete stack. A code point advances each stack
// whose top matches it; rule references met on the way are expanded into one stack per
// alternative (a return frame is skipped when nothing follows the reference, so right recursion
// such as x* does not grow the stack). Identical stacks are merged, which keeps ambiguous
// grammars from multiplying stacks.
//
// Input is bytes: a multi-byte UTF-8 character is held as a partial code point until complete,
// and a partial one is kept only while some stack accepts a code point it could still become. So
// a token that ends mid-character is allowed exactly when that character can be finished.
//
// Positions (a set of stacks plus a partial character) live in scratch space that the mask walk
// grows and releases like a stack (mark / release); accept() commits a new current position and
// compacts the arena to what it uses.
//
// Bounds: a stack deeper than max_depth frames is dropped (nesting is bounded, never a crash),
// and a set of more than max_stacks stacks is an Error (an ambiguous grammar, refused at run
// time rather than slowing without bound).
//
// Tested in tests/constrain/grammar_matcher_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "constrain/grammar.h"

namespace qwick {

struct MatcherLimits {
  uint32_t max_depth = 1024;
  size_t max_stacks = 4096;
  // Expansion steps allowed for one position's set of stacks, in units of max_stacks: a grammar
  // whose empty alternatives chain without end (`(| x){33}`) could otherwise take exponential time
  // to reach the few stacks it has.
  size_t work_per_stack = 64;
};

class GrammarMatcher {
 public:
  struct Utf8Partial {
    char32_t bits = 0;  // the code point's bits so far
    uint8_t need = 0;   // continuation bytes still to come
    uint8_t length = 0;
  };
  struct Position {
    uint32_t begin = 0, end = 0;  // the stacks: scratch()[begin, end)
    Utf8Partial utf8;
  };
  struct Mark {
    size_t frames = 0, stacks = 0;
  };

  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar, MatcherLimits limits = {});

  // The position after everything accepted so far.
  const Position& current() const { return current_; }
  // Advances `from` by one byte; the new position's stacks are appended to the scratch space.
  // nullopt when no stack can take the byte.
  std::optional<Position> step(const Position& from, uint8_t byte);
  // The input up to `p` is a complete sentence of the grammar.
  bool accepting(const Position& p) const;
  // Some input may still follow `p`.
  bool can_continue(const Position& p) const;

  Mark mark() const { return {frames_.size(), stacks_.size()}; }
  void release(const Mark& m);

  // Advances the current position over `bytes` (all or nothing); false if the grammar rejects them.
  bool accept(std::string_view bytes);

  // The current position's stacks as element offsets, top first (for caching masks by state).
  void signature(std::vector<uint32_t>& out) const;

  const Grammar& grammar() const { return *grammar_; }

 private:
  struct Frame {
    uint32_t elem;
    int32_t parent;  // -1: none
    uint32_t depth;
    uint64_t hash;
  };

  // Pushes the normalized stacks of "continue at elem, then parent" onto stacks_ (from `set_begin`
  // on, merging duplicates).
  void expand(uint32_t elem, int32_t parent, size_t set_begin);
  // Starts a new set of stacks: forgets which frames were popped and resets the work count.
  void begin_set();
  void add_stack(int32_t frame, size_t set_begin);
  int32_t new_frame(uint32_t elem, int32_t parent);
  bool same_stack(int32_t a, int32_t b) const;
  bool any_accepts(const Position& p, char32_t lo, char32_t hi) const;
  void advance(const Position& from, char32_t cp, size_t set_begin);
  // Copies the stacks of `p` into a fresh arena as the current position.
  void commit(const Position& p);

  std::shared_ptr<const Grammar> grammar_;
  MatcherLimits limits_;
  std::vector<Frame> frames_;
  std::vector<int32_t> stacks_;  // frame ids of positions' sets, -1 = the complete stack
  Position current_;
  // Per set: popped_[f] == epoch_ once frame f was popped (popping it again would add nothing), and
  // the expansion steps taken.
  std::vector<uint32_t> popped_;
  uint32_t epoch_ = 0;
  size_t work_ = 0;
};

}  // namespace qwick
