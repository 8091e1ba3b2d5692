// The norm and Gated DeltaNet kernels (norm/norm_cuda.h, deltanet/deltanet_cuda.h,
// deltanet/deltanet_chunked_cuda.h) against rms_norm, causal_conv_silu, l2_norm, deltanet_gates and
// deltanet_scan_head.
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

TEST(Norm, RmsNormGatedNormAndEmbedding) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  for (int64_t H : {64, 128, 2048, 4096}) {
    SCOPED_TRACE(H);
    const int64_t n = 37;
    const auto x = randn(static_cast<size_t>(n * H), rng, 3.0f);
    const auto w = randn(static_cast<size_t>(H), rng);
    std::vector<float> ref(x.size());
    for (int64_t t = 0; t < n; ++t) rms_norm(x.data() + t * H, w.data(), 1e-6f, H, ref.data() + t * H);
    DeviceArray<float> dx(x), dw(w), out(x.size());
    DeviceArray<uint16_t> out16(x.size());
    cuda::rms_norm_rows(dx.data(), n, H, dw.data(), 1e-6f, out.data(), nullptr, nullptr);
    cuda::rms_norm_rows(dx.data(), n, H, dw.data(), 1e-6f, nullptr, out16.data(), nullptr);
    EXPECT_LT(rel_err(out.download(), ref), 1e-6);
    EXPECT_LT(rel_err(from_bf16(out16.download()), ref), 4e-3);
  }
  for (auto [heads, D] : {std::pair{32, 128}, std::pair{4, 32}, std::pair{2, 256}}) {
    const int64_t n = 9, ld = heads * D;
    const auto x = randn(static_cast<size_t>(n * ld), rng), z = randn(static_cast<size_t>(n * ld), rng);
    const auto w = randn(static_cast<size_t>(D), rng);
    std::vector<float> ref(x.size());
    for (int64_t i = 0; i < n * heads; ++i)
      gated_rms_norm(x.data() + i * D, z.data() + i * D, w.data(), 1e-6f, D, ref.data() + i * D);
    DeviceArray<float> dx(x), dz(z), dw(w), out(x.size());
    cuda::gated_rms_norm_rows(
        {dx.data(), ld, dz.data(), ld, n, heads, D, dw.data(), 1e-6f, out.data(), nullptr, ld}, nullptr);
    EXPECT_LT(rel_err(out.download(), ref), 1e-5);
    // z in bf16 (as the prefill DeltaNet projection writes it): the same against z rounded.
    const auto z16 = round_bf16(z);
    for (int64_t i = 0; i < n * heads; ++i)
      gated_rms_norm(x.data() + i * D, z16.data() + i * D, w.data(), 1e-6f, D, ref.data() + i * D);
    DeviceArray<uint16_t> dz16(to_bf16(z16));
    cuda::GatedNormArgs a{dx.data(), ld, nullptr, ld, n, heads, D, dw.data(), 1e-6f, out.data(), nullptr, ld};
    a.z_bf16 = dz16.data();
    cuda::gated_rms_norm_rows(a, nullptr);
    EXPECT_LT(rel_err(out.download(), ref), 1e-5) << "bf16 z";
  }
  for (WeightFormat f : {WeightFormat::kAffine4, WeightFormat::kAffine8, WeightFormat::kBF16}) {
    HostMatrix h = random_matrix(f, 1000, 256, 64, rng);
    auto up = cuda::upload_matrix(h.w, nullptr);
    const std::vector<int32_t> tokens = {0, 999, 5, 5, 512};
    DeviceArray<int32_t> dt(tokens);
    DeviceArray<float> out(tokens.size() * 256);
    cuda::embed_rows(up.m, dt.data(), static_cast<int64_t>(tokens.size()), out.data(), nullptr);
    std::vector<float> ref(out.size());
    for (size_t i = 0; i < tokens.size(); ++i) dequantize_row(h.w, tokens[i], ref.data() + i * 256);
    EXPECT_EQ(out.download(), ref) << weight_format_name(f);
  }
}

