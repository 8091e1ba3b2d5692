// Micro-benchmark of the CPU matmul kernels on the real model's shapes, one thread, weights larger
// than the caches (a rotating set of matrices). Prints GB/s of weight bytes read and GFLOP/s.
//   build/bench/matmul_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "kernels/matmul/matmul_parallel.h"

namespace qwick {
namespace {

struct Weights {
  std::vector<uint8_t> data, scales;
  WeightMatrix w;
  Weights(int64_t rows, int64_t cols)
      : data(static_cast<size_t>(rows * cols / 2)), scales(static_cast<size_t>(rows * cols / 64 * 2)) {
    std::mt19937 rng(1);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    for (size_t i = 0; i < scales.size(); i += 2) {
      scales[i] = 0;
      scales[i + 1] = 0x3c;  // bf16 0.0078
    }
    w = WeightMatrix{WeightFormat::kAffine4,
                     rows,
                     cols,
                     data.data(),
                     static_cast<size_t>(cols / 2),
                     scales.data(),
                     scales.data(),
                     static_cast<size_t>(cols / 64 * 2),
                     64};
  }
};

void BM_Affine4(benchmark::State& state) {
  const auto level = static_cast<SimdLevel>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2);
  const size_t n = static_cast<size_t>(state.range(3));
  if (static_cast<int>(level) > static_cast<int>(detected_simd_level())) {
    state.SkipWithError("CPU lacks this level");
    return;
  }
  // Enough matrices to exceed the last-level cache, so each pass streams from memory.
  const int64_t bytes_per = rows * cols / 2;
  const int copies = static_cast<int>(std::max<int64_t>(1, (int64_t{256} << 20) / bytes_per));
  std::vector<Weights> mats;
  for (int i = 0; i < copies; ++i) mats.emplace_back(rows, cols);
  std::vector<float> x(n * static_cast<size_t>(cols), 0.5f), y(n * static_cast<size_t>(rows));
  AlignedBuffer<float> scratch(matmul_scratch_floats(cols));
  const MatmulRowsFn kernel = matmul_kernel(level);
  int i = 0;
  for (auto _ : state) {
    MatmulProblem p{&mats[static_cast<size_t>(i++ % copies)].w,
                    x.data(),
                    static_cast<size_t>(cols),
                    n,
                    y.data(),
                    static_cast<size_t>(rows)};
    kernel(p, 0, rows, scratch.data());
    benchmark::ClobberMemory();
  }
  const double weight_bytes = static_cast<double>(rows * cols) * (0.5 + 4.0 / 64);
  state.counters["GB/s"] = benchmark::Counter(weight_bytes * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(rows * cols) * static_cast<double>(n) *
                             static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}

void BM_Affine4I8(benchmark::State& state) {
  const auto level = static_cast<SimdLevel>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2);
  const int64_t bytes_per = rows * cols / 2;
  const int copies = static_cast<int>(std::max<int64_t>(1, (int64_t{256} << 20) / bytes_per));
  std::vector<Weights> mats;
  for (int i = 0; i < copies; ++i) mats.emplace_back(rows, cols);
  std::vector<float> x(static_cast<size_t>(cols), 0.5f), y(static_cast<size_t>(rows));
  AlignedBuffer<float> storage(i8_activation_floats(cols));
  const I8Activation act = quantize_activation_i8(x.data(), cols, storage.data());
  const I8RowsFn kernel = matmul_i8_kernel(level);
  int i = 0;
  for (auto _ : state) {
    kernel(mats[static_cast<size_t>(i++ % copies)].w, act, y.data(), 0, rows);
    benchmark::ClobberMemory();
  }
  const double weight_bytes = static_cast<double>(rows * cols) * (0.5 + 4.0 / 64);
  state.counters["GB/s"] = benchmark::Counter(weight_bytes * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Affine4I8)
    ->ArgsProduct({{0, 1, 2}, {512}, {2048}})
    ->Args({2, 2048, 512})
    ->Unit(benchmark::kMicrosecond);

// level, rows, cols, n: expert gate/up [512, 2048], expert down [2048, 512], qkv [8192, 2048].
BENCHMARK(BM_Affine4)
    ->ArgsProduct({{1, 2}, {512}, {2048}, {1, 8, 64}})
    ->Args({2, 2048, 512, 1})
    ->Args({2, 8192, 2048, 1})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace qwick

BENCHMARK_MAIN();
