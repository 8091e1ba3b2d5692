// The small CPU kernels: vector primitives per SIMD level against the reference, the q8 KV row
// format and attention over every cache type, MoE routing, RoPE, the causal conv across chunk
// boundaries, and the DeltaNet scan including a long-horizon drift check of the fp32 state (SIMD vs
// reference over hundreds of steps).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/cpu_features.h"
#include "core/numeric.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/kv_q8.h"
#include "kernels/deltanet/deltanet.h"
#include "kernels/moe/router.h"
#include "kernels/rope/rope.h"
#include "kernels/vector/vector_ops_select.h"
#include "test_util.h"

namespace qwick {
namespace {

std::vector<SimdLevel> simd_levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : {SimdLevel::kAvx2, SimdLevel::kAvx512})
    if (static_cast<int>(l) <= static_cast<int>(detected_simd_level())) out.push_back(l);
  return out;
}

TEST(VectorOps, EveryLevelMatchesReference) {
  const VectorOps& ref = kVectorOpsReference;
  for (SimdLevel level : simd_levels()) {
    const VectorOps& ops = vector_ops(level);
    for (int64_t n : {1, 5, 8, 15, 16, 17, 31, 32, 33, 64, 100, 128, 256, 257}) {
      const auto a = test::random_floats(static_cast<size_t>(n), 1 + static_cast<uint64_t>(n));
      const auto b = test::random_floats(static_cast<size_t>(n), 2 + static_cast<uint64_t>(n));
      std::vector<uint16_t> bh(static_cast<size_t>(n));
      for (size_t i = 0; i < bh.size(); ++i) bh[i] = f32_to_bf16(b[i]);
      const float tol = 1e-5f * static_cast<float>(n);
      EXPECT_NEAR(ops.dot(a.data(), b.data(), n), ref.dot(a.data(), b.data(), n), tol) << n;
      EXPECT_NEAR(ops.dot_bf16(a.data(), bh.data(), n), ref.dot_bf16(a.data(), bh.data(), n), tol) << n;
      std::vector<float> y1 = b, y2 = b, y3 = b, y4 = b;
      ref.axpy(y1.data(), 0.37f, a.data(), n);
      ops.axpy(y2.data(), 0.37f, a.data(), n);
      ref.axpy_bf16(y3.data(), -1.5f, bh.data(), n);
      ops.axpy_bf16(y4.data(), -1.5f, bh.data(), n);
      for (size_t i = 0; i < y1.size(); ++i) {
        EXPECT_NEAR(y1[i], y2[i], 1e-6f);
        EXPECT_NEAR(y3[i], y4[i], 1e-6f);
      }
      std::vector<float> s1 = a, s2 = a;
      const auto q = test::random_floats(static_cast<size_t>(n), 3);
      const float o1 = ref.deltanet_row(s1.data(), b.data(), q.data(), 0.9f, 0.6f, 0.25f, n);
      const float o2 = ops.deltanet_row(s2.data(), b.data(), q.data(), 0.9f, 0.6f, 0.25f, n);
      EXPECT_NEAR(o1, o2, 10 * tol) << n;
      for (size_t i = 0; i < s1.size(); ++i) EXPECT_NEAR(s1[i], s2[i], 10 * tol);
    }
  }
}

