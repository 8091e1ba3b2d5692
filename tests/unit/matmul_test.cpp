// Every matmul kernel (AVX2, AVX-512) against the plain reference, for every weight format, over a
// table of shapes (odd sizes and the real model's included) on fresh random inputs. Outputs are
// poisoned with NaN first, so an unwritten element fails, and rows outside the range must stay NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "kernels/matmul/matmul_bf16.h"
#include "kernels/matmul/matmul_parallel.h"

namespace qwick {
namespace {

// Owns the bytes of a random weight matrix in one format.
struct RandomMatrix {
  std::vector<uint8_t> data, scales, biases;
  WeightMatrix w;

  RandomMatrix(WeightFormat format, int64_t rows, int64_t cols, int group, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    w.format = format;
    w.rows = rows;
    w.cols = cols;
    const int bits = WeightMatrix{format}.bits();
    w.row_stride = static_cast<size_t>(cols * bits / 8);
    data.resize(static_cast<size_t>(rows) * w.row_stride);
    for (size_t i = 0; i < data.size();) {
      if (format == WeightFormat::kF32) {
        const float v = normal(rng);
        std::memcpy(&data[i], &v, 4);
        i += 4;
      } else if (format == WeightFormat::kBF16) {
        const uint16_t v = f32_to_bf16(normal(rng));
        std::memcpy(&data[i], &v, 2);
        i += 2;
      } else if (format == WeightFormat::kF16) {
        // Random finite halves: sign, exponent 10..20, any mantissa.
        const uint16_t v =
            static_cast<uint16_t>((rng() & 0x8000u) | ((10 + rng() % 11) << 10) | (rng() & 0x3ffu));
        std::memcpy(&data[i], &v, 2);
        i += 2;
      } else {
        data[i++] = static_cast<uint8_t>(rng());
      }
    }
    if (w.is_affine()) {
      w.group_size = group;
      w.group_stride = static_cast<size_t>(cols / group) * 2;
      scales.resize(static_cast<size_t>(rows) * w.group_stride);
      biases.resize(scales.size());
      for (size_t i = 0; i < scales.size(); i += 2) {
        const uint16_t s = f32_to_bf16(normal(rng) * 0.1f);  // negative scales included
        const uint16_t b = f32_to_bf16(normal(rng));
        std::memcpy(&scales[i], &s, 2);
        std::memcpy(&biases[i], &b, 2);
      }
      w.scales = scales.data();
      w.biases = biases.data();
    }
    w.data = data.data();
  }
};

// |y - ref| <= tol · Σ|w||x| per element (plus a floor), the scale of f32 rounding in a dot product.
void expect_close(const std::vector<float>& ref, const std::vector<float>& got, const std::vector<float>& mag,
                  const char* what) {
  ASSERT_EQ(ref.size(), got.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(ref[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << ": element " << i << " outside the row range was written";
      continue;
    }
    ASSERT_NEAR(got[i], ref[i], 2e-6f * mag[i] + 1e-6f) << what << ": element " << i;
  }
}

struct Shape {
  WeightFormat format;
  int64_t rows, cols;
  int group;
};

std::vector<Shape> shapes() {
  std::vector<Shape> s;
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kBF16})
    for (int64_t rows : {1, 3, 17})
      for (int64_t cols : {1, 7, 16, 33, 100, 257}) s.push_back({f, rows, cols, 0});
  for (WeightFormat f : {WeightFormat::kAffine4, WeightFormat::kAffine8})
    for (int group : {32, 64, 128})
      for (int64_t rows : {1, 5, 16, 33})
        for (int64_t cols : {128, 384}) s.push_back({f, rows, cols, group});
  // The real model's projections (row counts cut to keep the test fast).
  s.push_back({WeightFormat::kAffine4, 40, 2048, 64});  // experts gate/up, q/k/v, in_proj_*
  s.push_back({WeightFormat::kAffine4, 36, 512, 64});   // expert down
  s.push_back({WeightFormat::kAffine4, 20, 4096, 64});  // o_proj, out_proj
  s.push_back({WeightFormat::kAffine8, 33, 2048, 64});  // router, shared-expert gate
  s.push_back({WeightFormat::kBF16, 21, 2048, 0});
  return s;
}

void run_level(SimdLevel level) {
  if (static_cast<int>(level) > static_cast<int>(detected_simd_level()))
    GTEST_SKIP() << "this CPU lacks " << simd_level_name(level);
  const MatmulRowsFn kernel = matmul_kernel(level);
  uint64_t seed = 1;
  for (const Shape& sh : shapes()) {
    for (size_t n : {1, 2, 3, 4, 5, 9}) {
      RandomMatrix m(sh.format, sh.rows, sh.cols, sh.group, seed++);
      const size_t ldx = static_cast<size_t>(sh.cols) + 3, ldy = static_cast<size_t>(sh.rows) + 2;
      std::vector<float> x(n * ldx);
      std::mt19937_64 rng(seed++);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& v : x) v = normal(rng);
      // A row range that skips the first and last row where there are enough rows.
      const int64_t r0 = sh.rows > 2 ? 1 : 0, r1 = sh.rows > 2 ? sh.rows - 1 : sh.rows;
      std::vector<float> ref(n * ldy, NAN), got(n * ldy, NAN), mag(n * ldy, 0.0f);
      AlignedBuffer<float> scratch(matmul_scratch_floats(sh.cols));
      MatmulProblem p{&m.w, x.data(), ldx, n, ref.data(), ldy};
      matmul_rows_reference(p, r0, r1, scratch.data());
      p.y = got.data();
      kernel(p, r0, r1, scratch.data());
      std::vector<float> row(static_cast<size_t>(sh.cols));
      for (int64_t r = r0; r < r1; ++r) {
        dequantize_row(m.w, r, row.data());
        for (size_t t = 0; t < n; ++t)
          for (int64_t c = 0; c < sh.cols; ++c)
            mag[t * ldy + static_cast<size_t>(r)] +=
                std::fabs(row[static_cast<size_t>(c)] * x[t * ldx + static_cast<size_t>(c)]);
      }
      const std::string what = std::string(simd_level_name(level)) + " " + weight_format_name(sh.format) +
                               " " + std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " g" +
                               std::to_string(sh.group) + " n" + std::to_string(n);
      expect_close(ref, got, mag, what.c_str());
    }
  }
}

