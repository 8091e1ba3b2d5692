// qwick chat: an interactive conversation on stdin/stdout.
//
// Each stdin line is a user message (works on a pipe too, so it can be scripted); the reply
// streams through the output parser: reasoning dimmed on a terminal (or hidden with
// --hide-reasoning), then the answer. /reset starts over, /exit (or end of input) quits. The whole
// conversation is rendered by the chat template each turn and run through the same completion
// engine as the server, with its prompt reuse: a snapshot at the end of each turn's history means
// the next turn prefills only its new tokens.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/model_text.h"
#include "cli/reply_printer.h"
#include "core/error.h"
#include "runtime/backend_engine.h"
#include "text/chat_prompt.h"
#include "text/output_parser.h"
#include "text/stream_decoder.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

struct ChatOptions {
  std::string system_prompt;
  bool think = true, hide_reasoning = false, preserve_thinking = false;
  int64_t n_predict = -1, chunk = 512, seed = 0;
  std::optional<double> temp, top_p, min_p;
  int top_k = -1;
};

// Sampling settings: the command line's, else the model's generation_config.json, else greedy.
SamplingParams sampling_params(const ChatOptions& o, const GenerationConfig& g) {
  SamplingParams sp;
  sp.temperature = static_cast<float>(o.temp.value_or(g.temperature.value_or(0.0f)));
  sp.top_p = static_cast<float>(o.top_p.value_or(g.top_p.value_or(1.0f)));
  sp.min_p = static_cast<float>(o.min_p.value_or(g.min_p.value_or(0.0f)));
  sp.top_k = o.top_k >= 0 ? o.top_k : g.top_k.value_or(0);
  sp.seed = static_cast<uint64_t>(o.seed);
  return sp;
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  EngineOptions engine;
  ChatOptions o;
  ArgParser p("qwick chat [options]",
              "A conversation with the model: each line on stdin is a user message, the reply streams\n"
              "back. Commands: /reset (start over), /exit (or end of input).");
  engine.add_to(p);
  p.option({"-sys", "--system"}, "TEXT", "system message", &o.system_prompt);
  p.flag({"--think"}, "reason before answering (template's enable_thinking; --no-think = off)", &o.think);
  p.flag({"--hide-reasoning"}, "do not print the reasoning", &o.hide_reasoning);
  p.flag({"--preserve-thinking"}, "keep earlier replies' reasoning in the conversation (Qwen3.6 template)",
         &o.preserve_thinking);
  p.option({"-n", "--n-predict"}, "N", "most tokens per reply (-1 = until the model stops)", &o.n_predict,
           "LLAMA_ARG_N_PREDICT");
  p.option({"--temp"}, "T", "temperature (default: generation_config.json's, else 0 = greedy)", &o.temp);
  p.option({"--top-k"}, "K", "top-k cut (-1 = generation_config.json's, else off; 0 = off)", &o.top_k);
  p.option({"--top-p"}, "P", "top-p cut (default: generation_config.json's, else off)", &o.top_p);
  p.option({"--min-p"}, "P", "min-p cut (default: generation_config.json's, else off)", &o.min_p);
  p.option({"-s", "--seed"}, "N", "sampling seed", &o.seed);
  p.option({"--chunk"}, "N", "prefill chunk size", &o.chunk);
  if (!p.parse(argc, argv)) return 0;

  Engine e = open_engine(engine);
  const ModelText text = load_model_text(e.model->dir.string());
  const bool interactive = isatty(fileno(stdin));
  ReplyPrinter printer(stdout, !o.hide_reasoning, use_color(stdout));
  BackendEngineOptions eo;
  eo.prefill_chunk = o.chunk;
  eo.draft_max = e.draft_max;
  BackendEngine generator(*e.backend, e.model->config.vocab_size, eo);
  ojson messages = ojson::array();
  auto reset = [&] {
    messages = ojson::array();
    if (!o.system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", o.system_prompt}});
  };
  reset();

  std::string line;
  while (true) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      reset();
      std::fputs("(conversation cleared)\n", stderr);
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    ChatTemplateInput in;
    in.messages = messages;
    in.kwargs["enable_thinking"] = o.think;
    in.kwargs["preserve_thinking"] = o.preserve_thinking;
    ChatPrompt prompt = build_chat_prompt(in, text.template_kind, text.tokenizer, true);
    CompletionJob job;
    job.prompt = std::move(prompt.tokens);
    if (prompt.history_tokens > 0) job.snapshot_at.push_back(prompt.history_tokens);
    job.sampling = sampling_params(o, e.model->generation);
    job.max_tokens = o.n_predict;
    job.stop_ids = e.model->stop_token_ids();

    OutputParser parser({o.think, ojson::array()});
    StreamDecoder decoder(text.tokenizer);
    std::vector<OutputDelta> deltas;
    TokenCallback show([&](const GeneratedToken& token) {
      deltas.clear();
      parser.feed(decoder.push(token.id), deltas);
      printer.print(deltas);
      return TokenAction::kContinue;
    });
    const CompletionStats r = generator.run(job, show);
    deltas.clear();
    parser.feed(decoder.flush(), deltas);
    parser.finish(deltas);
    printer.print(deltas);
    printer.end(parser.message());

    const ParsedMessage& reply = parser.message();
    ojson assistant = {{"role", "assistant"}, {"content", reply.content}};
    if (!reply.reasoning_content.empty()) assistant["reasoning_content"] = reply.reasoning_content;
    if (!reply.tool_calls.empty()) {
      assistant["tool_calls"] = ojson::array();
      for (const ToolCall& c : reply.tool_calls)
        assistant["tool_calls"].push_back(
            {{"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    messages.push_back(std::move(assistant));
    if (r.finish_reason == "length") std::fputs("(reply cut at the token limit)\n", stderr);
  }
  return 0;
}

}  // namespace qwick
