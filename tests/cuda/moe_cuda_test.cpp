// The MoE kernels (moe/moe_cuda.h): routing and grouping against route_token, the grouped GEMMs,
// SwiGLU and combine against the CPU chain, and the fused decode MoE against the CPU moe chain.
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

// A grouping of the pairs `ids` (token i / k, rank i % k): offsets are the exclusive scan of the
// histogram, slot_of is a permutation that puts every pair inside its expert's group, slot_row inverts
// it, the tiles cover each group exactly, and the counts are left zero for the next grouping.
void expect_grouping(const std::vector<int32_t>& ids, int k, int E, const GroupingArrays& a, int tile_rows) {
  const int64_t pairs = static_cast<int64_t>(ids.size());
  const auto off = a.offsets.download(), so = a.slot_of.download(), sr = a.slot_row.download();
  std::vector<int32_t> hist(static_cast<size_t>(E), 0);
  for (int32_t e : ids) ++hist[static_cast<size_t>(e)];
  int32_t running = 0;
  for (int e = 0; e <= E; ++e) {
    ASSERT_EQ(off[static_cast<size_t>(e)], running) << "expert " << e;
    if (e < E) running += hist[static_cast<size_t>(e)];
  }
  std::set<int32_t> seen(so.begin(), so.begin() + pairs);
  ASSERT_EQ(static_cast<int64_t>(seen.size()), pairs);
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t e = ids[static_cast<size_t>(i)], s = so[static_cast<size_t>(i)];
    ASSERT_GE(s, off[static_cast<size_t>(e)]);
    ASSERT_LT(s, off[static_cast<size_t>(e) + 1]);
    ASSERT_EQ(sr[static_cast<size_t>(s)], i / k);
  }
  const int32_t nt = a.tile_count.download()[0];
  const auto tl = a.tiles.download();
  std::vector<int32_t> covered(static_cast<size_t>(pairs), 0);
  for (int32_t i = 0; i < nt; ++i) {
    const cuda::GemmTile tt = tl[static_cast<size_t>(i)];
    ASSERT_LE(tt.end - tt.begin, tile_rows);
    ASSERT_GE(tt.begin, off[static_cast<size_t>(tt.group)]);
    ASSERT_LE(tt.end, off[static_cast<size_t>(tt.group) + 1]);
    for (int32_t s = tt.begin; s < tt.end; ++s) ++covered[static_cast<size_t>(s)];
  }
  for (int32_t c : covered) ASSERT_EQ(c, 1);
  EXPECT_EQ(a.counts.download(), std::vector<int32_t>(static_cast<size_t>(E) + 1, 0));
}

