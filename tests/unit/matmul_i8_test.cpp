// The two-part int8-activation matvec (matmul_i8.h): the SIMD kernels against the plain reference (the same
// integer sums, so they may differ only by f32 rounding), and the reference against the f32 matmul
// within the bound the activation rounding allows: |Δy_r| <= Σ_i |w_ri| · d_b(i) / 2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/numeric.h"
#include "kernels/matmul/matmul_parallel.h"

namespace qwick {
namespace {

struct Affine4 {
  std::vector<uint8_t> data, scales, biases;
  WeightMatrix w;
  Affine4(int64_t rows, int64_t cols, int group, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    data.resize(static_cast<size_t>(rows * cols / 2));
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    scales.resize(static_cast<size_t>(rows * (cols / group) * 2));
    biases.resize(scales.size());
    for (size_t i = 0; i < scales.size(); i += 2) {
      const uint16_t s = f32_to_bf16(normal(rng) * 0.05f), b = f32_to_bf16(normal(rng) * 0.3f);
      std::memcpy(&scales[i], &s, 2);
      std::memcpy(&biases[i], &b, 2);
    }
    w = WeightMatrix{WeightFormat::kAffine4,
                     rows,
                     cols,
                     data.data(),
                     static_cast<size_t>(cols / 2),
                     scales.data(),
                     biases.data(),
                     static_cast<size_t>(cols / group) * 2,
                     group};
  }
};

TEST(MatmulI8, KernelsMatchReferenceAndReferenceIsBounded) {
  uint64_t seed = 1;
  for (int group : {64, 128}) {
    for (int64_t cols : {64, 128, 192, 320, 2048, 4096, 8192 + 128}) {
      if (cols % group != 0) continue;
      for (int64_t rows : {1, 2, 5, 33}) {
        Affine4 m(rows, cols, group, seed++);
        std::mt19937_64 rng(seed++);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> x(static_cast<size_t>(cols));
        for (float& v : x) v = normal(rng) * (rng() % 7 == 0 ? 20.0f : 1.0f);  // some outliers
        if (cols >= 128) std::fill(x.begin() + 64, x.begin() + 128, 0.0f);     // an all-zero block
        AlignedBuffer<float> storage(i8_activation_floats(cols));
        const I8Activation act = quantize_activation_i8(x.data(), cols, storage.data());

        std::vector<float> ref_all(static_cast<size_t>(rows), NAN);
        matmul_i8_rows_reference(m.w, act, ref_all.data(), 0, rows);

        // Against the f32 product, within the activation-rounding bound.
        std::vector<float> exact(static_cast<size_t>(rows)), row(static_cast<size_t>(cols));
        AlignedBuffer<float> scratch(matmul_scratch_floats(cols));
        MatmulProblem p{&m.w, x.data(),     static_cast<size_t>(cols),
                        1,    exact.data(), static_cast<size_t>(rows)};
        matmul_rows_reference(p, 0, rows, scratch.data());
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(m.w, r, row.data());
          double bound = 0, mag = 0;
          for (int64_t c = 0; c < cols; ++c) {
            bound += std::fabs(row[static_cast<size_t>(c)]) * act.d[c / 64] / 2;
            mag += std::fabs(row[static_cast<size_t>(c)] * x[static_cast<size_t>(c)]);
          }
          EXPECT_LE(std::fabs(ref_all[static_cast<size_t>(r)] - exact[static_cast<size_t>(r)]),
                    bound + 1e-5 * mag)
              << "rows " << rows << " cols " << cols << " group " << group << " row " << r;
        }

        for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
          if (static_cast<int>(level) > static_cast<int>(detected_simd_level())) continue;
          std::vector<float> got(static_cast<size_t>(rows), NAN);
          const int64_t r0 = rows > 2 ? 1 : 0, r1 = rows > 2 ? rows - 1 : rows;
          matmul_i8_kernel(level)(m.w, act, got.data(), r0, r1);
          for (int64_t r = 0; r < rows; ++r) {
            if (r < r0 || r >= r1) {
              EXPECT_TRUE(std::isnan(got[static_cast<size_t>(r)])) << "row outside the range was written";
              continue;
            }
            double mag = 0;
            dequantize_row(m.w, r, row.data());
            for (int64_t c = 0; c < cols; ++c)
              mag += std::fabs(row[static_cast<size_t>(c)] * x[static_cast<size_t>(c)]);
            EXPECT_NEAR(got[static_cast<size_t>(r)], ref_all[static_cast<size_t>(r)], 1e-5 * mag + 1e-6)
                << simd_level_name(level) << " rows " << rows << " cols " << cols << " group " << group
                << " row " << r;
          }
        }
      }
    }
  }
}