// Conv, prepare and scan over several chunks (including 1-row decode steps) against the CPU
// functions run over the same chunks, with the states carried on both sides; with the conv that
// walks the rows and with the row-parallel one (prefill), and in the row-parallel pass the 1-row
// steps go through the decode's fused deltanet_decode_step. The 1-row steps write their states into
// a second pair of buffers, as decode does, and leave the first as it was. A third pass gives the
// row-parallel conv (its staged loads, and for one shape its own) and the gates bf16 inputs (the prefill
// projection's output), the CPU the same values rounded.
TEST(DeltaNet, ChunkedPipelineMatchesCpu) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  struct Shape {
    int Hk, Hv, Dk, Dv;
  };
  // fused: q and k normalised in the conv, and a decode step as one launch; otherwise the norms in the
  // prepare kernel and a decode step as conv, prepare and scan (the reference decode chain).
  for (auto [fused, bf16_in] : {std::pair{false, false}, std::pair{true, false}, std::pair{true, true}})
    for (const Shape s : {Shape{16, 32, 128, 128}, Shape{2, 4, 32, 32}, Shape{4, 8, 64, 64}}) {
      SCOPED_TRACE(fmt::format("Hk {} Hv {} Dk {} Dv {}, {}{}", s.Hk, s.Hv, s.Dk, s.Dv,
                               fused ? "fused" : "reference chain", bf16_in ? ", bf16 inputs" : ""));
      const int K = 4;
      const int64_t key_dim = int64_t{s.Hk} * s.Dk, C = 2 * key_dim + int64_t{s.Hv} * s.Dv,
                    Vt = int64_t{s.Hv} * s.Dv;
      const auto conv_w = randn(static_cast<size_t>(C * K), rng, 0.5f);
      std::vector<float> a_neg(static_cast<size_t>(s.Hv)), dt_bias = randn(static_cast<size_t>(s.Hv), rng);
      std::uniform_real_distribution<float> ua(1.0f, 16.0f);
      for (float& v : a_neg) v = -ua(rng);
      std::vector<float> conv_state(static_cast<size_t>((K - 1) * C), 0.0f),
          rec(static_cast<size_t>(Vt * s.Dk), 0.0f);
      DeviceArray<float> d_conv_w(conv_w), d_a_neg(a_neg), d_dt(dt_bias), d_conv_state(conv_state),
          d_rec(rec);
      DeviceArray<float> d_conv_next(conv_state.size()), d_rec_next(rec.size());
      int decode_steps = 0;  // the second of the three carries the z rows with int16 activations
      for (int64_t n : {5, 1, 1, 130, 1, 64}) {
        SCOPED_TRACE(fmt::format("chunk of {}", n));
        const auto round_if = [&](std::vector<float> v) { return bf16_in ? round_bf16(v) : v; };
        const auto qkv = round_if(randn(static_cast<size_t>(n * C), rng));
        const auto b = round_if(randn(static_cast<size_t>(n * s.Hv), rng)),
                   a = round_if(randn(static_cast<size_t>(n * s.Hv), rng));
        // CPU.
        std::vector<float> conv(qkv.size()), beta(b.size()), decay(b.size()), o(static_cast<size_t>(n * Vt));
        causal_conv_silu(qkv.data(), n, C, conv_w.data(), K, conv_state.data(), conv.data(), 0, C);
        for (int64_t t = 0; t < n; ++t) {
          float* row = conv.data() + t * C;
          for (int h = 0; h < s.Hk; ++h) {
            l2_norm(row + h * s.Dk, s.Dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(s.Dk)));
            l2_norm(row + key_dim + h * s.Dk, s.Dk, 1e-6f, 1.0f);
          }
          deltanet_gates(b.data() + t * s.Hv, a.data() + t * s.Hv, a_neg.data(), dt_bias.data(), s.Hv,
                         beta.data() + t * s.Hv, decay.data() + t * s.Hv);
        }
        for (int h = 0; h < s.Hv; ++h) {
          const int64_t kh = h / (s.Hv / s.Hk);
          DeltaNetHeadScan scan{conv.data() + kh * s.Dk,
                                conv.data() + key_dim + kh * s.Dk,
                                C,
                                conv.data() + 2 * key_dim + int64_t{h} * s.Dv,
                                C,
                                decay.data() + h,
                                beta.data() + h,
                                s.Hv,
                                o.data() + int64_t{h} * s.Dv,
                                Vt};
          deltanet_scan_head(scan, n, s.Dk, s.Dv, rec.data() + int64_t{h} * s.Dv * s.Dk, kVectorOpsReference);
        }
        // GPU.
        DeviceArray<float> d_qkv(qkv), d_b(b), d_a(a), d_conv(qkv.size()), d_beta(b.size()),
            d_decay(b.size()), d_o(o.size());
        // bf16 rows 4 values longer for one shape: not 16-byte pieces, so the conv's own loads, not the
        // staged ones, read them.
        const int64_t ld16 = s.Dk == 32 ? C + 4 : C;
        std::vector<float> padded(static_cast<size_t>(n * ld16), 0.0f);
        for (int64_t t = 0; t < n; ++t) std::copy_n(qkv.begin() + t * C, C, padded.begin() + t * ld16);
        DeviceArray<uint16_t> d_qkv16(to_bf16(padded)), d_b16(to_bf16(b)), d_a16(to_bf16(a));
        cuda::DeltaNetConvArgs conv_args{bf16_in ? nullptr : d_qkv.data(),
                                         bf16_in ? ld16 : C,
                                         n,
                                         C,
                                         d_conv_w.data(),
                                         K,
                                         d_conv_state.data(),
                                         d_conv.data(),
                                         C};
        if (bf16_in) conv_args.in_bf16 = d_qkv16.data();
        const bool ping_pong = n == 1;
        const std::vector<float> conv_before = ping_pong ? d_conv_state.download() : std::vector<float>{},
                                 rec_before = ping_pong ? d_rec.download() : std::vector<float>{};
        if (ping_pong) conv_args.state_out = d_conv_next.data();
        float* const rec_out = ping_pong ? d_rec_next.data() : d_rec.data();
        if (fused && n > 1) {  // the conv also does the norms
          conv_args.norm_heads = s.Hk;
          conv_args.norm_dim = s.Dk;
        }
        if (n == 1 && fused && !bf16_in) {  // a decode step: conv, prepare and scan fused
          cuda::DeltaNetDecodeStepArgs step{conv_args,   s.Hk,         s.Dk,       s.Hv,
                                            s.Dv,        d_b.data(),   d_a.data(), d_a_neg.data(),
                                            d_dt.data(), d_rec.data(), rec_out,    d_o.data()};
          // At the model's shapes the launch also carries a z projection (4-bit, 2048 inputs, RMSNorm).
          const int64_t H = 2048;
          const HostMatrix zw = random_matrix(WeightFormat::kAffine4, Vt, H, 64, rng);
          const auto zu = cuda::upload_matrix(zw.w, nullptr);
          const auto x = randn(static_cast<size_t>(H), rng, 3.0f), nw = randn(static_cast<size_t>(H), rng);
          DeviceArray<float> d_x(x), d_nw(nw), d_z(static_cast<size_t>(Vt));
          const bool carry = cuda::deltanet_decode_step_carries_z(s.Dk, K, zu.m);
          if (carry) {
            step.z = zu.m;
            step.z_x = d_x.data();
            step.z_norm = d_nw.data();
            step.z_eps = 1e-6f;
            step.z_out = d_z.data();
            step.z_i16 = decode_steps++ == 1;
          }
          cuda::deltanet_decode_step(step, nullptr);
          EXPECT_EQ(carry, s.Dk == 128);
          if (carry) {
            std::vector<float> normed(static_cast<size_t>(H));
            rms_norm(x.data(), nw.data(), 1e-6f, H, normed.data());
            // int16: each staged value within about 1/65534 of its chunk's largest, which the RMSNorm
            // weight's random sizes make several times the chunk's typical value (~4e-5 by estimate).
            EXPECT_LT(rel_err(d_z.download(), cpu_matmul(zw.w, normed, 1)), step.z_i16 ? 2e-4 : 2e-5) << "z";
          }
        } else {
          cuda::deltanet_conv(conv_args, nullptr);
          cuda::DeltaNetPrepareArgs gates{d_conv.data(),
                                          C,
                                          n,
                                          s.Hk,
                                          s.Dk,
                                          s.Hv,
                                          d_b.data(),
                                          d_a.data(),
                                          s.Hv,
                                          d_a_neg.data(),
                                          d_dt.data(),
                                          d_beta.data(),
                                          d_decay.data(),
                                          conv_args.norm_heads > 0};
          if (bf16_in) gates.b = gates.a = nullptr, gates.b_bf16 = d_b16.data(), gates.a_bf16 = d_a16.data();
          cuda::deltanet_prepare(gates, nullptr);
          cuda::DeltaNetScanArgs scan{d_conv.data(), C,    d_beta.data(), d_decay.data(), n,          s.Hk,
                                      s.Hv,          s.Dk, s.Dv,          d_rec.data(),   d_o.data(), Vt};
          scan.state_out = rec_out;
          cuda::deltanet_scan(scan, nullptr);
          EXPECT_LT(rel_err(d_conv.download(), conv), 1e-5);
          EXPECT_LT(rel_err(d_beta.download(), beta), 1e-6);
          EXPECT_LT(rel_err(d_decay.download(), decay), 1e-5);
        }
        EXPECT_LT(rel_err(d_o.download(), o), 1e-4);
        if (ping_pong) {
          EXPECT_EQ(d_conv_state.download(), conv_before) << "a step wrote the window it read";
          EXPECT_EQ(d_rec.download(), rec_before) << "a step wrote the state it read";
          std::swap(d_conv_state, d_conv_next);
          std::swap(d_rec, d_rec_next);
        }
        EXPECT_LT(rel_err(d_conv_state.download(), conv_state), 1e-6);
        EXPECT_LT(rel_err(d_rec.download(), rec), 1e-4);
      }
    }
}

