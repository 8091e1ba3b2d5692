#include "text/message_literals.h"

#include <algorithm>

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kOpen = "\xEF\xB7\x90";   // U+FDD0
constexpr std::string_view kClose = "\xEF\xB7\x91";  // U+FDD1

}  // namespace

MessageLiterals::MessageLiterals(const Tokenizer& tokenizer) {
  for (const AddedToken& t : tokenizer.added_tokens())
    if (t.special && !t.content.empty()) controls_.push_back(t.content);
  controls_.emplace_back(kOpen);
  std::sort(controls_.begin(), controls_.end(),
            [](const auto& a, const auto& b) { return a.size() > b.size(); });
}

std::string MessageLiterals::protect_string(std::string_view s) {
  std::string out;
  size_t copied = 0;
  // Every control string starts with '<' or is the placeholder mark: only there is a match tried.
  for (size_t i = s.find_first_of("<\xEF"); i != std::string_view::npos; i = s.find_first_of("<\xEF", i)) {
    const auto it = std::find_if(controls_.begin(), controls_.end(),
                                 [&](const std::string& c) { return s.substr(i).starts_with(c); });
    if (it == controls_.end()) {
      ++i;
      continue;
    }
    out.append(s, copied, i - copied);
    out.append(kOpen).append(std::to_string(literals_.size())).append(kClose);
    literals_.push_back(*it);
    i += it->size();
    copied = i;
  }
  if (copied == 0) return std::string(s);
  out.append(s, copied);
  return out;
}

ojson MessageLiterals::protect(const ojson& value) {
  if (value.is_string()) return protect_string(value.get_ref<const std::string&>());
  if (value.is_array()) {
    ojson out = ojson::array();
    for (const ojson& v : value) out.push_back(protect(v));
    return out;
  }
  if (value.is_object()) {
    ojson out = ojson::object();
    for (const auto& [key, v] : value.items()) out[protect_string(key)] = protect(v);
    return out;
  }
  return value;
}

MessageLiterals::Restored MessageLiterals::restore(std::string_view rendered) const {
  Restored r;
  size_t copied = 0;
  for (size_t at = rendered.find(kOpen); at != std::string_view::npos; at = rendered.find(kOpen, copied)) {
    const size_t digits = at + kOpen.size();
    const size_t close = rendered.find(kClose, digits);
    size_t index = 0;
    bool valid = close != std::string_view::npos && close > digits;
    for (size_t i = digits; valid && i < close; ++i) {
      valid = rendered[i] >= '0' && rendered[i] <= '9' && index < literals_.size();
      index = index * 10 + static_cast<size_t>(rendered[i] - '0');
    }
    if (!valid || index >= literals_.size()) {  // not ours (cannot happen: each mark typed was replaced)
      r.text.append(rendered, copied, digits - copied);
      copied = digits;
      continue;
    }
    r.text.append(rendered, copied, at - copied);
    r.plain.emplace_back(r.text.size(), r.text.size() + literals_[index].size());
    r.text.append(literals_[index]);
    copied = close + kClose.size();
  }
  r.text.append(rendered, copied);
  return r;
}

}  // namespace qwick