// The f32 rows q8 rows stand for.
std::vector<float> decode_rows(const test::Q8Rows& q, int hd) {
  std::vector<float> x(q.codes.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = kv_q8_value(q.codes[i], q.scales[i / static_cast<size_t>(hd)]);
  return x;
}

// Rows [n, hd] of normal values whose spread grows with the row (so a row read with another row's
// scale is visibly off).
std::vector<float> uneven_rows(int64_t n, int hd, uint64_t seed) {
  auto x = test::random_floats(static_cast<size_t>(n * hd), seed);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= 0.25f + static_cast<float>(i / static_cast<size_t>(hd) % 7);
  return x;
}

TEST(KvQ8, EveryValueWithinHalfAScaleAndTheLargestAt127) {
  const int hd = 256;
  const auto x = uneven_rows(20, hd, 7);
  const test::Q8Rows q = test::q8_rows(x, hd);
  const auto back = decode_rows(q, hd);
  for (size_t j = 0; j < q.scales.size(); ++j) {
    const size_t row = j * hd;
    const size_t top =
        static_cast<size_t>(std::max_element(x.begin() + row, x.begin() + row + hd,
                                             [](float a, float b) { return std::fabs(a) < std::fabs(b); }) -
                            x.begin());
    EXPECT_EQ(q.codes[top], x[top] > 0 ? kKvQ8Offset + 127 : kKvQ8Offset - 127) << j;
    EXPECT_FLOAT_EQ(back[top], x[top]) << j;
    // Half a step, plus the float rounding of x / scale and of the decode (relative 2^-24 of 127 steps).
    const float bound = q.scales[j] * (0.5f + 1e-5f);
    for (size_t i = row; i < row + hd; ++i)
      EXPECT_LE(std::fabs(back[i] - x[i]), bound) << j << " " << i - row;
  }
}

TEST(KvQ8, ZeroRowHasScaleZeroAndDecodesToZero) {
  const test::Q8Rows q = test::q8_rows(std::vector<float>(64, 0.0f), 64);
  EXPECT_EQ(q.scales[0], 0.0f);
  for (uint8_t u : q.codes) EXPECT_EQ(u, kKvQ8Offset);
  for (float v : decode_rows(q, 64)) EXPECT_EQ(v, 0.0f);
}

// attend over a q8 cache is attend over the f32 rows it stands for (only the reading differs), at
// every level.
TEST(Attention, Q8EqualsTheDecodedRowsInF32) {
  const int hd = 64;
  const int64_t n_ctx = 45;
  const test::Q8Rows k = test::q8_rows(uneven_rows(n_ctx, hd, 41), hd),
                     v = test::q8_rows(uneven_rows(n_ctx, hd, 42), hd);
  const auto kf = decode_rows(k, hd), vf = decode_rows(v, hd);
  const auto q = test::random_floats(static_cast<size_t>(hd), 43, 0.3f);
  const KvHeadView q8{KvDtype::kQ8, k.codes.data(), v.codes.data(), k.scales.data(), v.scales.data()};
  const KvHeadView f32{KvDtype::kF32, kf.data(), vf.data()};
  std::vector<const VectorOps*> levels = {&kVectorOpsReference};
  for (SimdLevel level : simd_levels()) levels.push_back(&vector_ops(level));
  for (const VectorOps* ops : levels) {
    std::vector<float> s(static_cast<size_t>(n_ctx)), got(static_cast<size_t>(hd), NAN),
        want(static_cast<size_t>(hd));
    attend(q.data(), q8, n_ctx, hd, 0.125f, s.data(), got.data(), *ops);
    attend(q.data(), f32, n_ctx, hd, 0.125f, s.data(), want.data(), *ops);
    for (int d = 0; d < hd; ++d)
      EXPECT_NEAR(got[static_cast<size_t>(d)], want[static_cast<size_t>(d)], 1e-5f) << d;
  }
}

// attend_group over f32, bf16 and q8 caches at every level (the bf16 path through qk_bf16 /
// pv_bf16) against attend one head at a time: odd head_dim, the model's 8 heads of 256 past a
// 64-row block, and more heads than one group of 8.
TEST(Attention, GroupEqualsOneHeadAtATime) {
  struct Shape {
    int hd, heads;
    int64_t n_ctx;
  };
  for (const Shape sh : {Shape{40, 3, 37}, Shape{256, 8, 150}, Shape{64, 9, 70}}) {
    SCOPED_TRACE(testing::Message() << "head_dim " << sh.hd << ", " << sh.heads << " heads, " << sh.n_ctx);
    const int hd = sh.hd, heads = sh.heads;
    const int64_t n_ctx = sh.n_ctx;
    const auto k = test::random_floats(static_cast<size_t>(n_ctx * hd), 31);
    const auto v = test::random_floats(static_cast<size_t>(n_ctx * hd), 32);
    std::vector<uint16_t> kb(k.size()), vb(v.size());
    for (size_t i = 0; i < k.size(); ++i) {
      kb[i] = f32_to_bf16(k[i]);
      vb[i] = f32_to_bf16(v[i]);
    }
    const test::Q8Rows kq = test::q8_rows(k, hd), vq = test::q8_rows(v, hd);
    const int64_t q_stride = 2 * hd;  // [q | gate] per head, as the attention layer lays them out
    const auto q = test::random_floats(static_cast<size_t>(heads * q_stride), 33);
    std::vector<const VectorOps*> levels = {&kVectorOpsReference};
    for (SimdLevel level : simd_levels()) levels.push_back(&vector_ops(level));
    for (KvHeadView kv :
         {KvHeadView{KvDtype::kF32, k.data(), v.data()}, KvHeadView{KvDtype::kBF16, kb.data(), vb.data()},
          KvHeadView{KvDtype::kQ8, kq.codes.data(), vq.codes.data(), kq.scales.data(), vq.scales.data()}}) {
      for (const VectorOps* ops : levels) {
        std::vector<float> scores(static_cast<size_t>(heads * n_ctx)),
            out(static_cast<size_t>(heads * hd), NAN);
        attend_group(q.data(), q_stride, heads, kv, n_ctx, hd, 0.125f, scores.data(), out.data(), hd, *ops);
        for (int g = 0; g < heads; ++g) {
          std::vector<float> s(static_cast<size_t>(n_ctx)), one(static_cast<size_t>(hd));
          attend(q.data() + g * q_stride, kv, n_ctx, hd, 0.125f, s.data(), one.data(), kVectorOpsReference);
          for (int d = 0; d < hd; ++d)
            EXPECT_NEAR(out[static_cast<size_t>(g * hd + d)], one[static_cast<size_t>(d)], 1e-5f)
                << g << " " << d;
        }
      }
    }
  }
}

TEST(Router, SoftmaxTopKRenormalised) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f, 0.5f, 3.0f};
  int32_t ids[3];
  float w[3];
  route_token(logits.data(), 6, 3, ids, w);
  EXPECT_EQ(ids[0], 5);
  EXPECT_EQ(ids[1], 1);  // tie between 1 and 3 goes to the lower index
  EXPECT_EQ(ids[2], 3);
  const double e5 = std::exp(3.0), e1 = std::exp(2.0);
  EXPECT_NEAR(w[0], e5 / (e5 + 2 * e1), 1e-6);
  EXPECT_NEAR(w[1], e1 / (e5 + 2 * e1), 1e-6);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0f, 1e-6f);
}

