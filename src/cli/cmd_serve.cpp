// qwick serve: the OpenAI-compatible HTTP server (src/server) over the model's engine.
//
// Starts listening at once (GET /health is 503 "Loading model" until the model is in), loads the
// model and its text files (the built-in small model without -m), and serves until SIGINT or
// SIGTERM. Tested end to end by tests/node/server_*.mjs through ctest.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/args.h"
#include "cli/bench_cost.h"
#include "cli/cache_budget.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/model_text.h"
#include "cli/serve_options.h"
#include "runtime/backend_engine.h"
#include "server/serve.h"

namespace qwick {
namespace {

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Everything a served model owns, kept alive while the server runs.
struct ServedEngine {
  ServedEngine(Engine e, ModelText t) : engine(std::move(e)), text(std::move(t)) {}
  Engine engine;
  ModelText text;
  std::unique_ptr<BackendEngine> completions;
};

}  // namespace

int cmd_serve(int argc, char** argv) {
  EngineOptions engine_options;
  ServeOptions o;
  ArgParser p("qwick serve [options]",
              "OpenAI-compatible HTTP server: POST /v1/chat/completions, /v1/completions, /tokenize,\n"
              "/detokenize, /apply-template; GET /v1/models, /health, /metrics, /props.\n"
              "Without -m it serves the built-in small model.");
  engine_options.add_to(p);
  o.add_to(p);
  if (!p.parse(argc, argv)) return 0;
  o.validate();

  return run_server(o.server, [&]() -> LoadedModel {
    Engine engine = open_engine(engine_options);
    ModelText text = load_model_text(engine.model->dir.string());
    auto served = std::make_shared<ServedEngine>(std::move(engine), std::move(text));
    const Model& model = *served->engine.model;
    BackendEngineOptions eo;
    eo.prefill_chunk = o.chunk;
    eo.draft_max = served->engine.draft_max;
    // Measured after the weights are in: what is left is what the cache may take a share of.
    const CacheBudget budget =
        cache_budget(o.cache_ram_mib, o.cache_ram_fraction, served->engine.backend->memory().device_free,
                     host_available_bytes());
    eo.cache_bytes = static_cast<size_t>(budget.bytes);
    eo.min_snapshot_tokens = o.cache_min_tokens;
    served->completions =
        std::make_unique<BackendEngine>(*served->engine.backend, model.config.vocab_size, eo);

    LoadedModel loaded;
    ServedModel& m = loaded.served;
    m.path = std::filesystem::absolute(model.dir).string();
    m.id = !o.alias.empty() ? o.alias
                            : std::filesystem::absolute(model.dir).lexically_normal().filename().string();
    if (m.id.empty()) m.id = m.path;
    m.tokenizer = &served->text.tokenizer;
    m.template_kind = served->text.template_kind;
    m.chat_template = read_text_file(model.dir / "chat_template.jinja");
    m.engine = served->completions.get();
    m.stop_ids = model.stop_token_ids();
    m.defaults = o.request_defaults(model.generation, model.config.vocab_size);
    const TokenCost cost = token_cost(model, engine_options.backend_options().kv_dtype);
    m.meta = {{"n_vocab", model.config.vocab_size},
              {"n_ctx_train", model.config.max_position_embeddings},
              {"n_ctx", served->completions->context_size()},
              {"n_embd", model.config.hidden_size},
              {"n_params", static_cast<int64_t>(cost.total_params)},
              {"size", static_cast<int64_t>(model.checkpoint->total_bytes())}};
    std::fprintf(stderr, "qwick serve: %s on %s, context %lld tokens, prompt cache %lld MiB (%s)\n",
                 m.path.c_str(), served->engine.backend->name().c_str(),
                 static_cast<long long>(m.meta["n_ctx"].get<int64_t>()),
                 static_cast<long long>(budget.bytes >> 20), budget.origin.c_str());
    std::fprintf(stderr, "qwick serve: %s\n", ServeOptions::describe(m.defaults).c_str());
    loaded.owner = served;
    return loaded;
  });
}

}  // namespace qwick
