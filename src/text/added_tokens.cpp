#include "text/added_tokens.h"

#include <algorithm>

namespace qwick {

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (uint32_t i = 0; i < tokens_.size(); ++i)
    if (!tokens_[i].content.empty())
      by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  for (auto& list : by_first_byte_)
    std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
}

AddedTokenMatcher::Match AddedTokenMatcher::find(std::string_view text, size_t from,
                                                 bool include_special) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    const auto& candidates = by_first_byte_[static_cast<unsigned char>(text[pos])];
    for (uint32_t index : candidates) {
      const AddedToken& t = tokens_[index];
      if (t.special && !include_special) continue;
      if (text.compare(pos, t.content.size(), t.content) == 0) return {pos, t.content.size(), &t};
    }
  }
  return {};
}

}  // namespace qwick