// The conv's own q and k norms (norm_heads) against the conv followed by deltanet_prepare's norms:
// one row (a run of one), a partial run and runs across blocks, head sizes 32-128, and a layout whose
// first block holds q, k and v channels (one key head of 32).
TEST(DeltaNet, ConvNormsMatchPrepare) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  struct Shape {
    int Hk, Hv, Dk, Dv;
  };
  for (const Shape s : {Shape{16, 32, 128, 128}, Shape{1, 2, 32, 32}, Shape{4, 8, 64, 64}}) {
    const int K = 4;
    const int64_t C = 2 * int64_t{s.Hk} * s.Dk + int64_t{s.Hv} * s.Dv;
    const auto conv_w = randn(static_cast<size_t>(C * K), rng, 0.5f);
    const auto window = randn(static_cast<size_t>((K - 1) * C), rng);
    std::vector<float> a_neg(static_cast<size_t>(s.Hv), -1.0f), dt_bias(static_cast<size_t>(s.Hv), 0.0f);
    for (int64_t n : {1, 5, 37}) {
      SCOPED_TRACE(fmt::format("Hk {} Dk {}, {} rows", s.Hk, s.Dk, n));
      const auto qkv = randn(static_cast<size_t>(n * C), rng), ba = randn(static_cast<size_t>(n * s.Hv), rng);
      DeviceArray<float> d_qkv(qkv), d_w(conv_w), d_ba(ba), d_a_neg(a_neg), d_dt(dt_bias);
      std::vector<float> out[2], state[2];
      for (int fused = 0; fused < 2; ++fused) {
        DeviceArray<float> d_state(window), d_out(qkv.size()), d_beta(ba.size()), d_decay(ba.size());
        cuda::DeltaNetConvArgs conv{d_qkv.data(), C, n, C, d_w.data(), K, d_state.data(), d_out.data(), C};
        if (fused) conv.norm_heads = s.Hk, conv.norm_dim = s.Dk;
        cuda::deltanet_conv(conv, nullptr);
        cuda::deltanet_prepare({d_out.data(), C, n, s.Hk, s.Dk, s.Hv, d_ba.data(), d_ba.data(), s.Hv,
                                d_a_neg.data(), d_dt.data(), d_beta.data(), d_decay.data(), fused == 1},
                               nullptr);
        out[fused] = d_out.download();
        state[fused] = d_state.download();
      }
      EXPECT_LT(rel_err(out[1], out[0]), 1e-6);
      EXPECT_EQ(state[1], state[0]);
    }
  }
}

