// qwick_scripted_server: `qwick serve` with the scripted engine (scripted_engine.h) instead of a
// model, for the Node tests that check reasoning and tool-call streams through the openai client
// (tests/node/server_scripted.mjs). Same server options as qwick serve, plus the engine's delays.
// The tokenizer is the synthetic one of `qwick make-model` (vocabulary 512).
#include <cstdio>
#include <thread>

#include "cli/args.h"
#include "cli/serve_options.h"
#include "core/error.h"
#include "model/synthetic_model.h"
#include "scripted_engine.h"
#include "server/serve.h"
#include "text/synthetic_tokenizer.h"

namespace {

constexpr int64_t kVocab = 512;

struct Scripted {
  qwick::Tokenizer tokenizer;
  std::unique_ptr<qwick::test::ScriptedEngine> engine;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace qwick;
  try {
    ServeOptions o;
    int64_t token_delay_ms = 0, chunk_delay_ms = 0, prefill_chunks = 1, context = 4096, load_delay_ms = 0;
    ArgParser p("qwick_scripted_server [options]", "qwick serve over a scripted engine (tests only).");
    o.add_to(p);
    p.option({"-c", "--ctx-size"}, "N", "context size", &context);
    p.option({"--token-delay-ms"}, "MS", "delay per generated token", &token_delay_ms);
    p.option({"--prefill-chunks"}, "N", "simulated prefill chunks", &prefill_chunks);
    p.option({"--chunk-delay-ms"}, "MS", "delay per prefill chunk", &chunk_delay_ms);
    p.option({"--load-delay-ms"}, "MS", "time the \"model\" takes to load", &load_delay_ms);
    if (!p.parse(argc, argv)) return 0;
    o.validate();
    return run_server(o.server, [&]() -> LoadedModel {
      std::this_thread::sleep_for(std::chrono::milliseconds(load_delay_ms));
      auto s = std::make_shared<Scripted>(
          Scripted{Tokenizer::from_json_text(synthetic_tokenizer_json(special_token_base(kVocab)),
                                             "synthetic tokenizer"),
                   nullptr});
      test::ScriptedEngine::Options eo;
      eo.context = context;
      eo.prefill_chunks = static_cast<int>(prefill_chunks);
      eo.chunk_delay = std::chrono::milliseconds(chunk_delay_ms);
      eo.token_delay = std::chrono::milliseconds(token_delay_ms);
      s->engine = std::make_unique<test::ScriptedEngine>(s->tokenizer, kVocab, eo);
      LoadedModel m;
      m.served.id = o.alias.empty() ? "scripted" : o.alias;
      m.served.path = "(scripted)";
      m.served.tokenizer = &s->tokenizer;
      m.served.engine = s->engine.get();
      m.served.stop_ids = {*s->tokenizer.added_token_id("<|im_end|>")};
      m.served.defaults = o.request_defaults({}, kVocab);
      m.owner = s;
      return m;
    });
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