// Routing and grouping in one pass (moe_route_group) against route_token and the grouping's invariants:
// a chunk of 4096 tokens (512 blocks report to the counts' last block), small chunks, one token and
// none; each twice on the same arrays, the second time as programmatic launches, so the counts are
// seen to be left zero. The logits lie at a stride, as the backend's router writes them.
TEST(Moe, RouteMatchesRouteToken) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  for (auto [E, k, n] :
       {std::tuple{256, 8, int64_t{4096}}, std::tuple{8, 2, int64_t{333}}, std::tuple{16, 8, int64_t{333}},
        std::tuple{512, 10, int64_t{333}}, std::tuple{512, 10, int64_t{1}}, std::tuple{256, 8, int64_t{0}}}) {
    SCOPED_TRACE(fmt::format("{} experts, top {}, {} tokens", E, k, n));
    const int64_t ld = E + 3;
    const size_t pairs = static_cast<size_t>(n * k), room = std::max<size_t>(pairs, 1);
    auto logits = randn(static_cast<size_t>(std::max<int64_t>(n, 1) * ld), rng, 2.0f);
    logits[5] = logits[7];  // a tie: the lower id must win
    DeviceArray<float> dl(logits), dw(room);
    DeviceArray<int32_t> di(room);
    GroupingArrays arrays(n, k, E);
    for (bool overlap : {false, true}) {
      SCOPED_TRACE(overlap ? "programmatic launches" : "plain launches");
      cuda::moe_route_group(dl.data(), ld, n, E, k, di.data(), dw.data(), arrays.grouping(144), nullptr,
                            overlap);
      std::vector<int32_t> ids = di.download();
      const std::vector<float> w = dw.download();
      ids.resize(pairs);
      for (int64_t t = 0; t < n; ++t) {
        std::vector<int32_t> rid(static_cast<size_t>(k));
        std::vector<float> rw(static_cast<size_t>(k));
        route_token(logits.data() + t * ld, E, k, rid.data(), rw.data());
        for (int j = 0; j < k; ++j) {
          ASSERT_EQ(ids[static_cast<size_t>(t * k + j)], rid[static_cast<size_t>(j)])
              << "token " << t << " rank " << j;
          ASSERT_NEAR(w[static_cast<size_t>(t * k + j)], rw[static_cast<size_t>(j)], 1e-5f);
        }
      }
      expect_grouping(ids, k, E, arrays, 144);
      if (HasFatalFailure()) return;
    }
  }
  // The decode variant and its gemv index lists.
  const int E = 256, k = 8;
  const auto logits = randn(E, rng);
  DeviceArray<float> dl(logits), dw(k);
  DeviceArray<int32_t> di(k), gu(2 * k + 2), dn(k + 1);
  cuda::moe_route_decode(dl.data(), E, k, di.data(), dw.data(), gu.data(), dn.data(), nullptr);
  std::vector<int32_t> rid(k);
  std::vector<float> rw(k);
  route_token(logits.data(), E, k, rid.data(), rw.data());
  const auto g = gu.download(), d = dn.download();
  EXPECT_EQ(di.download(), rid);
  for (int j = 0; j < k; ++j) {
    EXPECT_EQ(g[static_cast<size_t>(j)], 3 * rid[static_cast<size_t>(j)]);
    EXPECT_EQ(g[static_cast<size_t>(k + j)], 3 * rid[static_cast<size_t>(j)] + 1);
    EXPECT_EQ(d[static_cast<size_t>(j)], 3 * rid[static_cast<size_t>(j)] + 2);
  }
  EXPECT_EQ(g[2 * k], 3 * E);
  EXPECT_EQ(g[2 * k + 1], 3 * E + 1);
  EXPECT_EQ(d[k], 3 * E + 2);
}

