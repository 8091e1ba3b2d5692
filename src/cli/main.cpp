// qwick: an inference engine for Qwen3.6-35B-A3B. Dispatches to the sub-commands.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "core/error.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

constexpr Command kCommands[] = {
    {"serve", "OpenAI-compatible HTTP server (chat completions, streaming, tools, prompt reuse)",
     qwick::cmd_serve},
    {"run", "generate from a prompt (text or token ids) and print timings", qwick::cmd_run},
    {"chat", "talk with the model: a conversation on stdin/stdout", qwick::cmd_chat},
    {"eval", "teacher-forced pass over a token file: perplexity, logits vs a reference", qwick::cmd_eval},
    {"info", "summarise a model directory: config, layers, tensors, quantization", qwick::cmd_info},
    {"make-model", "write a random-weight checkpoint (tiny, small or the full 35B-A3B shapes)",
     qwick::cmd_make_model},
    {"bench", "prefill and decode throughput over lengths, GB/s and TFLOP/s, pp/tg table", qwick::cmd_bench},
    {"schema-bench", "compile a folder of JSON schemas: coverage per split, compile and token-mask times",
     qwick::cmd_schema_bench},
    {"tokenize", "text on stdin -> token ids (JSON) with the model's tokenizer", qwick::cmd_tokenize},
    {"detokenize", "token ids on stdin -> text", qwick::cmd_detokenize},
    {"template", "conversation (JSON) on stdin -> the exact prompt text of the chat template",
     qwick::cmd_template},
};

void print_usage(FILE* out) {
  std::fprintf(
      out,
      "qwick %s - inference engine for Qwen3.6-35B-A3B\n\nusage: qwick <command> [options]\n\ncommands:\n",
      QWICK_VERSION);
  for (const auto& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.summary);
  std::fprintf(out, "\n'qwick <command> --help' lists a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  if (name == "--version" || name == "version") {
    std::printf("qwick %s\n", QWICK_VERSION);
    return 0;
  }
  for (const auto& c : kCommands) {
    if (name != c.name) continue;
    std::string label = std::string("qwick ") + c.name;
    argv[1] = label.data();
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const qwick::Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "error: out of memory\n");
      return 1;
    }
  }
  std::fprintf(stderr, "error: unknown command \"%s\"\n\n", name.c_str());
  print_usage(stderr);
  return 2;
}