// The chunked (WY) scan against deltanet_scan_head over several calls with the state carried,
// starting from a random nonzero state: lengths under, at and across the 64-row chunk; with the
// split (3×tf32) products and with plain tf32.
TEST(DeltaNet, ChunkedScanMatchesCpu) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  struct Shape {
    int Hk, Hv, Dk, Dv;
  };
  for (const Shape s :
       {Shape{16, 32, 128, 128}, Shape{4, 8, 64, 64}, Shape{2, 4, 128, 64}, Shape{2, 6, 64, 96}}) {
    SCOPED_TRACE(fmt::format("Hk {} Hv {} Dk {} Dv {}", s.Hk, s.Hv, s.Dk, s.Dv));
    const int64_t key_dim = int64_t{s.Hk} * s.Dk, C = 2 * key_dim + int64_t{s.Hv} * s.Dv,
                  Vt = int64_t{s.Hv} * s.Dv;
    std::vector<float> rec = randn(static_cast<size_t>(Vt * s.Dk), rng);
    DeviceArray<float> d_rec_split(rec), d_rec_plain(rec);
    for (int64_t n : {5, 64, 130, 1, 300, 63}) {
      SCOPED_TRACE(fmt::format("chunk of {}", n));
      const ScanInputs in = random_scan_inputs(n, s.Hk, s.Hv, s.Dk, s.Dv, rng);
      std::vector<float> o(static_cast<size_t>(n * Vt));
      for (int h = 0; h < s.Hv; ++h) {
        const int64_t kh = h / (s.Hv / s.Hk);
        const DeltaNetHeadScan scan{in.qkv.data() + kh * s.Dk,
                                    in.qkv.data() + key_dim + kh * s.Dk,
                                    C,
                                    in.qkv.data() + 2 * key_dim + int64_t{h} * s.Dv,
                                    C,
                                    in.decay.data() + h,
                                    in.beta.data() + h,
                                    s.Hv,
                                    o.data() + int64_t{h} * s.Dv,
                                    Vt};
        deltanet_scan_head(scan, n, s.Dk, s.Dv, rec.data() + int64_t{h} * s.Dv * s.Dk, kVectorOpsReference);
      }
      DeviceArray<float> d_qkv(in.qkv), d_beta(in.beta), d_decay(in.decay), d_o(o.size()),
          d_work(static_cast<size_t>(cuda::deltanet_chunked_workspace_floats(n, s.Hv)));
      for (bool split : {true, false}) {
        d_o.poison();
        const DeviceArray<float>& d_rec = split ? d_rec_split : d_rec_plain;
        const cuda::DeltaNetScanArgs args{d_qkv.data(), C,    d_beta.data(), d_decay.data(), n,          s.Hk,
                                          s.Hv,         s.Dk, s.Dv,          d_rec.data(),   d_o.data(), Vt};
        ASSERT_TRUE(cuda::deltanet_chunked_supported(args));
        cuda::deltanet_chunked_scan(args, d_work.data(), nullptr, split);
        const double err_o = rel_err(d_o.download(), o), err_s = rel_err(d_rec.download(), rec);
        fmt::print("chunked scan {:5} Hk {:2} Hv {:2} Dk {:3} Dv {:3} n {:3}: out {:.2e} state {:.2e}\n",
                   split ? "3xtf32" : "tf32", s.Hk, s.Hv, s.Dk, s.Dv, n, err_o, err_s);
        // Split keeps the state near f32; the output's P·V' is plain tf32 either way.
        const double bound_o = split ? 2e-3 : 5e-3, bound_s = split ? 1e-4 : 5e-3;
        EXPECT_LT(err_o, bound_o) << (split ? "3xtf32" : "tf32");
        EXPECT_LT(err_s, bound_s) << (split ? "3xtf32" : "tf32");
      }
    }
  }
}

}  // namespace
}  // namespace qwick
