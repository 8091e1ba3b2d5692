// qwick tokenize / qwick detokenize: the model's tokenizer for scripts.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_text.h"
#include "cli/text_io.h"
#include "cli/token_ids.h"
#include "core/error.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace qwick {
namespace {

// Encodes `text` `runs` times and prints throughput as one JSON line: the first run (empty word
// cache) and the median of the others.
void benchmark(const Tokenizer& tokenizer, const std::string& text, bool special, int64_t runs) {
  auto timed_encode = [&](size_t* n_tokens) {
    const auto t0 = std::chrono::steady_clock::now();
    *n_tokens = tokenizer.encode(text, special).size();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  size_t n_tokens = 0;
  const double cold = timed_encode(&n_tokens);
  std::vector<double> warm;
  for (int64_t r = 1; r < runs; ++r) warm.push_back(timed_encode(&n_tokens));
  std::sort(warm.begin(), warm.end());
  const double median = warm.empty() ? cold : warm[warm.size() / 2];
  nlohmann::ordered_json j;
  j["bytes"] = text.size();
  j["tokens"] = n_tokens;
  j["runs"] = runs;
  j["cold_seconds"] = cold;
  j["median_seconds"] = median;
  j["cold_mb_per_s"] = static_cast<double>(text.size()) / 1e6 / cold;
  j["mb_per_s"] = static_cast<double>(text.size()) / 1e6 / median;
  j["tokens_per_s"] = static_cast<double>(n_tokens) / median;
  write_stdout(j.dump() + "\n");
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  std::string tokenizer_path, model;
  bool special = false, jsonl = false;
  int64_t bench = 0;
  ArgParser p("qwick tokenize [options] < TEXT",
              "Reads text on stdin and prints its token ids as a JSON array. Added tokens that are not\n"
              "special (<think>, <tool_call>, ...) are always matched; special ones (<|im_start|>, ...)\n"
              "only with --special.");
  p.option({"--tokenizer"}, "PATH", "tokenizer.json, or a model directory holding one", &tokenizer_path);
  p.option({"-m", "--model"}, "DIR", "model directory (when no --tokenizer; default: the built-in model)",
           &model, "LLAMA_ARG_MODEL");
  p.flag({"--special"}, "match special tokens written in the text", &special);
  p.flag({"--jsonl"}, "each stdin line is a JSON string; print one id array per line", &jsonl);
  p.option({"--bench"}, "RUNS", "encode the text RUNS times and print throughput (JSON) instead of ids",
           &bench);
  if (!p.parse(argc, argv)) return 0;
  const Tokenizer tokenizer = Tokenizer::from_file(tokenizer_location(tokenizer_path, model));
  const std::string input = read_stdin();
  if (bench > 0) {
    benchmark(tokenizer, input, special, bench);
  } else if (jsonl) {
    for_each_line(input, [&](const std::string& line, size_t line_no) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_string()) fail("stdin line {}: expected a JSON string", line_no);
      write_stdout(token_ids_json(tokenizer.encode(j.get<std::string>(), special)) + "\n");
    });
  } else {
    write_stdout(token_ids_json(tokenizer.encode(input, special)) + "\n");
  }
  return 0;
}

int cmd_detokenize(int argc, char** argv) {
  std::string tokenizer_path, model;
  bool skip_special = false, jsonl = false;
  ArgParser p("qwick detokenize [options] < IDS",
              "Reads token ids on stdin (a JSON array, or a comma/space separated list) and prints their\n"
              "text (bytes that do not form UTF-8 shown as U+FFFD).");
  p.option({"--tokenizer"}, "PATH", "tokenizer.json, or a model directory holding one", &tokenizer_path);
  p.option({"-m", "--model"}, "DIR", "model directory (when no --tokenizer; default: the built-in model)",
           &model, "LLAMA_ARG_MODEL");
  p.flag({"--skip-special"}, "leave out special tokens", &skip_special);
  p.flag({"--jsonl"}, "each stdin line is a JSON array of ids; print one JSON string per line", &jsonl);
  if (!p.parse(argc, argv)) return 0;
  const Tokenizer tokenizer = Tokenizer::from_file(tokenizer_location(tokenizer_path, model));
  auto decode = [&](const std::vector<int32_t>& ids) {
    for (int32_t id : ids)
      if (!tokenizer.has_token(id))
        fail("token id {} is not in the tokenizer (ids below {})", id, tokenizer.id_limit());
    return utf8_lossy(tokenizer.decode(ids, skip_special));
  };
  const std::string input = read_stdin();
  if (!jsonl) {
    write_stdout(decode(parse_token_ids(input, "stdin")));
    return 0;
  }
  for_each_line(input, [&](const std::string& line, size_t line_no) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_array()) fail("stdin line {}: expected a JSON array of ids", line_no);
    write_stdout(
        nlohmann::json(decode(parse_token_ids(line, "stdin line " + std::to_string(line_no)))).dump() + "\n");
  });
  return 0;
}

}  // namespace qwick