// The SIMD quantizer against the plain one: the same integers and scales (the kernels' integer sums
// then agree exactly), block sums equal up to the order of the additions.
TEST(MatmulI8, QuantizersAgree) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t cols : {64, 128, 192, 320, 2048, 4096 + 64}) {
    std::vector<float> x(static_cast<size_t>(cols));
    for (float& v : x) v = normal(rng) * (rng() % 7 == 0 ? 20.0f : 1.0f);
    if (cols >= 128) std::fill(x.begin() + 64, x.begin() + 128, 0.0f);  // an all-zero block
    AlignedBuffer<float> want_storage(i8_activation_floats(cols));
    const I8Activation want = quantize_activation_i8(x.data(), cols, want_storage.data());
    for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
      if (static_cast<int>(level) > static_cast<int>(detected_simd_level())) continue;
      SCOPED_TRACE(std::string(simd_level_name(level)) + " cols " + std::to_string(cols));
      AlignedBuffer<float> storage(i8_activation_floats(cols));
      const I8Activation got = i8_quantizer(level)(x.data(), cols, storage.data());
      ASSERT_EQ(std::memcmp(got.q, want.q, static_cast<size_t>(2 * cols)), 0);  // both parts
      for (int64_t b = 0; b < cols / 64; ++b) {
        EXPECT_EQ(got.d[b], want.d[b]);
        double mag = 0;
        for (int i = 0; i < 64; ++i) mag += std::fabs(x[static_cast<size_t>(b * 64 + i)]);
        EXPECT_NEAR(got.sum[b], want.sum[b], 1e-6 * mag);
      }
    }
  }
}

TEST(MatmulI8, FastPrecisionPicksTheKernelByShape) {
  // kFastDecode: a single row against 4-bit weights goes through int8 (matmul_i8.h); against 8-bit
  // weights it stays f32. kFastPrefill: bf16 operands on AVX-512 (matmul_bf16.h) for any row count,
  // so a row's result does not depend on the other rows. Each differs from kExact only within its
  // rounding.
  ThreadPool pool(2);
  Affine4 m4(48, 256, 64, 5);
  std::vector<uint8_t> data8(48 * 256), scales8(48 * 4 * 2, 0), biases8(48 * 4 * 2, 0);
  for (size_t i = 0; i < data8.size(); ++i) data8[i] = static_cast<uint8_t>(i * 37);
  for (size_t i = 1; i < scales8.size(); i += 2) scales8[i] = 0x3c;  // bf16 0.0078
  const WeightMatrix m8{WeightFormat::kAffine8, 48, 256, data8.data(), 256, scales8.data(),
                        biases8.data(),         8,  64};
  std::vector<float> x(2 * 256);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  auto run = [&](const WeightMatrix& w, size_t n, MatmulPrecision precision) {
    std::vector<float> y(n * 48);
    matmul({&w, x.data(), 256, n, y.data(), 48}, pool, precision);
    return y;
  };
  const auto fast1 = run(m4.w, 1, MatmulPrecision::kFastDecode),
             exact1 = run(m4.w, 1, MatmulPrecision::kExact);
  EXPECT_NE(fast1, exact1);
  for (size_t i = 0; i < fast1.size(); ++i)
    EXPECT_NEAR(fast1[i], exact1[i], 0.05f * (1 + std::fabs(exact1[i])));
  EXPECT_EQ(run(m8, 1, MatmulPrecision::kFastDecode), run(m8, 1, MatmulPrecision::kExact));
  const auto pre1 = run(m4.w, 1, MatmulPrecision::kFastPrefill),
             pre2 = run(m4.w, 2, MatmulPrecision::kFastPrefill);
  const auto exact2 = run(m4.w, 2, MatmulPrecision::kExact);
  if (detected_simd_level() == SimdLevel::kAvx512) {
    EXPECT_NE(pre2, exact2);
  }
  for (size_t i = 0; i < pre2.size(); ++i)
    EXPECT_NEAR(pre2[i], exact2[i], 0.02f * (1 + std::fabs(exact2[i])));
  EXPECT_TRUE(std::equal(pre1.begin(), pre1.end(), pre2.begin())) << "row 0 must not depend on row 1";
}

}  // namespace
}  // namespace qwick
