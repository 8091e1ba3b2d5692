// The attention kernels (attention/attention_cuda.h) against rms_norm, apply_rope and `attend`.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "backend/cuda/cuda_weights.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "cuda_test_util.h"
#include "kernel_test_util.h"
#include "kernels/activation.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/kv_q8.h"
#include "kernels/deltanet/deltanet.h"
#include "kernels/deltanet/deltanet_chunked_cuda.h"
#include "kernels/deltanet/deltanet_cuda.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/matmul_parallel.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/router.h"
#include "kernels/norm/norm_cuda.h"
#include "kernels/norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "kernels/sample/sample_cuda.h"
#include "kernels/vector/vector_ops.h"
#include "test_util.h"

namespace qwick {
namespace {

using namespace test;

TEST(Attention, PrepNormRopeAndCacheAppend) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  for (const AttnShape s : {AttnShape{16, 2, 256}, AttnShape{4, 2, 32}}) {
    SCOPED_TRACE(fmt::format("{} q heads, {} kv heads, head_dim {}", s.nq, s.nkv, s.hd));
    const int rd = s.hd / 4;
    const int64_t n = 21, pos0 = 100000, cap = pos0 + n, q_stride = 2 * s.hd, q_rows = s.nq * q_stride,
                  kvr = s.nkv * s.hd;
    const auto qg = randn(static_cast<size_t>(n * q_rows), rng), k = randn(static_cast<size_t>(n * kvr), rng),
               v = randn(static_cast<size_t>(n * kvr), rng);
    const auto qn = randn(static_cast<size_t>(s.hd), rng), kn = randn(static_cast<size_t>(s.hd), rng);
    RopeTable rope(1e7, rd);
    std::vector<float> inv(static_cast<size_t>(rd / 2));
    for (int i = 0; i < rd / 2; ++i)
      inv[static_cast<size_t>(i)] = 1.0f / std::pow(1e7f, static_cast<float>(2 * i) / static_cast<float>(rd));
    DeviceArray<float> dqg(qg), dk(k), dv(v), dqn(qn), dkn(kn), dinv(inv),
        dq(static_cast<size_t>(n * s.nq * s.hd));
    DeviceArray<uint16_t> kc(static_cast<size_t>(s.nkv * cap * s.hd)), vc(kc.size());
    cuda::AttentionPrepArgs args{dqg.data(), q_rows,     q_stride,   dk.data(), dv.data(),   kvr,
                                 n,          pos0,       nullptr,    s.nq,      s.nkv,       s.hd,
                                 rd,         dqn.data(), dkn.data(), 1e-6f,     dinv.data(), dq.data(),
                                 nullptr,    kc.data(),  vc.data(),  cap};
    cuda::attention_prep(args, nullptr);
    // The same into a q8 cache.
    DeviceArray<uint8_t> kq(kc.size()), vq(kc.size());
    DeviceArray<float> ks(static_cast<size_t>(s.nkv * cap)), vs(ks.size());
    args.k_cache = kq.data(), args.v_cache = vq.data(), args.k_scale = ks.data(), args.v_scale = vs.data();
    cuda::attention_prep(args, nullptr);
    const auto q_out = dq.download();
    const auto k_out = from_bf16(kc.download()), v_out = from_bf16(vc.download());
    const auto kq_out = kq.download(), vq_out = vq.download();
    const auto ks_out = ks.download(), vs_out = vs.download();
    std::vector<float> q_ref(q_out.size()), q_got(q_out.size()), k_ref, k_got, v_ref, v_got;
    std::vector<float> cs(static_cast<size_t>(rd / 2)), sn(cs.size());
    for (int64_t t = 0; t < n; ++t) {
      rope.angles(pos0 + t, cs.data(), sn.data());
      for (int h = 0; h < s.nq; ++h) {
        float* r = q_ref.data() + (t * s.nq + h) * s.hd;
        rms_norm(qg.data() + t * q_rows + h * q_stride, qn.data(), 1e-6f, s.hd, r);
        apply_rope(r, rd, cs.data(), sn.data());
      }
      for (int j = 0; j < s.nkv; ++j) {
        std::vector<float> r(static_cast<size_t>(s.hd));
        rms_norm(k.data() + t * kvr + j * s.hd, kn.data(), 1e-6f, s.hd, r.data());
        apply_rope(r.data(), rd, cs.data(), sn.data());
        // q8: v's row coded exactly as the CPU codes it (the same f32 values); k's within half a step
        // of the reference (its values differ in the last f32 bits, so a code may round the other way).
        const size_t row = static_cast<size_t>(j * cap + pos0 + t);
        const test::Q8Rows kr = test::q8_rows(r, s.hd),
                           vr = test::q8_rows(std::vector<float>(v.begin() + t * kvr + j * s.hd,
                                                                 v.begin() + t * kvr + (j + 1) * s.hd),
                                              s.hd);
        EXPECT_EQ(vs_out[row], vr.scales[0]);
        EXPECT_NEAR(ks_out[row], kr.scales[0], 1e-5 * kr.scales[0]);
        for (int d = 0; d < s.hd; ++d) {
          const size_t at = row * static_cast<size_t>(s.hd) + static_cast<size_t>(d);
          EXPECT_EQ(vq_out[at], vr.codes[static_cast<size_t>(d)]);
          EXPECT_NEAR(kv_q8_value(kq_out[at], ks_out[row]), r[static_cast<size_t>(d)], 0.51 * kr.scales[0]);
        }
        for (int d = 0; d < s.hd; ++d) {
          const size_t at = static_cast<size_t>((j * cap + pos0 + t) * s.hd + d);
          k_ref.push_back(round_to_bf16(r[static_cast<size_t>(d)]));
          k_got.push_back(k_out[at]);
          v_ref.push_back(round_to_bf16(v[static_cast<size_t>(t * kvr + j * s.hd + d)]));
          v_got.push_back(v_out[at]);
        }
      }
    }
    EXPECT_LT(rel_err(q_out, q_ref), 2e-6);
    EXPECT_LT(rel_err(k_got, k_ref), 5e-3);  // bf16 rounding of values that differ in the last f32 bits
    EXPECT_EQ(v_got, v_ref);
  }
}

TEST(Attention, DecodeMatchesAttend) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  for (const AttnShape s : {AttnShape{16, 2, 256}, AttnShape{4, 2, 32}, AttnShape{8, 2, 128}}) {
    for (int64_t len : {1, 7, 64, 300, 5000}) {
      const int64_t cap = len + 3;
      HostCache cache = random_cache(s, cap, rng);
      HostQ8Cache q8 = random_q8_cache(s, cap, rng);
      // Rows past the context are never read into the result: NaN there must not leak in.
      for (int j = 0; j < s.nkv; ++j)
        for (int64_t p = len; p < cap; ++p) {
          q8.k.scales[static_cast<size_t>(j * cap + p)] = q8.v.scales[static_cast<size_t>(j * cap + p)] = NAN;
          for (int d = 0; d < s.hd; ++d) {
            const size_t at = static_cast<size_t>((j * cap + p) * s.hd + d);
            cache.k[at] = cache.v[at] = 0x7fc0;
          }
        }
      for (const bool kv_q8 : {false, true}) {
        const auto q = randn(static_cast<size_t>(s.nq * s.hd), rng, 2.0f);
        const int64_t q_stride = 2 * s.hd;
        const auto gate = randn(static_cast<size_t>(s.nq * q_stride), rng);
        const float scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
        std::vector<float> ref(static_cast<size_t>(s.nq * s.hd)), scores(static_cast<size_t>(len));
        for (int h = 0; h < s.nq; ++h) {
          float* o = ref.data() + h * s.hd;
          const int j = h / (s.nq / s.nkv);
          attend(q.data() + h * s.hd, kv_q8 ? q8.head(j, cap, s.hd) : cache.head(j, cap, s.hd), len, s.hd,
                 scale, scores.data(), o, kVectorOpsReference);
          for (int d = 0; d < s.hd; ++d) o[d] *= sigmoid(gate[static_cast<size_t>(h * q_stride + s.hd + d)]);
        }
        DeviceArray<uint16_t> kc(cache.k), vc(cache.v);
        DeviceArray<uint8_t> kq(q8.k.codes), vq(q8.v.codes);
        DeviceArray<float> ks(q8.k.scales), vs(q8.v.scales);
        for (const int splits : {1, 7, 66}) {
          SCOPED_TRACE(fmt::format("{}/{} heads x {}, context {}, {} splits, {} cache", s.nq, s.nkv, s.hd,
                                   len, splits, kv_q8 ? "q8" : "bf16"));
          DeviceArray<float> dq(q), dgate(gate), partial(static_cast<size_t>(s.nq * splits * (s.hd + 2))),
              out(ref.size());
          DeviceArray<int32_t> pos(std::vector<int32_t>{static_cast<int32_t>(len - 1)});
          cuda::AttentionDecodeArgs args{
              dq.data(), kc.data(),      vc.data(),           cap,      pos.data(), s.nq, s.nkv, s.hd, scale,
              splits,    partial.data(), dgate.data() + s.hd, q_stride, out.data()};
          if (kv_q8)
            args.k_cache = kq.data(), args.v_cache = vq.data(), args.k_scale = ks.data(),
            args.v_scale = vs.data();
          cuda::attention_decode(args, nullptr);
          // q and p as two bf16 (q8: f16) parts each, about 16 bits.
          EXPECT_LT(rel_err(out.download(), ref), 2e-5);
        }
      }
    }
  }
}

