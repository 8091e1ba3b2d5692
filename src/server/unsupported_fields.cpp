#include "server/unsupported_fields.h"

#include <fmt/format.h>

#include <array>

#include "server/api_error.h"

namespace qwick {
namespace {

constexpr std::string_view kConstrained = "use response_format, json_schema or grammar instead";
constexpr std::string_view kSampler = "this sampler is not supported";

constexpr std::array kFields{
    // vLLM's constraints (llama-server's grammar and json_schema are served: constraint_request.h).
    UnsupportedField{"guided_json", kConstrained, ""},
    UnsupportedField{"guided_regex", kConstrained, ""},
    UnsupportedField{"guided_choice", kConstrained, ""},
    UnsupportedField{"guided_grammar", kConstrained, ""},
    UnsupportedField{"structured_outputs", kConstrained, ""},
    // llama-server's other samplers.
    UnsupportedField{"mirostat", kSampler, "0"},
    UnsupportedField{"typical_p", kSampler, "1"},
    UnsupportedField{"tfs_z", kSampler, "1"},
    UnsupportedField{"dry_multiplier", kSampler, "0"},
    UnsupportedField{"xtc_probability", kSampler, "0"},
    UnsupportedField{"top_n_sigma", kSampler, "-1"},
    UnsupportedField{"dynatemp_range", kSampler, "0"},
};

}  // namespace

std::span<const UnsupportedField> unsupported_fields() {
  return kFields;
}

void refuse_unsupported_fields(const nlohmann::ordered_json& body) {
  for (const UnsupportedField& f : kFields) {
    const auto it = body.find(f.name);
    if (it == body.end() || it->is_null()) continue;
    if (!f.neutral.empty() && *it == nlohmann::ordered_json::parse(f.neutral)) continue;
    throw invalid_request(fmt::format("{} is not supported: {} (the field would change the output, so it "
                                      "is refused rather than ignored)",
                                      f.name, f.why),
                          std::string(f.name));
  }
}

}  // namespace qwick