// Grouping (ranks, scan, tiles, slots), the grouped GEMM over an expert table, SwiGLU and the
// combine, against a direct CPU computation; balanced, all-to-the-same-experts and sparse routings.
TEST(Moe, GroupingGroupedGemmAndCombine) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  const int E = 32, k = 4;
  const int64_t H = 256, I = 128, n = 150, pairs = n * k;
  // Experts: gate, up, down per expert, 4-bit.
  std::vector<HostMatrix> host;
  std::vector<cuda::UploadedMatrix> dev;
  std::vector<DeviceMatrix> table;
  for (int e = 0; e < E; ++e)
    for (auto [rows, cols] : {std::pair{I, H}, std::pair{I, H}, std::pair{H, I}}) {
      host.push_back(random_matrix(WeightFormat::kAffine4, rows, cols, 64, rng));
      dev.push_back(cuda::upload_matrix(host.back().w, nullptr));
      table.push_back(dev.back().m);
    }
  cuda::DeviceBuffer table_dev(table.size() * sizeof(DeviceMatrix));
  cuda::check(
      cudaMemcpy(table_dev.data(), table.data(), table.size() * sizeof(DeviceMatrix), cudaMemcpyHostToDevice),
      "");

  for (const char* routing : {"balanced", "all to experts 0..k-1", "three experts only"}) {
    SCOPED_TRACE(routing);
    std::vector<int32_t> ids(static_cast<size_t>(pairs));
    for (int64_t t = 0; t < n; ++t) {
      std::vector<int32_t> pick(E);
      std::iota(pick.begin(), pick.end(), 0);
      if (routing[0] == 'b') std::shuffle(pick.begin(), pick.end(), rng);
      if (routing[0] == 't') pick = {3, 17, 30, static_cast<int32_t>(t % 2 ? 0 : 1)};
      for (int j = 0; j < k; ++j) ids[static_cast<size_t>(t * k + j)] = pick[static_cast<size_t>(j)];
    }
    const auto weights = randn(static_cast<size_t>(pairs), rng);
    const auto x = round_bf16(randn(static_cast<size_t>(n * H), rng));
    DeviceArray<float> d_logits(logits_routing_to(ids, n, k, E)), d_route_w(static_cast<size_t>(pairs));
    DeviceArray<int32_t> d_ids(static_cast<size_t>(pairs));
    GroupingArrays arrays(n, k, E);
    const int64_t max_tiles = cuda::moe_max_tiles(pairs, E);
    for (int tile_rows : {64, 128, 144}) {
      SCOPED_TRACE(fmt::format("tiles of {} rows", tile_rows));
      const cuda::MoeGrouping g = arrays.grouping(tile_rows);
      cuda::moe_route_group(d_logits.data(), E, n, E, k, d_ids.data(), d_route_w.data(), g, nullptr);
      ASSERT_EQ(d_ids.download(), ids);
      expect_grouping(ids, k, E, arrays, tile_rows);
      if (HasFatalFailure()) return;

      for (const GemmVariant& v : kGemmVariants) {
        // The wgmma kernel also runs SwiGLU in its epilogue (GemmArgs::act).
        for (bool fused : {false, true}) {
          if (v.tile_rows != tile_rows || (fused && !v.wgmma)) continue;
          SCOPED_TRACE(fmt::format("{}{}", v.name, fused ? ", SwiGLU in the epilogue" : ""));
          // gate|up grouped GEMM, SwiGLU, down grouped GEMM, combine.
          DeviceArray<uint16_t> dx(to_bf16(x)), act(static_cast<size_t>(pairs * I));
          DeviceArray<float> gu(static_cast<size_t>(pairs * 2 * I)), down(static_cast<size_t>(pairs * H));
          auto [a, b] = expert_gemms(table_dev.data(), g, max_tiles, H, I, dx.data(), gu.data(), act.data(),
                                     down.data());
          if (fused) {
            a.act = act.data();
            a.ld_act = I;
            v.run(a, nullptr);
          } else {
            v.run(a, nullptr);
            cuda::swiglu(gu.data(), gu.data() + I, 2 * I, pairs, I, act.data(), I, true, nullptr);
          }
          // The down projection's rows in f32, or in bf16 (GemmArgs::y16) as the combine then reads them.
          for (const bool bf16_down : {false, true}) {
            SCOPED_TRACE(bf16_down ? "bf16 down rows" : "f32 down rows");
            uint16_t* const down16 = bf16_down ? reinterpret_cast<uint16_t*>(down.data()) : nullptr;
            if (down16) b.y = nullptr, b.y16 = down16;
            v.run(b, nullptr);
            const auto shared = randn(static_cast<size_t>(n * H), rng);
            const auto shared_logit = randn(static_cast<size_t>(n), rng);
            const auto hidden0 = randn(static_cast<size_t>(n * H), rng);
            DeviceArray<float> dshared(shared), dsl(shared_logit), dhidden(hidden0), dweights(weights);
            cuda::MoeCombine combine{
                dhidden.data(), n, H,          k, dweights.data(), arrays.slot_of.data(), down.data(), H,
                dshared.data(), H, dsl.data(), 1};
            combine.down16 = down16;
            cuda::moe_combine(combine, nullptr);

            // CPU: the same chain, with the activation rounded to bf16 as the GPU feeds it to the GEMM.
            std::vector<float> want(hidden0);
            for (int64_t t = 0; t < n; ++t) {
              const std::vector<float> xt(x.begin() + t * H, x.begin() + (t + 1) * H);
              float* wt = want.data() + t * H;
              for (int64_t h = 0; h < H; ++h)
                wt[h] +=
                    sigmoid(shared_logit[static_cast<size_t>(t)]) * shared[static_cast<size_t>(t * H + h)];
              for (int j = 0; j < k; ++j) {
                const int e = ids[static_cast<size_t>(t * k + j)];
                const auto g_ = cpu_matmul(host[static_cast<size_t>(3 * e)].w, xt, 1);
                const auto u_ = cpu_matmul(host[static_cast<size_t>(3 * e + 1)].w, xt, 1);
                std::vector<float> h_(static_cast<size_t>(I));
                for (int64_t i = 0; i < I; ++i)
                  h_[static_cast<size_t>(i)] =
                      round_to_bf16(silu(g_[static_cast<size_t>(i)]) * u_[static_cast<size_t>(i)]);
                const auto d_ = cpu_matmul(host[static_cast<size_t>(3 * e + 2)].w, h_, 1);
                for (int64_t h = 0; h < H; ++h)
                  wt[h] +=
                      weights[static_cast<size_t>(t * k + j)] *
                      (bf16_down ? round_to_bf16(d_[static_cast<size_t>(h)]) : d_[static_cast<size_t>(h)]);
              }
            }
            const auto combined = dhidden.download();
            EXPECT_LT(rel_err(combined, want), 1e-2);

            // With the next layer's input norm: the same rows, and their RMSNorm in bf16.
            const auto norm_w = randn(static_cast<size_t>(H), rng);
            DeviceArray<float> dhidden_n(hidden0), dnorm_w(norm_w);
            DeviceArray<uint16_t> dnormed(static_cast<size_t>(n * H));
            combine.hidden = dhidden_n.data();
            combine.norm_weight = dnorm_w.data();
            combine.eps = 1e-6f;
            combine.normed = dnormed.data();
            cuda::moe_combine(combine, nullptr);
            EXPECT_EQ(dhidden_n.download(), combined);
            std::vector<float> normed_ref(combined.size());
            for (int64_t t = 0; t < n; ++t)
              rms_norm(combined.data() + t * H, norm_w.data(), 1e-6f, H, normed_ref.data() + t * H);
            EXPECT_LT(rel_err(from_bf16(dnormed.download()), normed_ref), 4e-3) << "combine's norm";
          }
        }
      }
    }
  }
}