// The bf16 copy prefill reads of a q8 cache: each value kv_q8_value rounded to bf16, rows past `rows`
// untouched.
TEST(Attention, Q8CacheToBf16) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  const int nkv = 2, hd = 256;
  const int64_t cap = 300, rows = 257;
  const test::Q8Rows q = test::q8_rows(randn(static_cast<size_t>(nkv * cap * hd), rng, 3.0f), hd);
  DeviceArray<uint8_t> codes(q.codes);
  DeviceArray<float> scales(q.scales);
  DeviceArray<uint16_t> out(q.codes.size());
  cuda::kv_q8_to_bf16(codes.data(), scales.data(), rows, nkv, hd, cap, out.data(), nullptr);
  const auto got = out.download();
  for (int j = 0; j < nkv; ++j)
    for (int64_t p = 0; p < cap; ++p)
      for (int d = 0; d < hd; ++d) {
        const size_t at = static_cast<size_t>((j * cap + p) * hd + d);
        if (p < rows)
          ASSERT_EQ(got[at],
                    to_bf16({kv_q8_value(q.codes[at], q.scales[static_cast<size_t>(j * cap + p)])})[0]);
        else
          ASSERT_EQ(got[at], 0xffff);  // DeviceArray's poison
      }
}

// The combine computing the output gate's rows itself (AttentionDecodeArgs::gate_proj) from a plain
// and an RMSNorm input, for the three weight formats and inputs narrow enough that a row takes less
// than a warp: against the CPU norm and matmul, then `attend`.
TEST(Attention, DecodeGateRowsMatchCpu) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  struct GateCase {
    AttnShape s;
    MatrixCase m;  // rows: n_heads · head_dim
  };
  for (const GateCase& g : {GateCase{{16, 2, 256}, {WeightFormat::kAffine4, 4096, 2048}},
                            GateCase{{4, 2, 32}, {WeightFormat::kAffine8, 128, 64}},
                            GateCase{{8, 2, 128}, {WeightFormat::kBF16, 1024, 320}},
                            GateCase{{4, 1, 64}, {WeightFormat::kAffine4, 256, 128, 32}}}) {
    const AttnShape s = g.s;
    const int64_t len = 300, cap = len + 3, splits = 7;
    const HostCache cache = random_cache(s, cap, rng);
    const auto q = randn(static_cast<size_t>(s.nq * s.hd), rng, 2.0f);
    HostMatrix h = random_matrix(g.m.format, g.m.rows, g.m.cols, g.m.group, rng);
    auto up = cuda::upload_matrix(h.w, nullptr);
    const auto x = randn(static_cast<size_t>(g.m.cols), rng, 3.0f),
               w = randn(static_cast<size_t>(g.m.cols), rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
    std::vector<float> attended(static_cast<size_t>(s.nq * s.hd)), scores(static_cast<size_t>(len));
    for (int hq = 0; hq < s.nq; ++hq)
      attend(q.data() + hq * s.hd, cache.head(hq / (s.nq / s.nkv), cap, s.hd), len, s.hd, scale,
             scores.data(), attended.data() + hq * s.hd, kVectorOpsReference);
    DeviceArray<float> dq(q), dx(x), dw(w), partial(static_cast<size_t>(s.nq * splits * (s.hd + 2))),
        out(attended.size());
    DeviceArray<uint16_t> kc(cache.k), vc(cache.v);
    DeviceArray<int32_t> pos(std::vector<int32_t>{static_cast<int32_t>(len - 1)});
    for (const bool norm : {false, true}) {
      std::vector<float> in = x;
      if (norm) rms_norm(x.data(), w.data(), 1e-6f, g.m.cols, in.data());
      const auto gate = cpu_matmul(h.w, in, 1);
      std::vector<float> ref = attended;
      for (size_t i = 0; i < ref.size(); ++i) ref[i] *= sigmoid(gate[i]);
      SCOPED_TRACE(fmt::format("{}/{} heads x {}, gate {}, {}", s.nq, s.nkv, s.hd, describe(g.m),
                               norm ? "RMSNorm" : "plain"));
      cuda::AttentionDecodeArgs args{
          dq.data(),      kc.data(), vc.data(), cap,       pos.data(),
          s.nq,           s.nkv,     s.hd,      scale,     static_cast<int>(splits),
          partial.data(), nullptr,   0,         out.data()};
      args.gate_proj = up.m;
      args.gate_x = dx.data();
      args.gate_norm = norm ? dw.data() : nullptr;
      args.eps = 1e-6f;
      out.poison();
      cuda::attention_decode(args, nullptr);
      EXPECT_LT(rel_err(out.download(), ref), 2e-5);
    }
  }
}

