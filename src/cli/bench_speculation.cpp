#include "cli/bench_speculation.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "core/error.h"
#include "runtime/sampler.h"
#include "runtime/speculation.h"

namespace qwick {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

nlohmann::json bench_speculation(Backend& backend, int64_t vocab_size, const SpeculationBench& spec) {
  if (!backend.has_draft_head())
    fail(
        "bench --draft-accuracy: the {} backend runs no MTP head (a model with mtp.* tensors or --mtp DIR, "
        "--spec-draft not 0, on a device that runs the head)",
        backend.name());
  for (int d : spec.depths)
    if (d < 1 || d > backend.max_step_rows() - 1)
      fail("bench --spec-depths: {} drafts; the {} backend verifies 1 to {}", d, backend.name(),
           backend.max_step_rows() - 1);
  for (double p : spec.accuracies)
    if (!(p >= 0 && p <= 1)) fail("bench --draft-accuracy: {} is not a probability", p);
  const auto V = static_cast<size_t>(vocab_size);
  std::vector<float> logits(V), rows_logits(static_cast<size_t>(backend.max_step_rows()) * V);
  nlohmann::json out = nlohmann::json::array();
  std::mt19937 rng(1);

  for (int64_t L : spec.lengths) {
    std::vector<int32_t> prompt(static_cast<size_t>(L));
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab_size));
    backend.reset();
    PrefillOptions po;
    po.chunk = spec.chunk;
    backend.prefill(prompt, logits, po);
    const auto start = backend.snapshot();
    const int32_t first = argmax(logits);

    // The true greedy continuation, timed: the plain rate.
    std::vector<int32_t> truth{first};
    auto t0 = Clock::now();
    for (int64_t i = 1; i < spec.tokens; ++i) {
      backend.decode(truth.back(), logits);
      truth.push_back(argmax(logits));
    }
    const double plain_s = seconds_since(t0) / static_cast<double>(spec.tokens - 1);

    // The verify-cost curve: one step of R rows against a plain decode step.
    std::vector<double> verify_ms;
    for (int R = 1; R <= backend.max_step_rows(); ++R) {
      backend.restore(*start);
      std::vector<StepRow> rows;
      for (int i = 0; i < R; ++i) rows.push_back({truth[static_cast<size_t>(i)], 0, L + i});
      t0 = Clock::now();
      backend.step(rows, std::span<float>(rows_logits.data(), static_cast<size_t>(R) * V));
      verify_ms.push_back(seconds_since(t0) * 1e3);
      backend.commit(R);
    }
    std::printf("\nspeculation at context %lld: plain decode %.2f ms/token (%.1f tokens/s)\n",
                static_cast<long long>(L), plain_s * 1e3, 1.0 / plain_s);
    std::printf("verify pass of R rows, ms (x plain step):");
    for (size_t r = 0; r < verify_ms.size(); ++r)
      std::printf(" %zu: %.2f (%.2fx)", r + 1, verify_ms[r], verify_ms[r] / (plain_s * 1e3));
    std::printf(
        "\n| depth | P    | tokens/s | speedup | tokens/step | accepted | draft ms | verify ms | rest ms "
        "|\n");
    std::printf(
        "| ----: | ---: | -------: | ------: | ----------: | -------: | -------: | --------: | ------: |\n");

    nlohmann::json runs = nlohmann::json::array();
    for (double P : spec.accuracies)
      for (int depth : spec.depths) {
        backend.restore(*start);
        std::mt19937_64 oracle_rng(7);
        auto oracle = [&](int64_t position, int32_t) {
          const int64_t i = position - L;
          const int32_t right = i < static_cast<int64_t>(truth.size()) ? truth[static_cast<size_t>(i)] : 0;
          return std::uniform_real_distribution<double>(0, 1)(oracle_rng) < P
                     ? right
                     : static_cast<int32_t>((right + 1) % vocab_size);
        };
        Speculator speculator(backend, vocab_size, depth, /*adaptive=*/false, oracle);
        Sampler sampler(SamplingParams{}, vocab_size);
        std::vector<int32_t> output{first}, drafts;
        t0 = Clock::now();
        while (static_cast<int64_t>(output.size()) < spec.tokens) {
          drafts.clear();
          const int room = static_cast<int>(spec.tokens - static_cast<int64_t>(output.size()) - 1);
          const int32_t next = speculator.step(output.back(), sampler, std::min(depth, room), drafts);
          output.insert(output.end(), drafts.begin(), drafts.end());
          output.push_back(next);
        }
        const double s = seconds_since(t0);
        output.resize(static_cast<size_t>(spec.tokens));
        if (output != truth)
          fail("bench: speculative output differs from plain greedy at depth {}, P {} (context {})", depth, P,
               L);
        const double produced = static_cast<double>(spec.tokens - 1);  // the first came from the prefill
        const double steps = static_cast<double>(speculator.steps());
        const Speculator::Times& t = speculator.times();
        const double tps = produced / s;
        const double accepted =
            speculator.drafted() ? static_cast<double>(speculator.accepted()) / speculator.drafted() : 0;
        std::printf("| %5d | %.2f | %8.1f | %6.2fx | %11.2f | %7.1f%% | %8.2f | %9.2f | %7.2f |\n", depth, P,
                    tps, tps * plain_s, produced / steps, 100 * accepted, t.draft / steps * 1e3,
                    t.verify / steps * 1e3, t.accept / steps * 1e3);
        std::fflush(stdout);
        runs.push_back({{"depth", depth},
                        {"accuracy", P},
                        {"tokens_per_s", tps},
                        {"tokens_per_step", produced / steps},
                        {"acceptance", accepted},
                        {"draft_ms", t.draft / steps * 1e3},
                        {"verify_ms", t.verify / steps * 1e3},
                        {"rest_ms", t.accept / steps * 1e3}});
      }
    out.push_back({{"context", L}, {"plain_ms", plain_s * 1e3}, {"verify_ms", verify_ms}, {"runs", runs}});
  }
  return out;
}

}  // namespace qwick