// The decode MoE's three fused kernels (norm, router + routing, gate|up + SwiGLU, down + weighted
// combine + residual) against the CPU chain, over expert formats, with f32 and (4-bit) int16
// activations; each twice (the second time as programmatic dependent launches) so the router's block
// counter is seen to reset. Each run is made again with gate|up and down in one launch
// (MoeDecodeArgs::sync): the same bits, and its counter and routing words carried from one call to the
// next.
TEST(Moe, DecodeMatchesCpu) {
  QWICK_REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  for (auto [format, E, k, H, I] : {std::tuple{WeightFormat::kAffine4, 64, 8, int64_t{512}, int64_t{128}},
                                    std::tuple{WeightFormat::kAffine4, 16, 8, int64_t{256}, int64_t{64}},
                                    std::tuple{WeightFormat::kAffine8, 16, 4, int64_t{256}, int64_t{64}},
                                    std::tuple{WeightFormat::kBF16, 8, 2, int64_t{128}, int64_t{192}}}) {
    SCOPED_TRACE(fmt::format("{} E={} k={} H={} I={}", weight_format_name(format), E, k, H, I));
    std::vector<HostMatrix> host;
    std::vector<cuda::UploadedMatrix> dev;
    std::vector<DeviceMatrix> experts, route;
    for (int e = 0; e <= E; ++e)  // entry E: the shared expert
      for (auto [rows, cols] : {std::pair{I, H}, std::pair{I, H}, std::pair{H, I}}) {
        host.push_back(random_matrix(format, rows, cols, 32, rng));
        dev.push_back(cuda::upload_matrix(host.back().w, nullptr));
        experts.push_back(dev.back().m);
      }
    HostMatrix router = random_matrix(WeightFormat::kAffine8, E, H, 64, rng);
    HostMatrix shared_gate = random_matrix(WeightFormat::kAffine8, 1, H, 64, rng);
    auto d_router = cuda::upload_matrix(router.w, nullptr),
         d_sg = cuda::upload_matrix(shared_gate.w, nullptr);
    route = {d_router.m, d_sg.m};
    DeviceArray<DeviceMatrix> d_experts(experts), d_route(route);
    DeviceArray<float> logits(static_cast<size_t>(E + 1)), weights(static_cast<size_t>(k)),
        act(static_cast<size_t>((k + 1) * I));
    DeviceArray<int32_t> ids(static_cast<size_t>(k)), counter(std::vector<int32_t>{0});
    DeviceArray<unsigned long long> sync(std::vector<unsigned long long>(cuda::kMoeSyncWords, 0));
    unsigned long long one_pass_calls = 0;
    for (int round = 0; round < 4; ++round) {
      const bool i16 = round >= 2 && format == WeightFormat::kAffine4;  // rounds 2, 3 (4-bit experts only)
      if (round >= 2 && !i16) break;
      SCOPED_TRACE(round);
      const auto x = randn(static_cast<size_t>(H), rng, 2.0f), w = randn(static_cast<size_t>(H), rng);
      DeviceArray<float> dx(x), dw(w);
      cuda::MoeDecodeArgs a;
      a.x = dx.data();
      a.norm_weight = dw.data();
      a.eps = 1e-6f;
      a.H = H;
      a.I = I;
      a.E = E;
      a.k = k;
      a.route_table = d_route.data();
      a.route_format = WeightFormat::kAffine8;
      a.experts = d_experts.data();
      a.expert_format = format;
      a.logits = logits.data();
      a.ids = ids.data();
      a.weights = weights.data();
      a.counter = counter.data();
      a.act = act.data();
      a.overlap = round % 2 == 1;
      a.i16 = i16;
      cuda::moe_decode(a, nullptr);

      std::vector<float> normed(static_cast<size_t>(H));
      rms_norm(x.data(), w.data(), 1e-6f, H, normed.data());
      const auto rl = cpu_matmul(router.w, normed, 1);
      const float sg = cpu_matmul(shared_gate.w, normed, 1)[0];
      std::vector<int32_t> rid(static_cast<size_t>(k));
      std::vector<float> rw(static_cast<size_t>(k));
      route_token(rl.data(), E, k, rid.data(), rw.data());
      std::vector<float> want(x);
      auto add_expert = [&](int e, float coef) {
        const auto g_ = cpu_matmul(host[static_cast<size_t>(3 * e)].w, normed, 1);
        const auto u_ = cpu_matmul(host[static_cast<size_t>(3 * e + 1)].w, normed, 1);
        std::vector<float> h_(static_cast<size_t>(I));
        for (int64_t i = 0; i < I; ++i)
          h_[static_cast<size_t>(i)] = silu(g_[static_cast<size_t>(i)]) * u_[static_cast<size_t>(i)];
        const auto d_ = cpu_matmul(host[static_cast<size_t>(3 * e + 2)].w, h_, 1);
        for (int64_t h = 0; h < H; ++h) want[static_cast<size_t>(h)] += coef * d_[static_cast<size_t>(h)];
      };
      for (int j = 0; j < k; ++j) add_expert(rid[static_cast<size_t>(j)], rw[static_cast<size_t>(j)]);
      add_expert(E, sigmoid(sg));
      ASSERT_EQ(ids.download(), rid);
      EXPECT_EQ(counter.download()[0], 0);
      // The block's contribution (x_out - x) against the CPU's.
      const auto got = dx.download();
      std::vector<float> d_got(x.size()), d_want(x.size());
      for (size_t i = 0; i < x.size(); ++i) d_got[i] = got[i] - x[i], d_want[i] = want[i] - x[i];
      // int16: two quantized products in a row, each value within 1/65534 of its chunk's largest.
      const double bound = i16 ? 1e-3 : 1e-4;
      if (i16) std::printf("moe decode, int16 activations: rel_err %.3g\n", rel_err(d_got, d_want));
      EXPECT_LT(rel_err(d_got, d_want), bound);
      DeviceArray<float> dx_one_pass(x);
      a.x = dx_one_pass.data();
      a.sync = sync.data();
      for (int call = 0; call < 2; ++call) {  // the second from the first's output, so the counters move on
        ids.poison();  // (the one-pass launch's first block writes the routing it took)
        cuda::moe_decode(a, nullptr);
        ++one_pass_calls;
        if (call != 0) continue;
        EXPECT_EQ(ids.download(), rid);
        // The same products in the same order as the two launches; the compiler may still fuse a
        // multiply-add differently in the two kernels (2.5e-5 after 290 decode steps of small/mlx4).
        const auto one = dx_one_pass.download();
        std::vector<float> d_one(x.size());
        for (size_t i = 0; i < x.size(); ++i) d_one[i] = one[i] - x[i];
        // (int16: such a last bit may move a code)
        EXPECT_LT(rel_err(d_one, d_got), i16 ? 1e-4 : 1e-5);
        EXPECT_LT(rel_err(d_one, d_want), bound);
      }
      // Every one-pass block counted itself once a call (the one-pass launch ran), and so did every
      // block of the router's launch that writes logits.
      const auto counts = sync.download();
      EXPECT_GT(counts[0], 0u);
      EXPECT_EQ(counts[0] % one_pass_calls, 0u);
      EXPECT_GT(counts[1], 0u);
      EXPECT_EQ(counts[1] % one_pass_calls, 0u);
    }
  }
}

}  // namespace
}  // namespace qwick
