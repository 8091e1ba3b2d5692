#include "cli/bench_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "core/error.h"

namespace qwick {
namespace {

using Clock = std::chrono::steady_clock;

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

nlohmann::json bench_parallel(Backend& backend, int64_t vocab_size, const ParallelBench& spec) {
  if (spec.counts.empty() || *std::min_element(spec.counts.begin(), spec.counts.end()) < 1)
    fail("bench --parallel: counts must be positive");
  const int needed = parallel_bench_sequences(spec);
  if (needed > backend.max_sequences())
    fail("bench --parallel: {} sequences in all; the {} backend holds {}", needed, backend.name(),
         backend.max_sequences());
  const auto V = static_cast<size_t>(vocab_size);
  const int most = *std::max_element(spec.counts.begin(), spec.counts.end());
  std::vector<float> logits(static_cast<size_t>(most) * V);
  std::mt19937 rng(1);
  PrefillOptions po;
  po.chunk = spec.chunk;

  // Each count's own sequences, prefilled and warmed up (scratch sized, pages touched) by one step.
  std::vector<std::vector<StepRow>> groups;
  int first = 0;
  for (int n : spec.counts) {
    std::vector<StepRow>& rows = groups.emplace_back();
    for (int s = first; s < first + n; ++s) {
      std::vector<int32_t> prompt(static_cast<size_t>(spec.context));
      for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab_size));
      backend.reset_sequence(s);
      backend.prefill_sequence(s, prompt, std::span<float>(logits.data(), V), po);
      rows.push_back({argmax(std::span<const float>(logits.data(), V)), s, spec.context});
    }
    first += n;
  }
  const auto step = [&](std::vector<StepRow>& rows) {
    backend.step(rows, logits);
    backend.commit(static_cast<int64_t>(rows.size()));
    for (size_t s = 0; s < rows.size(); ++s) {
      rows[s].token = argmax(std::span<const float>(logits.data() + s * V, V));
      ++rows[s].position;
    }
  };
  for (auto& rows : groups) step(rows);

  // Runs of the counts in turn, so that a change in the machine's load falls on all of them alike.
  std::vector<std::vector<double>> runs(groups.size());
  for (int64_t r = 0; r < spec.reps; ++r)
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < spec.tokens; ++i) step(groups[g]);
      runs[g].push_back(std::chrono::duration<double>(Clock::now() - t0).count() /
                        static_cast<double>(spec.tokens));
    }

  nlohmann::json out = nlohmann::json::array();
  double base = 0;  // aggregate tokens/s of the first count
  std::printf("| sequences | ms/step | aggregate tok/s | tok/s each | vs first |\n");
  std::printf("| --------: | ------: | --------------: | ---------: | -------: |\n");
  for (size_t g = 0; g < groups.size(); ++g) {
    const int n = spec.counts[g];
    std::vector<double> sorted = runs[g];
    std::sort(sorted.begin(), sorted.end());
    const double step_s = sorted[sorted.size() / 2];
    const double aggregate = n / step_s;
    if (base == 0) base = aggregate;
    std::printf("| %9d | %7.2f | %15.1f | %10.1f | %7.2fx |\n", n, step_s * 1e3, aggregate, 1 / step_s,
                aggregate / base);
    out.push_back({{"sequences", n},
                   {"seconds_per_step", runs[g]},
                   {"aggregate_tokens_per_s", aggregate},
                   {"tokens_per_s_each", 1 / step_s}});
  }
  return out;
}

int parallel_bench_sequences(const ParallelBench& spec) {
  int total = 0;
  for (int n : spec.counts) total += std::max(n, 0);
  return std::max(total, 1);
}

}  // namespace qwick