TEST(Attention, PrefillMatchesAttendPerRow) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  for (const AttnShape s : {AttnShape{16, 2, 256}, AttnShape{4, 2, 32}, AttnShape{8, 2, 128},
                            AttnShape{4, 1, 64}, AttnShape{3, 3, 128}, AttnShape{2, 2, 256}}) {
    for (auto [pos0, n] :
         {std::pair<int64_t, int64_t>{0, 1}, {0, 100}, {37, 64}, {300, 130}, {2000, 3}, {64, 200}}) {
      SCOPED_TRACE(fmt::format("{}/{} heads x {}, rows [{}, {})", s.nq, s.nkv, s.hd, pos0, pos0 + n));
      const int64_t cap = pos0 + n, q_stride = 2 * s.hd, ld_gate = s.nq * q_stride;
      const HostCache cache = random_cache(s, cap, rng);
      const auto q = round_bf16(randn(static_cast<size_t>(n * s.nq * s.hd), rng, 2.0f));
      const auto gate = randn(static_cast<size_t>(n * ld_gate), rng);
      DeviceArray<uint16_t> dq(to_bf16(q)), kc(cache.k), vc(cache.v),
          out(static_cast<size_t>(n * s.nq * s.hd));
      DeviceArray<float> dgate(gate);
      const float scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
      std::vector<float> ref(out.size()), scores(static_cast<size_t>(cap));
      for (int64_t t = 0; t < n; ++t)
        for (int h = 0; h < s.nq; ++h) {
          float* o = ref.data() + (t * s.nq + h) * s.hd;
          attend(q.data() + (t * s.nq + h) * s.hd, cache.head(h / (s.nq / s.nkv), cap, s.hd), pos0 + t + 1,
                 s.hd, scale, scores.data(), o, kVectorOpsReference);
          for (int d = 0; d < s.hd; ++d)
            o[d] *= sigmoid(gate[static_cast<size_t>(t * ld_gate + h * q_stride + s.hd + d)]);
        }
      // head_dim 32 runs on the mma.sync kernel, the others on warpgroup products.
      cuda::AttentionPrefillArgs args{
          dq.data(), kc.data(), vc.data(),           cap,     n,        pos0,      s.nq, s.nkv,
          s.hd,      scale,     dgate.data() + s.hd, ld_gate, q_stride, out.data()};
      out.upload(std::vector<uint16_t>(out.size(), 0x7fc0));  // NaN
      cuda::attention_prefill(args, nullptr);
      EXPECT_LT(rel_err(from_bf16(out.download()), ref), 1.5e-2);
    }
  }
}

}  // namespace
}  // namespace qwick