TEST(Rope, RotatesOnlyTheLeadingDimsAsRotateHalf) {
  const int rd = 8, hd = 12;
  RopeTable table(1e4, rd);
  std::vector<float> cos(rd / 2), sin(rd / 2);
  table.angles(5, cos.data(), sin.data());
  auto x = test::random_floats(hd, 9);
  const auto orig = x;
  apply_rope(x.data(), rd, cos.data(), sin.data());
  for (int i = 0; i < rd / 2; ++i) {
    const double a = 5.0 / std::pow(1e4, 2.0 * i / rd);
    EXPECT_NEAR(x[i], orig[i] * std::cos(a) - orig[i + rd / 2] * std::sin(a), 1e-5);
    EXPECT_NEAR(x[i + rd / 2], orig[i + rd / 2] * std::cos(a) + orig[i] * std::sin(a), 1e-5);
  }
  for (int i = rd; i < hd; ++i) EXPECT_EQ(x[i], orig[i]);
}

TEST(CausalConv, ChunkedEqualsWhole) {
  const int64_t T = 23, C = 5;
  const int K = 4;
  const auto in = test::random_floats(static_cast<size_t>(T * C), 11);
  const auto w = test::random_floats(static_cast<size_t>(C * K), 12);
  std::vector<float> state_a(static_cast<size_t>((K - 1) * C), 0.0f), out_a(in.size());
  causal_conv_silu(in.data(), T, C, w.data(), K, state_a.data(), out_a.data(), 0, C);
  // Chunks of 1, 2 and 7 rows (shorter and longer than the K-1 history).
  for (int64_t chunk : {1, 2, 7}) {
    std::vector<float> state(static_cast<size_t>((K - 1) * C), 0.0f), out(in.size());
    for (int64_t t = 0; t < T; t += chunk) {
      const int64_t n = std::min(chunk, T - t);
      causal_conv_silu(in.data() + t * C, n, C, w.data(), K, state.data(), out.data() + t * C, 0, C);
    }
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], out_a[i], 1e-6f) << chunk;
    for (size_t i = 0; i < state.size(); ++i) EXPECT_EQ(state[i], state_a[i]);
  }
  // First row: only the newest tap sees data.
  for (int64_t c = 0; c < C; ++c) {
    const float pre = w[static_cast<size_t>(c * K + K - 1)] * in[static_cast<size_t>(c)];
    EXPECT_NEAR(out_a[static_cast<size_t>(c)], pre / (1 + std::exp(-pre)), 1e-6f);
  }
}