TEST(Matmul, Avx2MatchesReference) {
  run_level(SimdLevel::kAvx2);
}

// bf16 operands (matmul_bf16.h): the AVX-512 kernel against the bf16 reference, and that reference
// against the f32 product within the rounding of both operands to bf16 (unit roundoff 2⁻⁸ each).
TEST(Matmul, Bf16MatchesItsReferenceAndTheBound) {
  if (detected_simd_level() != SimdLevel::kAvx512) GTEST_SKIP() << "this CPU lacks AVX-512 BF16";
  uint64_t seed = 500;
  for (const Shape& sh : shapes()) {
    for (size_t n : {2, 3, 4, 5, 9}) {
      RandomMatrix m(sh.format, sh.rows, sh.cols, sh.group, seed++);
      const size_t ldx = static_cast<size_t>(sh.cols) + 1, ldy = static_cast<size_t>(sh.rows);
      std::vector<float> x(n * ldx);
      std::mt19937_64 rng(seed++);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& v : x) v = normal(rng);
      const int64_t stride = bf16_row_stride(sh.cols);
      std::vector<uint16_t> xr(n * static_cast<size_t>(stride)), xs(xr.size());
      convert_rows_bf16_reference(x.data(), ldx, n, sh.cols, xr.data());
      AlignedBuffer<float> prepared(xs.size() / 2 + 16);
      convert_rows_bf16_avx512(x.data(), ldx, n, sh.cols, reinterpret_cast<uint16_t*>(prepared.data()));
      std::memcpy(xs.data(), prepared.data(), xs.size() * 2);
      ASSERT_EQ(xr, xs) << "activation conversion";
      std::vector<float> exact(n * ldy, NAN), ref(n * ldy, NAN), got(n * ldy, NAN);
      AlignedBuffer<float> scratch(matmul_scratch_floats(sh.cols));
      MatmulProblem p{&m.w, x.data(), ldx, n, exact.data(), ldy};
      matmul_rows_reference(p, 0, sh.rows, scratch.data());
      p.y = ref.data();
      matmul_rows_bf16_reference(p, xr.data(), 0, sh.rows, scratch.data());
      p.y = got.data();
      matmul_rows_bf16_avx512(p, reinterpret_cast<const uint16_t*>(prepared.data()), 0, sh.rows,
                              scratch.data());
      std::vector<float> row(static_cast<size_t>(sh.cols));
      for (int64_t r = 0; r < sh.rows; ++r) {
        dequantize_row(m.w, r, row.data());
        for (size_t t = 0; t < n; ++t) {
          double mag = 0;
          for (int64_t c = 0; c < sh.cols; ++c)
            mag += std::fabs(row[static_cast<size_t>(c)] * x[t * ldx + static_cast<size_t>(c)]);
          const size_t i = t * ldy + static_cast<size_t>(r);
          ASSERT_NEAR(got[i], ref[i], 2e-6 * mag + 1e-6)
              << weight_format_name(sh.format) << " " << sh.rows << "x" << sh.cols;
          ASSERT_NEAR(ref[i], exact[i], 2 * 0x1p-8 * mag * 1.01 + 1e-6) << weight_format_name(sh.format);
        }
      }
    }
  }
}
TEST(Matmul, Avx512MatchesReference) {
  run_level(SimdLevel::kAvx512);
}

