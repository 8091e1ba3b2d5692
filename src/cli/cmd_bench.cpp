// qwick bench: prefill and decode throughput over prompt/context lengths, against this model's
// per-token byte and FLOP counts (bench_cost.h), plus the llama-bench style pp/tg table.
//
//   prefill at L   reset, prefill L synthetic tokens (chunks of --chunk), median of --prefill-reps
//                  (fewer once a length's runs exceed --rep-budget seconds)
//   decode at L    right after a prefill of L tokens, --decode-reps runs of --decode-tokens greedy
//                  steps each (device-side sampling where the backend has it), median tokens/s;
//                  GB/s = bytes a step must read (active weights + DeltaNet states + KV of the
//                  context) / time per token
//   ppN / tgN      prefill N tokens from empty; N greedy decode steps from empty; mean ± sd
//   --stages       one more prefill per length with the backend's per-stage device times (CUDA)
//   --parallel     instead of the tables: N sequences decoding together, aggregate tokens/s
//                  (bench_parallel.h)
// Also prints the device's measured copy bandwidth and the backend's peak device memory, and writes
// --json and --plot (PNG) files.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/bench_cost.h"
#include "cli/bench_parallel.h"
#include "cli/bench_speculation.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/png_plot.h"
#include "core/error.h"
#include "model/synthetic_model.h"

namespace qwick {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<int64_t> parse_lengths(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    int64_t mult = 1;
    if (item.back() == 'K' || item.back() == 'k') mult = 1024, item.pop_back();
    const int64_t v = parse_int(item, "--lengths") * mult;
    if (v <= 0) fail("--lengths: {} is not a positive length", v);
    out.push_back(v);
  }
  if (out.empty()) fail("--lengths: no lengths given");
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

// Writes a bench's --json file; Error when it cannot be written.
void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) fail("{}: cannot write", path);
}

std::string length_name(int64_t n) {
  return n >= 1024 && n % 1024 == 0 ? std::to_string(n / 1024) + "K" : std::to_string(n);
}

class Runner {
 public:
  Runner(Backend& b, int64_t vocab)
      : backend_(b),
        logits_(static_cast<size_t>(vocab)),
        vocab_(special_token_base(vocab)) {}  // ordinary ids only
  // Synthetic prompt: a fixed pseudo-random sequence of ordinary token ids.
  std::span<const int32_t> prompt(int64_t n) {
    while (static_cast<int64_t>(tokens_.size()) < n) {
      state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
      tokens_.push_back(static_cast<int32_t>((state_ >> 33) % static_cast<uint64_t>(vocab_)));
    }
    return {tokens_.data(), static_cast<size_t>(n)};
  }
  // Seconds to prefill n tokens into an empty sequence.
  double prefill(int64_t n, int64_t chunk, std::map<std::string, double>* stage_ms = nullptr) {
    backend_.reset();
    PrefillOptions opt;
    opt.chunk = chunk;
    opt.stage_ms = stage_ms;
    const auto t0 = Clock::now();
    backend_.prefill(prompt(n), logits_, opt);
    const double s = seconds_since(t0);
    next_ = static_cast<int32_t>(std::max_element(logits_.begin(), logits_.end()) - logits_.begin());
    return s;
  }
  // Seconds for `steps` greedy decode steps continuing the current sequence.
  double decode(int64_t steps) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < steps; ++i) {
      int32_t next = 0;
      if (backend_.decode_sampled(next_, SamplingParams{}, &next)) {
        next_ = next;
      } else {
        backend_.decode(next_, logits_);
        next_ = static_cast<int32_t>(std::max_element(logits_.begin(), logits_.end()) - logits_.begin());
      }
    }
    return seconds_since(t0);
  }
  void reset(int32_t first) {
    backend_.reset();
    next_ = first;
  }

 private:
  Backend& backend_;
  std::vector<float> logits_;
  std::vector<int32_t> tokens_;
  int32_t vocab_;
  uint64_t state_ = 0x2545f4914f6cdd1dull;
  int32_t next_ = 0;
};

