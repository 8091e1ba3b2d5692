// qwick eval: a teacher-forced pass over a token file, compared with another implementation.
//
// Last line, always: "tokens=T ppl=P" plus, with --reference, "rel_err=E max_abs=M top1=A%".
#include <fmt/ranges.h>
#include <cmath>
#include <cstdio>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "model/tensor_io.h"

namespace qwick {

int cmd_eval(int argc, char** argv) {
  EngineOptions engine;
  std::string tokens_file, tokens_key = "tokens", reference_file, reference_key = "logits", out_file;
  int64_t chunk = 512, decode_from = -1;
  ArgParser p("qwick eval --model DIR --tokens FILE [options]",
              "Runs one teacher-forced pass over the int32 token tensor in FILE and prints the perplexity;\n"
              "with --reference, compares the logits against a [T, vocab] tensor.");
  engine.add_to(p);
  p.option({"--tokens"}, "FILE", "safetensors file with the input token ids", &tokens_file);
  p.option({"--tokens-key"}, "NAME", "tensor holding the ids", &tokens_key);
  p.option({"--reference"}, "FILE", "safetensors file with reference logits", &reference_file);
  p.option({"--key"}, "NAME", "reference logits tensor", &reference_key);
  p.option({"--out"}, "FILE", "write this run's logits here (safetensors, key \"logits\")", &out_file);
  p.option({"--chunk"}, "N", "prefill chunk size", &chunk);
  p.option({"--decode-from"}, "K", "prefill K tokens, then decode the rest one at a time", &decode_from);
  if (!p.parse(argc, argv)) return 0;
  if (tokens_file.empty()) fail("--tokens is required");

  const std::vector<int32_t> tokens = read_i32_tensor(tokens_file, tokens_key);
  if (tokens.empty()) fail("{}: tensor \"{}\" is empty", tokens_file, tokens_key);
  F32Tensor reference;
  if (!reference_file.empty()) reference = read_f32_tensor(reference_file, reference_key);

  Engine e = open_engine(engine);
  const int64_t T = static_cast<int64_t>(tokens.size()), V = e.model->config.vocab_size;
  if (!reference_file.empty() &&
      (reference.shape.size() != 2 || reference.shape[0] != T || reference.shape[1] != V))
    fail("{}: reference \"{}\" has shape [{}], expected [{}, {}]", reference_file, reference_key,
         fmt::join(reference.shape, ", "), T, V);
  if (decode_from > T) fail("--decode-from {} exceeds the {} tokens", decode_from, T);

  std::vector<float> logits(static_cast<size_t>(T * V));
  const int64_t prefill_n = decode_from >= 0 ? decode_from : T;
  PrefillOptions options;
  options.chunk = chunk;
  options.all_logits = true;
  if (prefill_n > 0)
    e.backend->prefill(std::span<const int32_t>(tokens.data(), static_cast<size_t>(prefill_n)), logits,
                       options);
  for (int64_t t = prefill_n; t < T; ++t)
    e.backend->decode(tokens[static_cast<size_t>(t)],
                      std::span<float>(logits.data() + t * V, static_cast<size_t>(V)));

  // Perplexity of tokens[1..T) under the logits of the positions before them.
  double nll = 0;
  for (int64_t t = 0; t + 1 < T; ++t) {
    const float* row = logits.data() + t * V;
    double m = row[0];
    for (int64_t v = 1; v < V; ++v) m = std::max<double>(m, row[v]);
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(row[v]) - m);
    nll += m + std::log(s) - row[tokens[static_cast<size_t>(t + 1)]];
  }
  const double ppl = T > 1 ? std::exp(nll / static_cast<double>(T - 1)) : NAN;

  if (!out_file.empty()) write_f32_tensor(out_file, "logits", F32Tensor{{T, V}, logits});

  if (reference_file.empty()) {
    std::printf("tokens=%lld ppl=%.6f\n", static_cast<long long>(T), ppl);
    return 0;
  }
  double diff2 = 0, ref2 = 0, max_abs = 0;
  int64_t agree = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* a = logits.data() + t * V;
    const float* r = reference.data.data() + t * V;
    int64_t arg_a = 0, arg_r = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double d = static_cast<double>(a[v]) - r[v];
      diff2 += d * d;
      ref2 += static_cast<double>(r[v]) * r[v];
      max_abs = std::max(max_abs, std::fabs(d));
      if (a[v] > a[arg_a]) arg_a = v;
      if (r[v] > r[arg_r]) arg_r = v;
    }
    agree += arg_a == arg_r;
  }
  std::printf("tokens=%lld rel_err=%.3e max_abs=%.3e top1=%.2f%% ppl=%.6f\n", static_cast<long long>(T),
              std::sqrt(diff2 / ref2), max_abs, 100.0 * static_cast<double>(agree) / static_cast<double>(T),
              ppl);
  return 0;
}

}  // namespace qwick
