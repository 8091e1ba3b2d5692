#include "server/constraint_request.h"

#include <fmt/format.h>

#include "constrain/json_schema.h"
#include "server/api_error.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

const ojson* present(const ojson& object, const char* name) {
  const auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

RequestedConstraint from_response_format(const ojson& f) {
  const ojson* type = present(f, "type");
  if (type == nullptr || !type->is_string())
    throw invalid_request("response_format.type must be \"text\", \"json_object\" or \"json_schema\"",
                          "response_format");
  const std::string t = type->get<std::string>();
  if (t == "json_object") {
    if (const ojson* schema = present(f, "schema")) {  // llama-server's form
      if (!schema->is_object() && !schema->is_boolean())
        throw invalid_request("response_format.schema must be a JSON Schema", "response_format");
      return {ConstraintSpec::json_schema(*schema), "response_format"};
    }
    return {ConstraintSpec::json_object(), "response_format"};
  }
  if (t == "json_schema") {
    const ojson* js = present(f, "json_schema");
    if (js == nullptr || !js->is_object())
      throw invalid_request("response_format.json_schema must be an object with a \"schema\"",
                            "response_format");
    const ojson* schema = present(*js, "schema");
    if (schema == nullptr)
      return {ConstraintSpec::json_object(), "response_format"};  // no schema: any JSON object
    if (!schema->is_object() && !schema->is_boolean())
      throw invalid_request("response_format.json_schema.schema must be a JSON Schema", "response_format");
    if (const ojson* strict = present(*js, "strict"); strict != nullptr && !strict->is_boolean())
      throw invalid_request("response_format.json_schema.strict must be a boolean", "response_format");
    return {ConstraintSpec::json_schema(*schema), "response_format"};
  }
  throw invalid_request(
      fmt::format("response_format.type must be \"text\", \"json_object\" or \"json_schema\", got \"{}\"", t),
      "response_format");
}

}  // namespace

void add_constraint(std::optional<RequestedConstraint>& constraint, std::optional<RequestedConstraint> more) {
  if (!more) return;
  if (constraint)
    throw invalid_request(
        fmt::format("{} and {} cannot both constrain the output; send one", constraint->param, more->param),
        more->param);
  constraint = std::move(more);
}

std::optional<RequestedConstraint> tool_constraint(const ojson& tools, const ToolChoice& choice, bool strict,
                                                   bool parallel, const std::string& param) {
  const bool forced = choice.mode == ToolChoice::Mode::kRequired || choice.mode == ToolChoice::Mode::kNamed;
  const bool has_tools = tools.is_array() && !tools.empty();
  if (forced && !has_tools)
    throw invalid_request(fmt::format("{}: a call is required but no tools are declared", param), param);
  if (!has_tools || choice.mode == ToolChoice::Mode::kNone || (!forced && !strict)) return std::nullopt;
  ToolCallRule rule;
  rule.tools = tools;
  rule.name = choice.mode == ToolChoice::Mode::kNamed ? choice.name : "";
  rule.parallel = parallel;
  rule.text_first = !forced;
  return RequestedConstraint{ConstraintSpec::tool_calls(rule), param};
}

std::optional<RequestedConstraint> read_constraint(const ojson& body) {
  std::optional<RequestedConstraint> out;
  auto set = [&](RequestedConstraint c) { add_constraint(out, std::move(c)); };
  if (const ojson* f = present(body, "response_format")) {
    if (!f->is_object()) throw invalid_request("response_format must be an object", "response_format");
    const ojson* type = present(*f, "type");
    if (!(type != nullptr && *type == "text")) set(from_response_format(*f));
  }
  if (const ojson* s = present(body, "json_schema")) {
    if (!s->is_object() && !s->is_boolean())
      throw invalid_request("json_schema must be a JSON Schema", "json_schema");
    set({ConstraintSpec::json_schema(*s), "json_schema"});
  }
  if (const ojson* g = present(body, "grammar")) {
    if (!g->is_string()) throw invalid_request("grammar must be a string (GBNF)", "grammar");
    if (!g->get<std::string>().empty()) set({ConstraintSpec::grammar(g->get<std::string>()), "grammar"});
  }
  return out;
}

std::shared_ptr<TokenConstraint> ConstraintCompiler::make(const RequestedConstraint& request,
                                                          std::vector<int32_t> end_ids, int32_t start_after) {
  std::shared_ptr<const Grammar> grammar;
  try {
    grammar = cache_.get(request.spec);
  } catch (const UnsupportedSchema& e) {
    throw invalid_request(e.what(), request.param);
  } catch (const Error& e) {
    throw invalid_request(fmt::format("{}: {}", request.param, e.what()), request.param);
  }
  std::call_once(trie_once_, [&] {
    trie_ = std::make_shared<const TokenTrie>(TokenTrie::from_tokenizer(tokenizer_, vocab_size_));
  });
  try {
    return std::make_shared<TokenConstraint>(grammar, trie_, std::move(end_ids), start_after);
  } catch (const Error& e) {  // the grammar's first step is too ambiguous
    throw invalid_request(fmt::format("{}: {}", request.param, e.what()), request.param);
  }
}

}  // namespace qwick
