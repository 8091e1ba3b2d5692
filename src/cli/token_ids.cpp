#include "cli/token_ids.h"

#include <sstream>

#include "cli/args.h"
#include "core/error.h"

namespace qwick {

std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& what) {
  std::string list = text;
  const size_t first = list.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && list[first] == '[') {
    const size_t last = list.find_last_not_of(" \t\r\n");
    if (list[last] != ']') fail("{}: a JSON array must end with ']'", what);
    list = list.substr(first + 1, last - first - 1);
  }
  std::vector<int32_t> ids;
  std::string item;
  std::istringstream in(list);
  while (in >> item) {
    std::istringstream parts(item);
    std::string part;
    while (std::getline(parts, part, ','))
      if (!part.empty()) {
        const int64_t v = parse_int(part, what);
        if (v < 0 || v > INT32_MAX) fail("{}: {} is not a token id", what, v);
        ids.push_back(static_cast<int32_t>(v));
      }
  }
  return ids;
}

std::string token_ids_json(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

}  // namespace qwick
