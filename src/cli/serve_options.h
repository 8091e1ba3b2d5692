// The options of `qwick serve` (llama-server's names and LLAMA_ARG_* environment variables where
// it has them), shared with the test server that serves a scripted engine (tests/server), and
// how they become the server's request defaults: the command line, else the model's
// generation_config.json, else the OpenAI defaults (temperature 1, no cuts, no penalties).
//
// Tested through `qwick serve` in tests/node/server_api.mjs (--help lists every option, env vars).
#pragma once

#include <optional>
#include <string>

#include "cli/args.h"
#include "model/config.h"
#include "server/api_server.h"
#include "server/openai_request.h"

namespace qwick {

struct ServeOptions {
  ServerOptions server;
  std::string alias;
  int64_t n_predict = -1, seed = -1;
  std::optional<double> temp, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
  int top_k = -1;  // -1: from generation_config.json
  int repeat_last_n = 64;
  std::string chat_template_kwargs;  // JSON object
  std::string reasoning_format = "deepseek";
  bool cache_prompt = true;
  int64_t cache_ram_mib = -1;  // -1: cache_ram_fraction of the free memory (cache_budget.h)
  double cache_ram_fraction = 0.25;
  int64_t cache_min_tokens = 64;
  int64_t chunk = 512;

  void add_to(ArgParser& parser);
  // Throws Error for a malformed value (--chat-template-kwargs that is not a JSON object, ...),
  // before anything is loaded.
  void validate() const;
  RequestDefaults request_defaults(const GenerationConfig& generation, int64_t vocab_size) const;
  // A line saying what requests get when they do not say.
  static std::string describe(const RequestDefaults& defaults);
};

}  // namespace qwick