TEST(Matmul, DequantizeAffineFollowsMlxPacking) {
  // Row of 64 4-bit values with element 8j+k in nibble k of word j: byte b holds elements 2b, 2b+1.
  std::vector<uint8_t> data(32), scales(2), biases(2);
  for (int i = 0; i < 32; ++i)
    data[static_cast<size_t>(i)] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  const uint16_t s = f32_to_bf16(-0.5f), b = f32_to_bf16(2.0f);
  std::memcpy(scales.data(), &s, 2);
  std::memcpy(biases.data(), &b, 2);
  WeightMatrix w;
  w.format = WeightFormat::kAffine4;
  w.rows = 1;
  w.cols = 64;
  w.data = data.data();
  w.row_stride = 32;
  w.scales = scales.data();
  w.biases = biases.data();
  w.group_size = 64;
  w.group_stride = 2;
  std::vector<float> out(64);
  dequantize_row(w, 0, out.data());
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(out[static_cast<size_t>(2 * i)], -0.5f * static_cast<float>(i % 16) + 2.0f);
    EXPECT_EQ(out[static_cast<size_t>(2 * i + 1)], -0.5f * static_cast<float>(15 - i % 16) + 2.0f);
  }
}

TEST(Matmul, ThreadedBatchEqualsReference) {
  ThreadPool pool(2);
  std::vector<RandomMatrix> mats;
  for (int i = 0; i < 5; ++i) mats.emplace_back(WeightFormat::kAffine4, 64 + 16 * i + i, 256, 64, 100 + i);
  const size_t n = 3;
  const std::vector<float> x = [] {
    std::vector<float> v(3 * 256);
    std::mt19937_64 rng(7);
    std::normal_distribution<float> d;
    for (float& f : v) f = d(rng);
    return v;
  }();
  std::vector<std::vector<float>> ref(mats.size()), got(mats.size());
  std::vector<MatmulProblem> problems;
  AlignedBuffer<float> scratch(matmul_scratch_floats(256));
  for (size_t i = 0; i < mats.size(); ++i) {
    const size_t rows = static_cast<size_t>(mats[i].w.rows);
    ref[i].assign(n * rows, NAN);
    got[i].assign(n * rows, NAN);
    MatmulProblem p{&mats[i].w, x.data(), 256, n, ref[i].data(), rows};
    matmul_rows_reference(p, 0, mats[i].w.rows, scratch.data());
    p.y = got[i].data();
    problems.push_back(p);
  }
  matmul_batch(problems, pool);
  for (size_t i = 0; i < mats.size(); ++i)
    for (size_t j = 0; j < ref[i].size(); ++j) ASSERT_NEAR(got[i][j], ref[i][j], 1e-3f) << i << " " << j;
}

}  // namespace
}  // namespace qwick
