#include "cuda_test_util.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_backend.h"
#include "core/numeric.h"

namespace qwick::test {

bool have_gpu() {
  static const bool gpu = cuda_device_count() > 0;
  return gpu;
}

namespace {

constexpr uint64_t kDefaultSeed = 20240229;

// Prints the seed after every failed test.
class SeedOnFailure final : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::printf("[ seed     ] %s.%s drew its inputs from seed %llu: QWICK_TEST_SEED=%llu replays them\n",
                  info.test_suite_name(), info.name(), static_cast<unsigned long long>(test_seed()),
                  static_cast<unsigned long long>(test_seed()));
  }
};

}  // namespace

uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* s = std::getenv("QWICK_TEST_SEED");
    return s && *s ? std::strtoull(s, nullptr, 0) : kDefaultSeed;
  }();
  return seed;
}

// Registered before RUN_ALL_TESTS (gtest_main) runs: this file is linked into every GPU test.
[[maybe_unused]] const bool g_seed_listener = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedOnFailure);
  return true;
}();

std::vector<float> randn(size_t n, std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = round_to_bf16(x);
  return v;
}
std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}
std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(v[i]);
  return out;
}

HostMatrix random_matrix(WeightFormat format, int64_t rows, int64_t cols, int group_size,
                         std::mt19937_64& rng) {
  HostMatrix h;
  WeightMatrix& w = h.w;
  w.format = format;
  w.rows = rows;
  w.cols = cols;
  const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
  if (format == WeightFormat::kAffine4 || format == WeightFormat::kAffine8) {
    const int bits = format == WeightFormat::kAffine4 ? 4 : 8;
    w.group_size = group_size;
    w.row_stride = static_cast<size_t>(cols * bits / 8);
    w.group_stride = static_cast<size_t>(cols / group_size) * 2;
    h.data.resize(w.row_stride * static_cast<size_t>(rows));
    for (auto& b : h.data) b = static_cast<uint8_t>(rng());
    const size_t groups = static_cast<size_t>(rows * (cols / group_size));
    const float levels = static_cast<float>((1 << bits) - 1);
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    std::bernoulli_distribution sign(0.3);
    h.scales.resize(2 * groups);
    h.biases.resize(2 * groups);
    for (size_t g = 0; g < groups; ++g) {
      // MLX-like: the group spans about [-s, s]; scales are sometimes negative.
      const float span = 2.0f * scale * u(rng);
      const float s = (sign(rng) ? -1.0f : 1.0f) * span / levels;
      const uint16_t sb = f32_to_bf16(s), bb = f32_to_bf16(s < 0 ? span / 2 : -span / 2);
      std::memcpy(&h.scales[2 * g], &sb, 2);
      std::memcpy(&h.biases[2 * g], &bb, 2);
    }
    w.scales = h.scales.data();
    w.biases = h.biases.data();
  } else {
    const size_t elem = format == WeightFormat::kF32 ? 4 : 2;
    w.row_stride = static_cast<size_t>(cols) * elem;
    h.data.resize(w.row_stride * static_cast<size_t>(rows));
    std::normal_distribution<float> dist(0.0f, scale);
    for (size_t i = 0; i < static_cast<size_t>(rows * cols); ++i) {
      const float v = round_to_bf16(dist(rng));  // f32 files are converted to bf16 at upload: keep that exact
      if (format == WeightFormat::kF32) {
        std::memcpy(&h.data[4 * i], &v, 4);
      } else {
        const uint16_t b = f32_to_bf16(v);
        std::memcpy(&h.data[2 * i], &b, 2);
      }
    }
  }
  w.data = h.data.data();
  return h;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    d += (static_cast<double>(a[i]) - ref[i]) * (static_cast<double>(a[i]) - ref[i]);
    r += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(d / r);
}

}  // namespace qwick::test
