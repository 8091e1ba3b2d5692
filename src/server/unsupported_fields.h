// Request fields that would change the output but that this server cannot honour yet.
//
// A client that sends one of them expects its effect (a grammar, a schema, another sampler), so
// ignoring it would return an answer that looks right and is not: each is refused with a 400
// naming the field. A field given its neutral value (mirostat 0, typical_p 1, ...) changes
// nothing and is accepted. Fields that change nothing (user, metadata, store, ...) are not listed.
//
// Tested in tests/server/server_api_rules_test.cpp (every listed field is refused by name).
#pragma once

#include <nlohmann/json.hpp>

#include <span>
#include <string_view>

namespace qwick {

struct UnsupportedField {
  std::string_view name;
  std::string_view why;
  // JSON text of the value that leaves the output unchanged; empty when none does.
  std::string_view neutral;
};

// Every field refused, for tests and docs.
std::span<const UnsupportedField> unsupported_fields();

// Throws ApiError 400 (param = the field) for the first listed field present in `body` with a
// value other than null and its neutral value.
void refuse_unsupported_fields(const nlohmann::ordered_json& body);

}  // namespace qwick
