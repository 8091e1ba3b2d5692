// qwick run: one generation from a prompt, with llama.cpp-style timing lines.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "runtime/generate.h"

namespace qwick {
namespace {

// "1,2,3" or "1 2 3" -> ids.
std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::string item;
  std::istringstream in(text);
  while (in >> item) {
    std::istringstream parts(item);
    std::string part;
    while (std::getline(parts, part, ','))
      if (!part.empty()) {
        const int64_t v = parse_int(part, "--prompt-ids");
        if (v < 0 || v > INT32_MAX) fail("--prompt-ids: {} is not a token id", v);
        ids.push_back(static_cast<int32_t>(v));
      }
  }
  return ids;
}

void print_timing(const char* label, double ms, int64_t n, const char* unit) {
  std::fprintf(stderr, "%s = %10.2f ms / %5lld %s (%8.2f ms per token, %8.2f tokens per second)\n", label, ms,
               static_cast<long long>(n), unit, n ? ms / static_cast<double>(n) : 0.0,
               ms > 0 ? 1000.0 * static_cast<double>(n) / ms : 0.0);
}

}  // namespace

int cmd_run(int argc, char** argv) {
  EngineOptions engine;
  std::string prompt_ids;
  int64_t n_predict = 128, chunk = 512, seed = 0;
  double temp = 0.0, top_p = 1.0, min_p = 0.0;
  int top_k = 0;
  bool ignore_eos = false;
  ArgParser p("qwick run [options] --prompt-ids IDS",
              "Prefills the prompt, generates up to -n tokens, prints the generated ids on stdout and the\n"
              "prompt and generation speed on stderr.");
  engine.add_to(p);
  p.option({"--prompt-ids"}, "IDS", "prompt as token ids, comma or space separated", &prompt_ids);
  p.option({"-n", "--n-predict"}, "N", "tokens to generate (-1 = until a stop token)", &n_predict,
           "LLAMA_ARG_N_PREDICT");
  p.option({"--temp"}, "T", "temperature (0 = greedy)", &temp);
  p.option({"--top-k"}, "K", "top-k cut (0 = off)", &top_k);
  p.option({"--top-p"}, "P", "top-p cut (1 = off)", &top_p);
  p.option({"--min-p"}, "P", "min-p cut (0 = off)", &min_p);
  p.option({"-s", "--seed"}, "N", "sampling seed", &seed);
  p.option({"--chunk"}, "N", "prefill chunk size", &chunk);
  p.flag({"--ignore-eos"}, "keep generating past stop tokens", &ignore_eos);
  if (!p.parse(argc, argv)) return 0;
  const std::vector<int32_t> prompt = parse_ids(prompt_ids);
  if (prompt.empty()) fail("no prompt: pass --prompt-ids (token ids)");

  Engine e = open_engine(engine);
  SamplingParams sp;
  sp.temperature = static_cast<float>(temp);
  sp.top_k = top_k;
  sp.top_p = static_cast<float>(top_p);
  sp.min_p = static_cast<float>(min_p);
  sp.seed = static_cast<uint64_t>(seed);
  Sampler sampler(sp, e.model->config.vocab_size);
  GenerationRequest req;
  req.prompt = prompt;
  req.max_tokens = n_predict;
  req.stop_ids = e.model->stop_token_ids();
  req.ignore_eos = ignore_eos;
  req.prefill_chunk = chunk;
  bool first = true;
  const GenerationResult r = generate(*e.backend, sampler, e.model->config.vocab_size, req, [&](int32_t token) {
    std::printf(first ? "%d" : " %d", token);
    std::fflush(stdout);
    first = false;
    return true;
  });
  std::printf("\n");
  std::fflush(stdout);
  print_timing("prompt eval time", r.prompt_ms, r.prompt_tokens, "tokens");
  print_timing("       eval time", r.decode_ms, r.decode_steps, "runs  ");
  std::fprintf(stderr, "generated %zu tokens, finish reason: %s\n", r.tokens.size(), r.finish_reason.c_str());
  return 0;
}

}  // namespace qwick
