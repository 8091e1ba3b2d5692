// The output constraint a request asks for, read from its fields, and compiled for a job.
//
// Chat Completions and Completions: `response_format` {"type": "json_object"} (any JSON object),
// {"type": "json_schema", "json_schema": {"name", "schema", "strict"}} (OpenAI), {"type":
// "json_object", "schema": ...} (llama-server); llama-server's top-level `json_schema` (a schema)
// and `grammar` (GBNF text). At most one of them per request. A schema or grammar the engine cannot
// enforce is an ApiError 400 naming the keyword or the grammar error, with the field as param.
// Every API's tool_choice (required, a named function) and strict tools: tool_constraint().
//
// Tested end to end in tests/node/server_constrained.mjs (each form, each refusal, ajv validation).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "constrain/constraint_spec.h"
#include "constrain/token_constraint.h"
#include "text/tokenizer.h"

namespace qwick {

struct RequestedConstraint {
  ConstraintSpec spec;
  std::string param;  // the request field it came from, for errors
};

// nullopt when the request asks for free text.
std::optional<RequestedConstraint> read_constraint(const nlohmann::ordered_json& body);

// What a request's tool_choice asks for, in any API's terms.
struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kNamed };
  Mode mode = Mode::kAuto;
  std::string name;  // kNamed: the function
};

// The tool-call constraint of a chat request whose `tools` (the template's function tools, null
// when none) may be called: under kRequired a call of one of them, under kNamed of that one, and
// under kAuto with `strict` tools free text or calls whose arguments fit their schemas (every
// tool's, as the grammar cannot tell a strict call from another before its name). nullopt when
// nothing is forced. `param` names the request field for errors; throws ApiError 400 (a
// required or named choice without tools, a name not among them).
std::optional<RequestedConstraint> tool_constraint(const nlohmann::ordered_json& tools,
                                                   const ToolChoice& choice, bool strict, bool parallel,
                                                   const std::string& param);

// `constraint` and `tools` both constraining the output: an ApiError 400 naming both.
void add_constraint(std::optional<RequestedConstraint>& constraint, std::optional<RequestedConstraint> more);

// Compiled grammars (cached) and the vocabulary trie (built on first use), shared by requests.
class ConstraintCompiler {
 public:
  ConstraintCompiler(const Tokenizer& tokenizer, int64_t vocab_size)
      : tokenizer_(tokenizer), vocab_size_(vocab_size) {}
  // The constraint for one generation; `start_after` as in TokenConstraint. Throws ApiError 400.
  std::shared_ptr<TokenConstraint> make(const RequestedConstraint& request, std::vector<int32_t> end_ids,
                                        int32_t start_after);

 private:
  const Tokenizer& tokenizer_;
  int64_t vocab_size_;
  GrammarCache cache_;
  std::once_flag trie_once_;
  std::shared_ptr<const TokenTrie> trie_;
};

}  // namespace qwick
