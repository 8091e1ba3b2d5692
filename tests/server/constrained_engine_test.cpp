// Generation under a grammar on the tiny random-weight model: whatever the weights pick, the
// output follows the schema, and the engine stops where the grammar is complete.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <random>

#include "constrain/constraint_spec.h"
#include "constrain/json_schema.h"
#include "model/model.h"
#include "runtime/backend_engine.h"

namespace qwick {
namespace {

const Model& tiny() {
  static const std::unique_ptr<Model> model =
      load_model(std::filesystem::path(QWICK_FIXTURES) / "reference" / "tiny" / "mlx4");
  return *model;
}

constexpr int32_t kEnd = 511;

// The tiny model has no tokenizer: a vocabulary of every byte (ids 0-255) and multi-byte pieces
// of JSON-like text (ids 256-509: keys, punctuation runs, characters split across tokens).
std::shared_ptr<const TokenTrie> vocabulary() {
  std::vector<std::pair<int32_t, std::string>> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(b, std::string(1, static_cast<char>(b)));
  const std::vector<std::string> pieces = {
      "\"", "\":",      "\": ",     "\", \"", "{\"",  "\"}",   "},",   "[{", "}]",   "\n  ",
      "  ", "name",     "id",       "tags",   "true", "false", "null", "12", "3.5",  "-7",
      "e+", "\xC3\xA9", "\xE4\xB8", "\xAD",   "\\n",  "\\u00", "ab",   "cd", "kids", "v"};
  std::mt19937 rng(7);
  for (int32_t id = 256; id < 510; ++id) {
    std::string t = pieces[static_cast<size_t>(id - 256) % pieces.size()];
    if (id - 256 >= static_cast<int32_t>(pieces.size())) t += pieces[rng() % pieces.size()];
    tokens.emplace_back(id, t);
  }
  return std::make_shared<const TokenTrie>(tokens, tiny().config.vocab_size);
}

struct Collector : CompletionObserver {
  std::string text;
  const TokenTrie* trie = nullptr;
  bool cancelled() const override { return false; }
  void on_prefill(int64_t, int64_t) override {}
  TokenAction on_token(const GeneratedToken& t) override {
    text += trie->bytes(t.id);
    return TokenAction::kContinue;
  }
};

TEST(ConstrainedEngine, RandomWeightsFollowTheSchema) {
  BackendOptions o;
  o.threads = 1;
  auto backend = make_cpu_backend(tiny(), o);
  BackendEngine engine(*backend, tiny().config.vocab_size, {});
  const auto trie = vocabulary();
  GrammarCache cache;
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"id":{"type":"integer","minimum":1,"maximum":500},
          "tags":{"type":"array","items":{"enum":["ab","cd","é"]},"maxItems":4}},"required":["name","id"]})",
      R"({"$defs":{"n":{"type":"object","properties":{"v":{"type":"number"},"kids":{"type":"array","items":{"$ref":"#/$defs/n"},"maxItems":2}},"required":["v"]}},"$ref":"#/$defs/n"})",
      R"({"type":"array","items":{"type":["boolean","null",{"type":"string"}]}})",
  };
  int complete = 0;
  for (const char* text : schemas) {
    const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(text);
    std::shared_ptr<const Grammar> grammar;
    try {
      grammar = cache.get(ConstraintSpec::json_schema(schema));
    } catch (const UnsupportedSchema& e) {
      // The third schema has a malformed type list: refused by keyword.
      EXPECT_EQ(e.keyword(), "type");
      continue;
    }
    for (uint64_t seed = 0; seed < 4; ++seed) {
      CompletionJob job;
      job.prompt = {1, 2, 3, 4};
      job.max_tokens = 800;
      job.stop_ids = {kEnd};
      job.sampling.temperature = seed == 0 ? 0.0f : 1.0f;
      job.sampling.seed = seed;
      job.constraint = std::make_shared<TokenConstraint>(grammar, trie, job.stop_ids);
      Collector c;
      c.trie = trie.get();
      const CompletionStats stats = engine.run(job, c);
      GrammarMatcher check(grammar);
      ASSERT_TRUE(check.accept(c.text)) << c.text;
      if (stats.finish_reason == "stop") {
        ++complete;
        EXPECT_TRUE(check.accepting(check.current())) << c.text;
        const auto value = nlohmann::json::parse(c.text);  // throws if not JSON
        if (value.is_object()) {
          EXPECT_TRUE(value.contains(schema.contains("$ref") ? "v" : "id")) << c.text;
        }
      } else {
        EXPECT_EQ(stats.finish_reason, "length");
      }
    }
  }
  EXPECT_GE(complete, 4);
}

}  // namespace
}  // namespace qwick
