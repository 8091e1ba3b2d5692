#include "constrain/constraint_spec.h"

#include "constrain/gbnf_parser.h"
#include "constrain/json_schema.h"

namespace qwick {

ConstraintSpec ConstraintSpec::tool_calls(const ToolCallRule& rule) {
  const nlohmann::ordered_json j = {{"tools", rule.tools},
                                    {"name", rule.name},
                                    {"parallel", rule.parallel},
                                    {"text_first", rule.text_first}};
  return {Kind::kToolCalls, j.dump()};
}

std::string ConstraintSpec::gbnf() const {
  switch (kind) {
    case Kind::kGrammar:
      return text;
    case Kind::kJsonSchema:
      return json_schema_to_gbnf(nlohmann::ordered_json::parse(text));
    case Kind::kJsonObject:
      return json_object_gbnf();
    case Kind::kToolCalls: {
      const auto j = nlohmann::ordered_json::parse(text);
      return tool_call_gbnf({j["tools"], j["name"], j["parallel"], j["text_first"]});
    }
  }
  return text;
}

Grammar ConstraintSpec::compile() const {
  // Schema grammars may repeat up to the schema compiler's bound; user grammars are held lower.
  GbnfOptions options;
  if (kind != Kind::kGrammar) options.max_repeat = JsonSchemaOptions{}.max_repeat;
  return parse_gbnf(gbnf(), options);
}

std::shared_ptr<const Grammar> GrammarCache::get(const ConstraintSpec& spec) {
  std::string key = std::to_string(static_cast<int>(spec.kind)) + ":" + spec.text;
  {
    std::lock_guard lock(mutex_);
    if (const auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  // Compiled outside the lock: a slow schema does not hold up others.
  auto grammar = std::make_shared<const Grammar>(spec.compile());
  std::lock_guard lock(mutex_);
  if (index_.contains(key)) return index_[key]->second;
  lru_.emplace_front(key, grammar);
  index_[std::move(key)] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return grammar;
}

size_t GrammarCache::size() const {
  std::lock_guard lock(mutex_);
  return lru_.size();
}

}  // namespace qwick