// A scan over T steps with random normalised q/k; returns outputs and the final state.
void scan(const VectorOps& ops, int64_t T, int64_t Dk, int64_t Dv, std::vector<float>* out,
          std::vector<float>* state) {
  auto q = test::random_floats(static_cast<size_t>(T * Dk), 21);
  auto k = test::random_floats(static_cast<size_t>(T * Dk), 22);
  const auto v = test::random_floats(static_cast<size_t>(T * Dv), 23);
  std::vector<float> decay(static_cast<size_t>(T)), beta(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    float nq = 0, nk = 0;
    for (int64_t i = 0; i < Dk; ++i) {
      nq += q[t * Dk + i] * q[t * Dk + i];
      nk += k[t * Dk + i] * k[t * Dk + i];
    }
    for (int64_t i = 0; i < Dk; ++i) {
      q[t * Dk + i] /= std::sqrt(nq) * std::sqrt(static_cast<float>(Dk));
      k[t * Dk + i] /= std::sqrt(nk);
    }
    decay[static_cast<size_t>(t)] = 0.9f + 0.1f * static_cast<float>(t % 7) / 7.0f;
    beta[static_cast<size_t>(t)] = 0.2f + 0.7f * static_cast<float>(t % 5) / 5.0f;
  }
  out->assign(static_cast<size_t>(T * Dv), NAN);
  state->assign(static_cast<size_t>(Dv * Dk), 0.0f);
  DeltaNetHeadScan s{q.data(), k.data(), Dk, v.data(), Dv, decay.data(), beta.data(), 1, out->data(), Dv};
  deltanet_scan_head(s, T, Dk, Dv, state->data(), ops);
}

TEST(DeltaNet, ScanMatchesTheRecurrenceFormula) {
  // One step from a zero state: S = beta·k vᵀ (row j = beta·v_j·k), o_j = S_j·q.
  const int64_t Dk = 4, Dv = 3;
  std::vector<float> q = {0.5f, 0, 0, 0}, k = {1, 0, 0, 0}, v = {1, 2, 3}, o(3), state(12, 0.0f);
  const float decay = 0.5f, beta = 0.25f;
  DeltaNetHeadScan s{q.data(), k.data(), Dk, v.data(), Dv, &decay, &beta, 1, o.data(), Dv};
  deltanet_scan_head(s, 1, Dk, Dv, state.data(), kVectorOpsReference);
  for (int j = 0; j < 3; ++j) {
    EXPECT_FLOAT_EQ(state[static_cast<size_t>(j * Dk)], 0.25f * v[static_cast<size_t>(j)]);
    EXPECT_FLOAT_EQ(o[static_cast<size_t>(j)], 0.25f * v[static_cast<size_t>(j)] * 0.5f);
  }
  // Second step with the same k: u = decay·(S·k); S_j = decay·S_j + beta(v_j - u)·k.
  deltanet_scan_head(s, 1, Dk, Dv, state.data(), kVectorOpsReference);
  for (int j = 0; j < 3; ++j) {
    const float s1 = 0.25f * v[static_cast<size_t>(j)], u = 0.5f * s1;
    EXPECT_FLOAT_EQ(state[static_cast<size_t>(j * Dk)], 0.5f * s1 + 0.25f * (v[static_cast<size_t>(j)] - u));
  }
}

TEST(DeltaNet, LongHorizonDriftStaysSmall) {
  // 600 steps at the real head size: the SIMD state must track the reference state.
  std::vector<float> ref_out, ref_state;
  scan(kVectorOpsReference, 600, 128, 128, &ref_out, &ref_state);
  for (SimdLevel level : simd_levels()) {
    std::vector<float> out, state;
    scan(vector_ops(level), 600, 128, 128, &out, &state);
    double max_state = 0, max_out = 0, state_scale = 0;
    for (size_t i = 0; i < state.size(); ++i) {
      max_state = std::max(max_state, std::fabs(static_cast<double>(state[i]) - ref_state[i]));
      state_scale = std::max(state_scale, std::fabs(static_cast<double>(ref_state[i])));
    }
    for (size_t i = 0; i < out.size(); ++i)
      max_out = std::max(max_out, std::fabs(static_cast<double>(out[i]) - ref_out[i]));
    EXPECT_LT(max_state, 1e-4 * state_scale) << simd_level_name(level);
    EXPECT_LT(max_out, 1e-4) << simd_level_name(level);
  }
}

}  // namespace
}  // namespace qwick
