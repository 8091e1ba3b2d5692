#include "constrain/grammar_matcher.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"

namespace qwick {
namespace {

using Kind = GrammarElement::Kind;

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

constexpr char32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};

// The code points a partial character can still become, clipped to valid scalar values; false
// when none is valid (overlong, surrogate or past U+10FFFF).
bool partial_range(const GrammarMatcher::Utf8Partial& u, char32_t& lo, char32_t& hi) {
  const unsigned shift = 6u * u.need;
  lo = std::max<char32_t>(u.bits << shift, kMinForLength[u.length]);
  hi = std::min<char32_t>((u.bits << shift) | ((char32_t{1} << shift) - 1), 0x10FFFF);
  if (lo > hi) return false;
  if (lo >= 0xD800 && hi <= 0xDFFF) return false;
  return true;
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, MatcherLimits limits)
    : grammar_(std::move(grammar)), limits_(limits) {
  const Grammar& g = *grammar_;
  begin_set();
  for (uint32_t alt : g.rules[g.root]) expand(alt, -1, 0);
  current_ = {0, static_cast<uint32_t>(stacks_.size()), {}};
}

int32_t GrammarMatcher::new_frame(uint32_t elem, int32_t parent) {
  const uint64_t parent_hash = parent < 0 ? 0 : frames_[static_cast<size_t>(parent)].hash;
  const uint32_t depth = parent < 0 ? 1 : frames_[static_cast<size_t>(parent)].depth + 1;
  frames_.push_back({elem, parent, depth, mix(parent_hash, elem)});
  return static_cast<int32_t>(frames_.size() - 1);
}

bool GrammarMatcher::same_stack(int32_t a, int32_t b) const {
  while (a >= 0 && b >= 0) {
    if (a == b) return true;
    const Frame& fa = frames_[static_cast<size_t>(a)];
    const Frame& fb = frames_[static_cast<size_t>(b)];
    if (fa.elem != fb.elem || fa.hash != fb.hash) return false;
    a = fa.parent;
    b = fb.parent;
  }
  return a == b;
}

void GrammarMatcher::add_stack(int32_t frame, size_t set_begin) {
  for (size_t i = set_begin; i < stacks_.size(); ++i) {
    const int32_t other = stacks_[i];
    if (other == frame) return;
    if (other >= 0 && frame >= 0 &&
        frames_[static_cast<size_t>(other)].hash == frames_[static_cast<size_t>(frame)].hash &&
        same_stack(other, frame))
      return;
  }
  if (stacks_.size() - set_begin >= limits_.max_stacks)
    fail("the grammar is too ambiguous: more than {} parses are live at once", limits_.max_stacks);
  stacks_.push_back(frame);
}

void GrammarMatcher::begin_set() {
  if (++epoch_ == 0) {  // wrapped: old marks could match again
    std::fill(popped_.begin(), popped_.end(), 0u);
    epoch_ = 1;
  }
  work_ = 0;
}

void GrammarMatcher::expand(uint32_t elem, int32_t parent, size_t set_begin) {
  if (++work_ > limits_.max_stacks * limits_.work_per_stack)
    fail("the grammar is too ambiguous: more than {} expansion steps for one byte",
         limits_.max_stacks * limits_.work_per_stack);
  const Grammar& g = *grammar_;
  const GrammarElement& e = g.elements[elem];
  switch (e.kind) {
    case Kind::kEnd:
      if (parent < 0) {
        add_stack(-1, set_begin);
      } else {
        // Expanding "continue after frame `parent`" depends on nothing else, so a second path
        // that ends the same frame in this set finds its stacks already there.
        const auto id = static_cast<size_t>(parent);
        if (popped_.size() <= id) popped_.resize(frames_.size(), 0u);
        if (popped_[id] == epoch_) return;
        popped_[id] = epoch_;
        const Frame f = frames_[id];
        expand(f.elem, f.parent, set_begin);
      }
      return;
    case Kind::kChars: {
      if (parent >= 0 && frames_[static_cast<size_t>(parent)].depth >= limits_.max_depth) return;
      add_stack(new_frame(elem, parent), set_begin);
      return;
    }
    case Kind::kRule: {
      int32_t ret = parent;
      if (g.elements[elem + 1].kind != Kind::kEnd) {
        if (parent >= 0 && frames_[static_cast<size_t>(parent)].depth >= limits_.max_depth) return;
        ret = new_frame(elem + 1, parent);
      }
      for (uint32_t alt : g.rules[e.first]) expand(alt, ret, set_begin);
      return;
    }
  }
}

bool GrammarMatcher::any_accepts(const Position& p, char32_t lo, char32_t hi) const {
  const Grammar& g = *grammar_;
  for (uint32_t i = p.begin; i < p.end; ++i) {
    const int32_t s = stacks_[i];
    if (s >= 0 && g.matches_any(g.elements[frames_[static_cast<size_t>(s)].elem], lo, hi)) return true;
  }
  return false;
}

void GrammarMatcher::advance(const Position& from, char32_t cp, size_t set_begin) {
  const Grammar& g = *grammar_;
  for (uint32_t i = from.begin; i < from.end; ++i) {
    const int32_t s = stacks_[i];
    if (s < 0) continue;
    const Frame f = frames_[static_cast<size_t>(s)];
    if (g.matches(g.elements[f.elem], cp)) expand(f.elem + 1, f.parent, set_begin);
  }
}

std::optional<GrammarMatcher::Position> GrammarMatcher::step(const Position& from, uint8_t byte) {
  Utf8Partial u = from.utf8;
  if (u.need == 0) {
    if (byte < 0x80) {
      u = {byte, 0, 1};
    } else if (byte >= 0xC2 && byte <= 0xDF) {
      u = {static_cast<char32_t>(byte & 0x1F), 1, 2};
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      u = {static_cast<char32_t>(byte & 0x0F), 2, 3};
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      u = {static_cast<char32_t>(byte & 0x07), 3, 4};
    } else {
      return std::nullopt;
    }
  } else {
    if ((byte & 0xC0) != 0x80) return std::nullopt;
    u.bits = (u.bits << 6) | (byte & 0x3F);
    --u.need;
  }
  char32_t lo = 0, hi = 0;
  if (!partial_range(u, lo, hi) || !any_accepts(from, lo, hi)) return std::nullopt;
  if (u.need > 0) return Position{from.begin, from.end, u};  // same stacks, one more byte held
  const size_t begin = stacks_.size();
  begin_set();
  advance(from, u.bits, begin);
  if (stacks_.size() == begin) return std::nullopt;
  return Position{static_cast<uint32_t>(begin), static_cast<uint32_t>(stacks_.size()), {}};
}

bool GrammarMatcher::accepting(const Position& p) const {
  if (p.utf8.need > 0) return false;
  for (uint32_t i = p.begin; i < p.end; ++i)
    if (stacks_[i] < 0) return true;
  return false;
}

bool GrammarMatcher::can_continue(const Position& p) const {
  if (p.utf8.need > 0) return true;
  for (uint32_t i = p.begin; i < p.end; ++i)
    if (stacks_[i] >= 0) return true;
  return false;
}

void GrammarMatcher::release(const Mark& m) {
  frames_.resize(m.frames);
  stacks_.resize(m.stacks);
}

bool GrammarMatcher::accept(std::string_view bytes) {
  const Mark m = mark();
  Position p = current_;
  for (char c : bytes) {
    const auto next = step(p, static_cast<uint8_t>(c));
    if (!next) {
      release(m);
      return false;
    }
    p = *next;
  }
  commit(p);
  return true;
}

void GrammarMatcher::commit(const Position& p) {
  std::vector<Frame> frames;
  std::unordered_map<int32_t, int32_t> moved;  // old frame id -> new
  auto copy = [&](auto&& self, int32_t f) -> int32_t {
    if (f < 0) return -1;
    if (const auto it = moved.find(f); it != moved.end()) return it->second;
    Frame frame = frames_[static_cast<size_t>(f)];
    frame.parent = self(self, frame.parent);
    frames.push_back(frame);
    const auto id = static_cast<int32_t>(frames.size() - 1);
    moved.emplace(f, id);
    return id;
  };
  std::vector<int32_t> stacks;
  for (uint32_t i = p.begin; i < p.end; ++i) stacks.push_back(copy(copy, stacks_[i]));
  frames_ = std::move(frames);
  stacks_ = std::move(stacks);
  current_ = {0, static_cast<uint32_t>(stacks_.size()), p.utf8};
}

void GrammarMatcher::signature(std::vector<uint32_t>& out) const {
  out.clear();
  out.push_back(current_.utf8.bits);
  out.push_back(current_.utf8.need | (uint32_t{current_.utf8.length} << 8));
  for (uint32_t i = current_.begin; i < current_.end; ++i) {
    for (int32_t f = stacks_[i]; f >= 0; f = frames_[static_cast<size_t>(f)].parent)
      out.push_back(frames_[static_cast<size_t>(f)].elem);
    out.push_back(~uint32_t{0});
  }
}

}  // namespace qwick
