// Token ids written by a user or script: a JSON array ("[1, 2, 3]") or a comma and/or whitespace
// separated list ("1,2,3", "1 2 3"). Tested through `qwick detokenize` and `qwick run --prompt-ids`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qwick {

// Throws Error naming `what` for anything that is not a list of non-negative 32-bit integers.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& what);

// "[1,2,3]"
std::string token_ids_json(const std::vector<int32_t>& ids);

}  // namespace qwick
