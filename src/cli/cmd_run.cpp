// qwick run: one generation from a prompt, with llama.cpp-style timing lines.
//
// A text prompt (-p, -f) is a user message put through the model's chat template (thinking on
// unless --no-think), or with --raw the whole prompt as written (special tokens in it honoured).
// The generated text is printed as it streams, exactly as the model writes it (reasoning, the
// </think> tag and tool-call markup included: `qwick chat` is the parsed view). A prompt of token
// ids (--prompt-ids) prints the generated ids instead.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/model_text.h"
#include "cli/text_io.h"
#include "cli/token_ids.h"
#include "core/error.h"
#include "runtime/backend_engine.h"
#include "text/stream_decoder.h"

namespace qwick {
namespace {

std::string read_prompt_file(const std::string& path) {
  if (path == "-") return read_stdin();
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("-f: cannot read {}", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The prompt text the model sees for a user's text.
std::string prompt_from_text(const std::string& text, const std::string& system, bool raw, bool think,
                             ChatTemplateKind kind) {
  if (raw) return text;
  ChatTemplateInput in;
  if (!system.empty()) in.messages.push_back({{"role", "system"}, {"content", system}});
  in.messages.push_back({{"role", "user"}, {"content", text}});
  in.kwargs["enable_thinking"] = think;
  return render_chat_template(in, kind);
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
  std::string prompt_text, prompt_file, system_prompt;
  bool raw = false, think = true;
  ArgParser p("qwick run [options] (-p TEXT | -f FILE | --prompt-ids IDS)",
              "Prefills the prompt, generates up to -n tokens and prints them on stdout as they come (text\n"
              "for a text prompt, ids for --prompt-ids), then the prompt and generation speed on stderr.\n"
              "A text prompt is one user message in the model's chat template unless --raw.");
  engine.add_to(p);
  p.option({"-p", "--prompt"}, "TEXT", "prompt text", &prompt_text);
  p.option({"-f", "--file"}, "FILE", "read the prompt text from FILE (- = stdin)", &prompt_file);
  p.option({"--prompt-ids"}, "IDS", "prompt as token ids, comma or space separated", &prompt_ids);
  p.flag({"--raw"}, "use the text as the whole prompt, without the chat template", &raw);
  p.option({"-sys", "--system"}, "TEXT", "system message (chat template only)", &system_prompt);
  p.flag({"--think"}, "reason before answering (template's enable_thinking; --no-think = off)", &think);
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
  const bool text_mode = !prompt_text.empty() || !prompt_file.empty();
  if (text_mode && !prompt_ids.empty()) fail("give the prompt as text (-p, -f) or as --prompt-ids, not both");
  if (!prompt_text.empty() && !prompt_file.empty()) fail("give the prompt with -p or with -f, not both");
  std::vector<int32_t> prompt = parse_token_ids(prompt_ids, "--prompt-ids");
  if (!text_mode && prompt.empty()) fail("no prompt: pass -p TEXT, -f FILE or --prompt-ids IDS");

  Engine e = open_engine(engine);
  std::unique_ptr<ModelText> text;
  if (text_mode) {
    text = std::make_unique<ModelText>(load_model_text(e.model->dir.string()));
    const std::string user = prompt_file.empty() ? prompt_text : read_prompt_file(prompt_file);
    prompt =
        text->tokenizer.encode(prompt_from_text(user, system_prompt, raw, think, text->template_kind), true);
    if (prompt.empty()) fail("the prompt is empty");
  }
  SamplingParams sp;
  sp.temperature = static_cast<float>(temp);
  sp.top_k = top_k;
  sp.top_p = static_cast<float>(top_p);
  sp.min_p = static_cast<float>(min_p);
  sp.seed = static_cast<uint64_t>(seed);
  CompletionJob job;
  job.prompt = std::move(prompt);
  job.sampling = sp;
  job.max_tokens = n_predict;
  if (!ignore_eos) job.stop_ids = e.model->stop_token_ids();
  job.reuse = false;
  BackendEngineOptions eo;
  eo.prefill_chunk = chunk;
  eo.cache_bytes = 0;
  eo.draft_max = e.draft_max;
  BackendEngine generator(*e.backend, e.model->config.vocab_size, eo);
  bool first = true;
  std::unique_ptr<StreamDecoder> decoder;
  if (text) decoder = std::make_unique<StreamDecoder>(text->tokenizer);
  TokenCallback print([&](const GeneratedToken& token) {
    if (decoder)
      write_stdout(decoder->push(token.id));
    else
      std::printf(first ? "%d" : " %d", token.id);
    std::fflush(stdout);
    first = false;
    return TokenAction::kContinue;
  });
  const CompletionStats r = generator.run(job, print);
  if (decoder) write_stdout(decoder->flush());
  std::printf("\n");
  std::fflush(stdout);
  print_timing("prompt eval time", r.prompt_ms, r.prompt_tokens, "tokens");
  print_timing("       eval time", r.generation_ms, r.generated_tokens, "tokens");
  std::fprintf(stderr, "generated %lld tokens, finish reason: %s\n",
               static_cast<long long>(r.generated_tokens), r.finish_reason.c_str());
  if (r.draft_n > 0)
    std::fprintf(stderr, "speculative drafts: %lld accepted of %lld (%.1f %%)\n",
                 static_cast<long long>(r.draft_n_accepted), static_cast<long long>(r.draft_n),
                 100.0 * static_cast<double>(r.draft_n_accepted) / static_cast<double>(r.draft_n));
  return 0;
}

}  // namespace qwick
