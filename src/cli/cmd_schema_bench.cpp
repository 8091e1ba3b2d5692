// qwick schema-bench DIR: how many JSON schemas of a directory compile, how long compiling takes
// and how long a token mask takes over a real vocabulary.
//
// DIR holds one folder per split of *.json schemas (the JSONSchemaBench layout). Each schema is
// compiled (ConstraintSpec::compile); a refused one is counted under the keyword named. For the
// compiled ones a random walk of up to --steps tokens, each chosen uniformly among those the mask
// allows, times every mask. Coverage per split is printed beside the published "declared
// coverage" of other engines when DIR/README.md has that table.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_text.h"
#include "cli/text_io.h"
#include "constrain/constraint_spec.h"
#include "constrain/json_schema.h"
#include "constrain/token_mask.h"
#include "core/error.h"
#include "text/tokenizer.h"

namespace qwick {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// The split folders' names in the paper's tables.
const std::map<std::string, std::string> kPaperNames = {
    {"Glaiveai2K", "GlaiveAI"},     {"Github_easy", "GitHub Easy"},
    {"Snowplow", "Snowplow"},       {"Github_medium", "GitHub Medium"},
    {"Kubernetes", "Kubernetes"},   {"WashingtonPost", "Washington Post"},
    {"Github_hard", "GitHub Hard"}, {"JsonSchemaStore", "JsonSchemaStore"}};

// README.md's "Declared coverage" table: paper split name -> its row's cells, and the header.
std::map<std::string, std::string> published(const fs::path& readme, std::string* header) {
  std::map<std::string, std::string> rows;
  std::istringstream in(read_file(readme));
  std::string line;
  bool in_table = false;
  while (std::getline(in, line)) {
    if (line.starts_with("Declared coverage")) in_table = true;
    if (!in_table || !line.starts_with("| ")) {
      if (in_table && !rows.empty()) break;
      continue;
    }
    const size_t cut = line.find(" |", 2);
    const std::string name = line.substr(2, cut - 2);
    if (name == "split")
      *header = line.substr(cut + 2);
    else
      rows[name] = line.substr(cut + 2);
  }
  return rows;
}

struct Split {
  int files = 0, compiled = 0;
};

}  // namespace

int cmd_schema_bench(int argc, char** argv) {
  std::string dir, tokenizer_path, model;
  int64_t steps = 64, seed = 1;
  ArgParser p(
      "qwick schema-bench DIR [options]",
      "Compiles every JSON schema under DIR/<split>/*.json into a grammar and times token masks over the\n"
      "tokenizer's vocabulary: coverage per split, compile time and mask time per token (p50/p99).");
  p.positional("DIR", "folder of split folders of schemas (e.g. ../shared/constrained/jsonschemabench)", &dir,
               true);
  p.option({"--tokenizer"}, "PATH", "tokenizer.json, or a model directory holding one", &tokenizer_path);
  p.option({"-m", "--model"}, "DIR", "model directory (when no --tokenizer; default: the built-in model)",
           &model);
  p.option({"--steps"}, "N", "masked tokens per schema (a random walk through the grammar)", &steps);
  p.option({"--seed"}, "N", "seed of the random walks", &seed);
  if (!p.parse(argc, argv)) return 0;
  if (!fs::is_directory(dir)) fail("{} is not a directory", dir);
  const Tokenizer tokenizer = Tokenizer::from_file(tokenizer_location(tokenizer_path, model));
  const TokenTrie trie = TokenTrie::from_tokenizer(tokenizer, tokenizer.id_limit());

  std::map<std::string, Split> splits;
  std::map<std::string, int> refused_by;
  std::vector<double> compile_ms, mask_ms;
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    Split& split = splits[f.parent_path().filename().string()];
    ++split.files;
    std::shared_ptr<const Grammar> grammar;
    const auto t0 = Clock::now();
    try {
      grammar = std::make_shared<const Grammar>(
          ConstraintSpec::json_schema(nlohmann::ordered_json::parse(read_file(f))).compile());
    } catch (const UnsupportedSchema& e) {
      ++refused_by["'" + e.keyword() + "'"];
      continue;
    } catch (const std::exception& e) {
      ++refused_by[std::string(e.what()).substr(0, 60)];
      continue;
    }
    compile_ms.push_back(ms_since(t0));
    ++split.compiled;
    try {
      GrammarMatcher matcher(grammar);
      TokenMasker masker(trie);
      for (int64_t s = 0; s < steps && matcher.can_continue(matcher.current()); ++s) {
        const auto t1 = Clock::now();
        const TokenMask& mask = masker.compute(matcher);
        mask_ms.push_back(ms_since(t1));
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < trie.vocab_size(); ++id)
          if (mask.allows(id)) allowed.push_back(id);
        if (allowed.empty()) break;
        if (!matcher.accept(trie.bytes(allowed[rng() % allowed.size()])))
          fail("{}: a masked token was rejected", f.string());
      }
    } catch (const Error& e) {
      write_stdout(fmt::format("{}: {}\n", f.string(), e.what()));
    }
  }

  std::string header;
  const auto paper = published(fs::path(dir) / "README.md", &header);
  write_stdout(fmt::format("{:<16} {:>6} {:>9} {:>9}  | published declared coverage / compliance{}\n",
                           "split", "files", "compiled", "coverage", header.empty() ? "" : ":" + header));
  int total = 0, compiled = 0;
  for (const auto& [name, s] : splits) {
    total += s.files;
    compiled += s.compiled;
    const auto pn = kPaperNames.find(name);
    const auto row = pn == kPaperNames.end() ? paper.end() : paper.find(pn->second);
    write_stdout(fmt::format("{:<16} {:>6} {:>9} {:>8.1f}%  | {}\n", name, s.files, s.compiled,
                             100.0 * s.compiled / std::max(1, s.files),
                             row == paper.end() ? "(not in the paper)" : row->second));
  }
  write_stdout(fmt::format("{:<16} {:>6} {:>9} {:>8.1f}%\n", "total", total, compiled,
                           100.0 * compiled / std::max(1, total)));
  write_stdout(fmt::format("compile time per schema: p50 {:.2f} ms, p99 {:.2f} ms\n",
                           percentile(compile_ms, 0.5), percentile(compile_ms, 0.99)));
  write_stdout(fmt::format("mask time per token ({} masks, {} tokens): p50 {:.3f} ms, p99 {:.3f} ms\n",
                           mask_ms.size(), trie.vocab_size(), percentile(mask_ms, 0.5),
                           percentile(mask_ms, 0.99)));
  std::vector<std::pair<int, std::string>> reasons;
  for (const auto& [why, n] : refused_by) reasons.emplace_back(n, why);
  std::sort(reasons.rbegin(), reasons.rend());
  for (const auto& [n, why] : reasons) write_stdout(fmt::format("refused {:>4}: {}\n", n, why));
  return 0;
}

}  // namespace qwick