// qwick bench --parallel: opens the backend with room for every count's sequences.
int run_parallel_bench(EngineOptions engine, const std::string& counts_text, int64_t context, int64_t tokens,
                       int64_t reps, int64_t chunk, const std::string& json_path) {
  ParallelBench spec;
  std::stringstream in(counts_text);
  for (std::string item; std::getline(in, item, ',');)
    spec.counts.push_back(static_cast<int>(parse_int(item, "--parallel")));
  if (context < 1 || tokens < 1 || reps < 1 || chunk < 1)
    fail("bench --parallel: the context, steps, runs and chunk must be positive");
  spec.context = context;
  spec.tokens = tokens;
  spec.reps = reps;
  spec.chunk = chunk;
  if (spec.counts.empty()) fail("bench --parallel: counts must be positive");
  engine.sequences = parallel_bench_sequences(spec);
  engine.spec_draft = 0;  // the MTP head follows a single sequence
  if (engine.ctx_size == 0) engine.ctx_size = engine.sequences * (context + (reps + 1) * tokens);
  Engine e = open_engine(engine);
  std::printf("device %s, %lld-token prompts, %lld steps a run, median of %lld runs\n\n",
              e.backend->name().c_str(), static_cast<long long>(context), static_cast<long long>(tokens),
              static_cast<long long>(reps));
  const nlohmann::json j = bench_parallel(*e.backend, e.model->config.vocab_size, spec);
  if (!json_path.empty()) write_json(json_path, {{"device", e.backend->name()}, {"parallel", j}});
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  EngineOptions engine;
  std::string lengths_text = "256,512,1K,2K,4K,8K,16K,32K,64K,128K", json_path, plot_path;
  std::string accuracy_text, depths_text = "1,2,3,4", parallel_text;
  int64_t parallel_context = 256;
  int64_t spec_tokens = 64;
  int64_t prefill_reps = 3, decode_reps = 3, decode_tokens = 32, chunk = 4096, pp = 512, tg = 128,
          table_reps = 5;
  double rep_budget = 30;
  bool stages = false;
  ArgParser p("qwick bench [options]",
              "Measures prefill throughput at prompt lengths and decode throughput at context lengths\n"
              "(batch 1, synthetic prompts, medians), with achieved GB/s and TFLOP/s against this model's\n"
              "per-token bytes and FLOPs, then the llama-bench style ppN / tgN table.");
  engine.add_to(p);
  p.option({"--lengths"}, "LIST", "prompt / context lengths, comma separated (K = 1024)", &lengths_text);
  p.option({"--prefill-reps"}, "N", "prefill runs per length (median)", &prefill_reps);
  p.option({"--rep-budget"}, "S", "stop repeating a length's prefill once its runs took this many seconds",
           &rep_budget);
  p.option({"--decode-reps"}, "N", "decode runs per length (median)", &decode_reps);
  p.option({"--decode-tokens"}, "N", "decode steps per run", &decode_tokens);
  p.option({"--chunk"}, "N", "prefill chunk size", &chunk);
  p.option({"--pp"}, "N", "prompt length of the ppN row (0 = no table)", &pp);
  p.option({"--tg"}, "N", "generated tokens of the tgN row (0 = no table)", &tg);
  p.option({"--table-reps"}, "N", "runs per table row (mean ± sd)", &table_reps);
  p.flag({"--stages"},
         "per length, one more prefill timing each stage on the device (printed, and in --json)", &stages);
  p.option({"--json"}, "FILE", "write every measurement here", &json_path);
  p.option({"--plot"}, "FILE", "write a PNG of both curves here", &plot_path);
  p.option(
      {"--draft-accuracy"}, "LIST",
      "instead of the tables: speculative decoding at each context of --lengths with an oracle whose drafts "
      "are right with these probabilities, comma separated (e.g. 0.7,0.85,0.95); see bench_speculation.h",
      &accuracy_text);
  p.option({"--spec-depths"}, "LIST", "with --draft-accuracy: drafts a step, comma separated", &depths_text);
  p.option({"--spec-tokens"}, "N", "with --draft-accuracy: tokens generated a run", &spec_tokens);
  p.option({"--parallel"}, "LIST",
           "instead of the tables: aggregate decode tokens/s of this many sequences stepped together, comma "
           "separated (e.g. 1,2,4,8; --decode-tokens steps a run, --decode-reps runs); see bench_parallel.h",
           &parallel_text);
  p.option({"--parallel-context"}, "N", "with --parallel: prompt tokens of each sequence", &parallel_context);
  if (!p.parse(argc, argv)) return 0;
  if (!parallel_text.empty())
    return run_parallel_bench(engine, parallel_text, parallel_context, decode_tokens, decode_reps, chunk,
                              json_path);
  const std::vector<int64_t> lengths = parse_lengths(lengths_text);
  if (!accuracy_text.empty()) {
    SpeculationBench spec;
    spec.lengths = lengths;
    spec.tokens = spec_tokens;
    spec.chunk = chunk;
    std::stringstream acc(accuracy_text), dep(depths_text);
    for (std::string item; std::getline(acc, item, ',');)
      spec.accuracies.push_back(parse_double(item, "--draft-accuracy"));
    for (std::string item; std::getline(dep, item, ',');)
      spec.depths.push_back(static_cast<int>(parse_int(item, "--spec-depths")));
    if (spec.accuracies.empty() || spec.depths.empty() || spec_tokens < 2)
      fail("bench --draft-accuracy: needs probabilities, depths and --spec-tokens of at least 2");
    if (engine.ctx_size == 0)
      engine.ctx_size = *std::max_element(lengths.begin(), lengths.end()) + spec_tokens + 16;
    Engine e = open_engine(engine);
    const nlohmann::json j = bench_speculation(*e.backend, e.model->config.vocab_size, spec);
    if (!json_path.empty()) write_json(json_path, {{"device", e.backend->name()}, {"speculation", j}});
    return 0;
  }
  for (int64_t v : {prefill_reps, decode_reps, decode_tokens, chunk, table_reps})
    if (v <= 0) fail("bench: counts and sizes must be positive");
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  if (engine.ctx_size == 0) engine.ctx_size = std::max({longest + decode_reps * decode_tokens, pp, tg}) + 1;

  Engine e = open_engine(engine);
  Backend& backend = *e.backend;
  const ModelConfig& cfg = e.model->config;
  const std::string device = backend.name();
  const DeviceInfo dev = probe_device(device);
  const TokenCost cost = token_cost(*e.model, engine.backend_options().kv_dtype);
  std::printf("device   %s (%s)%s, copy bandwidth %.0f GB/s (measured)\n", device.c_str(), dev.name.c_str(),
              dev.memory_bytes
                  ? fmt::format(", {:.1f} GiB", static_cast<double>(dev.memory_bytes) / (1 << 30)).c_str()
                  : "",
              dev.copy_gbps);
  std::printf("model    %s: %.2f GB of weights, %.2f B parameters\n", e.model->dir.string().c_str(),
              cost.total_bytes / 1e9, cost.total_params / 1e9);
  std::printf(
      "per decoded token: %.3f GB active weights + %.3f GB DeltaNet states (r+w) + %.1f KiB KV per context "
      "token;"
      " %.2f GFLOP + %.1f KFLOP per context token\n\n",
      cost.weight_bytes / 1e9, cost.state_bytes / 1e9, cost.kv_bytes_per_ctx / 1024,
      (cost.matmul_flops + cost.deltanet_flops) / 1e9, cost.attn_flops_per_ctx / 1e3);

  Runner run(backend, cfg.vocab_size);
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> xs, pre_tps, dec_tps;
  std::printf(
      "| length | prefill tok/s | prefill TFLOP/s | decode tok/s | decode ms/tok | decode GB/s | %% of copy "
      "| decode TFLOP/s |\n");
  std::printf(
      "| -----: | ------------: | --------------: | -----------: | ------------: | ----------: | --------: | "
      "-------------: |\n");
  std::string stage_text;  // printed after the table
  for (int64_t L : lengths) {
    std::vector<double> pre, dec;
    for (double spent = 0;
         static_cast<int64_t>(pre.size()) < prefill_reps && (pre.empty() || spent < rep_budget);)
      spent += pre.emplace_back(run.prefill(L, chunk));
    // The sequence now holds L tokens: decode on top of it.
    for (int64_t r = 0; r < decode_reps; ++r)
      dec.push_back(run.decode(decode_tokens) / static_cast<double>(decode_tokens));
    const double pre_s = median(pre), dec_s = median(dec);
    const int64_t ctx = L + decode_reps * decode_tokens / 2;  // the context in the middle of the decode runs
    const double pre_tok = static_cast<double>(L) / pre_s, dec_tok = 1.0 / dec_s;
    const double pre_tflops = cost.prefill_flops(L) / pre_s / 1e12;
    const double dec_gbps = cost.decode_bytes(ctx) / dec_s / 1e9,
                 dec_tflops = cost.decode_flops(ctx) / dec_s / 1e12;
    std::printf("| %6s | %13.1f | %15.2f | %12.1f | %13.3f | %11.1f | %8.1f%% | %14.3f |\n",
                length_name(L).c_str(), pre_tok, pre_tflops, dec_tok, dec_s * 1e3, dec_gbps,
                100 * dec_gbps / dev.copy_gbps, dec_tflops);
    std::fflush(stdout);
    nlohmann::json stage_json = nlohmann::json::object();
    std::map<std::string, double> ms;
    const double wall = stages ? run.prefill(L, chunk, &ms) : 0.0;
    if (!ms.empty()) {  // (the CPU backend reports no stages)
      double total = 0;
      for (const auto& [name, v] : ms) total += v;
      std::vector<std::pair<double, std::string>> order;
      for (const auto& [name, v] : ms) order.emplace_back(-v, name);
      std::sort(order.begin(), order.end());
      stage_text +=
          fmt::format("\nprefill stages at {}: {:.1f} ms on the device ({:.1f} ms wall, this timed run)\n",
                      length_name(L), total, wall * 1e3);
      for (const auto& [neg, name] : order)
        stage_text += fmt::format("  {:<34} {:9.2f} ms {:5.1f}%\n", name, -neg, 100 * -neg / total);
      stage_json = ms;
    }
    rows.push_back({{"length", L},
                    {"stage_ms", stage_json},
                    {"prefill_seconds", pre},
                    {"prefill_tokens_per_s", pre_tok},
                    {"prefill_tflops", pre_tflops},
                    {"decode_seconds_per_token", dec},
                    {"decode_tokens_per_s", dec_tok},
                    {"decode_gbps", dec_gbps},
                    {"decode_tflops", dec_tflops},
                    {"decode_bytes_per_token", cost.decode_bytes(ctx)}});
    xs.push_back(static_cast<double>(L));
    pre_tps.push_back(pre_tok);
    dec_tps.push_back(dec_tok);
  }

  std::fputs(stage_text.c_str(), stdout);

  nlohmann::json table = nlohmann::json::array();
  if (pp > 0 && tg > 0) {
    std::vector<double> pp_tps, tg_tps;
    for (int64_t r = 0; r < table_reps; ++r)
      pp_tps.push_back(static_cast<double>(pp) / run.prefill(pp, chunk));
    for (int64_t r = 0; r < table_reps; ++r) {
      run.reset(1);
      tg_tps.push_back(static_cast<double>(tg) / run.decode(tg));
    }
    const std::string model_name = fmt::format(
        "{} {}L {}e/top{} {}", cfg.model_type, cfg.n_layers(), cfg.n_experts, cfg.n_experts_per_tok,
        cfg.quant.enabled ? fmt::format("MLX {}-bit", cfg.quant.defaults.bits) : "bf16");
    std::printf(
        "\n| model | size | params | backend | test | t/s |\n| --- | ---: | ---: | --- | ---: | ---: |\n");
    for (auto [name, v] :
         {std::pair{fmt::format("pp{}", pp), pp_tps}, std::pair{fmt::format("tg{}", tg), tg_tps}}) {
      std::printf("| %s | %.2f GiB | %.2f B | %s | %s | %.2f ± %.2f |\n", model_name.c_str(),
                  cost.total_bytes / (1 << 30), cost.total_params / 1e9, device.c_str(), name.c_str(),
                  mean(v), stddev(v));
      table.push_back({{"test", name}, {"tokens_per_s", v}, {"mean", mean(v)}, {"sd", stddev(v)}});
    }
  }

  const BackendMemory mem = backend.memory();
  const auto gib = [](int64_t b) { return static_cast<double>(b) / (1 << 30); };
  if (mem.peak > 0)
    std::printf(
        "\ndevice memory: peak %.2f GiB held by qwick (weights %.2f, sequence state %.2f at context %lld, "
        "scratch %.2f);"
        " device reports %.2f GiB in use at most\n",
        gib(mem.peak), gib(mem.weights), gib(mem.state), static_cast<long long>(backend.max_context()),
        gib(mem.scratch), gib(mem.device_used));

  if (!json_path.empty()) {
    nlohmann::json j = {{"device", device},
                        {"device_name", dev.name},
                        {"copy_gbps", dev.copy_gbps},
                        {"model", e.model->dir.string()},
                        {"chunk", chunk},
                        {"cost",
                         {{"weight_bytes", cost.weight_bytes},
                          {"state_bytes", cost.state_bytes},
                          {"kv_bytes_per_context_token", cost.kv_bytes_per_ctx},
                          {"flops_per_token", cost.matmul_flops + cost.deltanet_flops},
                          {"attention_flops_per_context_token", cost.attn_flops_per_ctx}}},
                        {"lengths", rows},
                        {"table", table},
                        {"memory",
                         {{"weights", mem.weights},
                          {"state", mem.state},
                          {"scratch", mem.scratch},
                          {"peak", mem.peak},
                          {"device_used", mem.device_used},
                          {"context", backend.max_context()}}}};
    write_json(json_path, j);
  }
  if (!plot_path.empty())
    write_plot_png(plot_path,
                   {PlotPanel{"PREFILL TOKENS/S VS PROMPT LENGTH", {PlotSeries{device, xs, pre_tps}}},
                    PlotPanel{"DECODE TOKENS/S VS CONTEXT", {PlotSeries{device, xs, dec_tps}}}});
  return 0;
}

}  // namespace qwick
