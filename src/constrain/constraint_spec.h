// What a request asks the output to be, and its compiled grammar: the one entry point the APIs
// use (Chat Completions' response_format / grammar / json_schema / tool_choice; the other APIs map
// their fields onto the same spec).
//
//   ConstraintSpec spec = ConstraintSpec::json_schema(schema_json);
//   std::shared_ptr<const Grammar> g = cache.get(spec);   // throws Error / UnsupportedSchema
//
// A compiled grammar depends only on the spec, so it is cached by the spec's text (GrammarCache)
// and shared between requests; a matcher (per request) holds the state.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "constrain/grammar.h"
#include "constrain/tool_call_grammar.h"

namespace qwick {

struct ConstraintSpec {
  enum class Kind { kGrammar, kJsonSchema, kJsonObject, kToolCalls };
  Kind kind = Kind::kJsonObject;
  std::string text;  // the GBNF text, the schema serialized, or the ToolCallRule serialized

  static ConstraintSpec grammar(std::string gbnf) { return {Kind::kGrammar, std::move(gbnf)}; }
  static ConstraintSpec json_schema(const nlohmann::ordered_json& schema) {
    return {Kind::kJsonSchema, schema.dump()};
  }
  static ConstraintSpec json_object() { return {Kind::kJsonObject, ""}; }
  static ConstraintSpec tool_calls(const ToolCallRule& rule);

  // The GBNF the spec stands for (a schema compiled); throws UnsupportedSchema / Error.
  std::string gbnf() const;
  // The validated grammar; throws as gbnf() does, or Error for a grammar the matcher cannot run.
  Grammar compile() const;
};

class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 64) : capacity_(capacity) {}
  // The spec's grammar, compiled on first use. Failures are not cached (they are cheap to repeat
  // and carry the message).
  std::shared_ptr<const Grammar> get(const ConstraintSpec& spec);
  size_t size() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const Grammar>>;
  size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace qwick
