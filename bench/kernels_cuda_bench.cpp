// CUDA kernel speed at the real model's shapes (needs a GPU): the prefill GEMMs, the chunked DeltaNet
// scan and the flash prefill attention. Prints a table per kernel; checks nothing (the kernels' tests
// are tests/cuda/*_cuda_test.cpp).
//   kernels_cuda_bench
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
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

// Prefill GEMM speed at the real model's shapes for a 4096-row chunk, every kernel (prints; asserts
// nothing): the plain projections, and the routed experts' grouped gate|up and down over 256 experts
// with 8 per row (16 distinct expert matrices behind the 256 table entries keep the setup short; the
// weights are a small part of the traffic either way).
void gemm_timing() {
  std::mt19937_64 rng(test_seed());
  const int64_t n = 4096, H = 2048, I = 512;
  const int E = 256, k = 8, kDistinct = 16;
  const auto x = to_bf16(randn(static_cast<size_t>(n * 8192), rng));
  DeviceArray<uint16_t> dx(x);
  DeviceArray<float> dy(static_cast<size_t>(n * k * H));
  fmt::print("{:<32} {:>10} {:>10}   (us per call, TFLOP/s)\n", "shape", "simple", "wgmma");
  auto report = [&](const std::string& what, double flop, cuda::GemmArgs a) {
    fmt::print("{:<32}", what);
    for (const bool wgmma : {false, true}) {
      // The simple kernel takes tile lists of 64 rows.
      if (!wgmma && a.tiles && a.tile_rows > 64) {
        fmt::print(" {:>10}", "-");
        continue;
      }
      const double us = median_us([&] { wgmma ? cuda::gemm(a, nullptr) : cuda::gemm_simple(a, nullptr); });
      fmt::print(" {:>6.0f} {:>3.0f}", us, flop / us * 1e-6);
    }
    fmt::print("\n");
  };
  for (auto [rows, cols, what] : {std::tuple{int64_t{12352}, H, "DeltaNet qkv|z|b|a 12352x2048"},
                                  std::tuple{int64_t{8192}, H, "DeltaNet qkv 8192x2048"},
                                  std::tuple{int64_t{9216}, H, "attention q|k|v 9216x2048"},
                                  std::tuple{H, int64_t{4096}, "DeltaNet out 2048x4096"},
                                  std::tuple{int64_t{512}, H, "shared gate 512x2048"}}) {
    HostMatrix h = random_matrix(WeightFormat::kAffine4, rows, cols, 64, rng);
    auto up = cuda::upload_matrix(h.w, nullptr);
    cuda::GemmArgs a = cuda::gemm_args(up.m, dx.data(), cols, n, dy.data(), rows);
    report(what, 2.0 * n * rows * cols, a);
    a.tile_rows = 128;  // the wgmma kernel's 256-slot tiles (its default here) against 128
    report("  128-slot tiles", 2.0 * n * rows * cols, a);
    // Its bf16 copy through gemm_tma (the prefill's dense matrices, add_prefill_copies).
    DeviceArray<uint16_t> copy(static_cast<size_t>(rows * cols));
    cuda::decode_bf16(up.m, copy.data(), nullptr);
    const DeviceMatrix m16 = bf16_rows(copy, rows, cols);
    const cuda::GemmArgs a16 = cuda::gemm_args(m16, dx.data(), cols, n, dy.data(), rows);
    const double us = median_us([&] { cuda::gemm_tma(a16, nullptr); });
    fmt::print("{:<32} {:>10} {:>6.0f} {:>3.0f}\n", "  bf16 copy, gemm_tma", "", us,
               2.0 * n * rows * cols / us * 1e-6);
  }
  {  // the router's bf16 rows with the shared gate's (cuda_weights.h: route16), 64-slot tiles by default
    const int64_t rows = E + 1, ld = E + 4;
    HostMatrix h = random_matrix(WeightFormat::kBF16, rows, H, 0, rng);
    auto up = cuda::upload_matrix(h.w, nullptr);
    cuda::GemmArgs a = cuda::gemm_args(up.m, dx.data(), H, n, dy.data(), ld);
    report("router 257x2048 bf16", 2.0 * n * rows * H, a);
    a.tile_rows = 128;
    report("  128-slot tiles", 2.0 * n * rows * H, a);
  }

  std::vector<HostMatrix> host;
  std::vector<cuda::UploadedMatrix> dev;
  for (int e = 0; e < kDistinct; ++e)
    for (auto [rows, cols] : {std::pair{I, H}, std::pair{I, H}, std::pair{H, I}}) {
      host.push_back(random_matrix(WeightFormat::kAffine4, rows, cols, 64, rng));
      dev.push_back(cuda::upload_matrix(host.back().w, nullptr));
    }
  std::vector<DeviceMatrix> table;
  for (int e = 0; e < E; ++e)
    for (int j = 0; j < 3; ++j) table.push_back(dev[static_cast<size_t>(3 * (e % kDistinct) + j)].m);
  cuda::DeviceBuffer table_dev(table.size() * sizeof(DeviceMatrix));
  cuda::check(
      cudaMemcpy(table_dev.data(), table.data(), table.size() * sizeof(DeviceMatrix), cudaMemcpyHostToDevice),
      "");
  const int64_t pairs = n * k;
  std::vector<int32_t> ids(static_cast<size_t>(pairs));
  std::vector<int32_t> pick(E);
  std::iota(pick.begin(), pick.end(), 0);
  for (int64_t t = 0; t < n; ++t) {
    std::shuffle(pick.begin(), pick.end(), rng);
    std::copy(pick.begin(), pick.begin() + k, ids.begin() + t * k);
  }
  DeviceArray<float> d_logits(logits_routing_to(ids, n, k, E)), d_route_w(static_cast<size_t>(pairs));
  DeviceArray<int32_t> d_ids(static_cast<size_t>(pairs));
  GroupingArrays arrays(n, k, E);
  const int64_t max_tiles = cuda::moe_max_tiles(pairs, E);
  DeviceArray<uint16_t> act(to_bf16(randn(static_cast<size_t>(pairs * I), rng)));
  for (int tile_rows : {64, 128, 144}) {
    const cuda::MoeGrouping g = arrays.grouping(tile_rows);
    cuda::moe_route_group(d_logits.data(), E, n, E, k, d_ids.data(), d_route_w.data(), g, nullptr);
    const auto [gate_up, down] =
        expert_gemms(table_dev.data(), g, max_tiles, H, I, dx.data(), dy.data(), act.data(), dy.data());
    report(fmt::format("experts gate|up, {}-row tiles", tile_rows), 2.0 * pairs * 2 * I * H, gate_up);
    cuda::GemmArgs fused = gate_up;  // SwiGLU in the epilogue: the wgmma kernel only
    fused.act = act.data();
    fused.ld_act = I;
    const double us = median_us([&] { cuda::gemm(fused, nullptr); });
    fmt::print("{:<32} {:>10} {:>6.0f} {:>3.0f}\n", fmt::format("  + SwiGLU epilogue, {}-row", tile_rows),
               "-", us, 2.0 * pairs * 2 * I * H / us * 1e-6);
    report(fmt::format("experts down, {}-row tiles", tile_rows), 2.0 * pairs * H * I, down);
  }
}

// Not a check: the token scan against the chunked form at the real model's shape, device time per
// call (median of 7) for the prompt-chunk lengths the backend sees; chooses kChunkedScanMinRows.
void chunked_scan_timing() {
  std::mt19937_64 rng(test_seed());
  const int Hk = 16, Hv = 32, Dk = 128, Dv = 128;
  const int64_t key_dim = int64_t{Hk} * Dk, C = 2 * key_dim + int64_t{Hv} * Dv, Vt = int64_t{Hv} * Dv;
  fmt::print("{:>6} {:>12} {:>14} {:>12}   (us per call, one layer)\n", "rows", "token scan",
             "chunked 3xtf32", "chunked tf32");
  for (int64_t n : {16, 32, 64, 128, 256, 512, 1024, 4096}) {
    const ScanInputs in = random_scan_inputs(n, Hk, Hv, Dk, Dv, rng);
    DeviceArray<float> d_qkv(in.qkv), d_beta(in.beta), d_decay(in.decay), d_o(static_cast<size_t>(n * Vt)),
        d_rec(randn(static_cast<size_t>(Vt * Dk), rng, 0.1f)),
        d_work(static_cast<size_t>(cuda::deltanet_chunked_workspace_floats(n, Hv)));
    const cuda::DeltaNetScanArgs args{d_qkv.data(), C,  d_beta.data(), d_decay.data(), n, Hk, Hv,
                                      Dk,           Dv, d_rec.data(),  d_o.data(),     Vt};
    double us[3];
    for (int variant = 0; variant < 3; ++variant)
      us[variant] = median_us([&] {
        if (variant == 0)
          cuda::deltanet_scan(args, nullptr);
        else
          cuda::deltanet_chunked_scan(args, d_work.data(), nullptr, variant == 1);
      });
    fmt::print("{:>6} {:>12.1f} {:>14.1f} {:>12.1f}\n", n, us[0], us[1], us[2]);
  }
}

// Prefill attention speed at the real shape (16 query heads, 2 kv heads of 256) for a 4096-row chunk
// at three context lengths (prints; asserts nothing).
void attention_prefill_timing() {
  std::mt19937_64 rng(test_seed());
  const AttnShape s{16, 2, 256};
  const int64_t n = 4096, cap = 131072;
  // Values do not change the speed: one random block repeated over the cache.
  const auto block = to_bf16(randn(size_t{1} << 20, rng));
  auto tiled = [&](int64_t size) {
    std::vector<uint16_t> v(static_cast<size_t>(size));
    for (size_t i = 0; i < v.size(); ++i) v[i] = block[i & (block.size() - 1)];
    return v;
  };
  const auto cache = tiled(s.nkv * cap * s.hd);
  DeviceArray<uint16_t> kc(cache), vc(cache), dq(tiled(n * s.nq * s.hd)),
      out(static_cast<size_t>(n * s.nq * s.hd));
  fmt::print("{:>8} {:>16}   (us per call, TFLOP/s; 4096 rows)\n", "context", "wgmma");
  for (const int64_t pos0 : {int64_t{0}, int64_t{28672}, cap - n}) {
    const double flop =
        4.0 * s.nq * s.hd * (static_cast<double>(n) * pos0 + 0.5 * static_cast<double>(n) * (n + 1));
    fmt::print("{:>8}", pos0 + n);
    const cuda::AttentionPrefillArgs args{dq.data(), kc.data(), vc.data(), cap,     n, pos0, s.nq,
                                          s.nkv,     s.hd,      0.0625f,   nullptr, 0, 0,    out.data()};
    const double us = median_us([&] { cuda::attention_prefill(args, nullptr); }, 3);
    fmt::print(" {:>9.0f} {:>6.1f}\n", us, flop / us * 1e-6);
  }
}

}  // namespace
}  // namespace qwick

int main() {
  if (!qwick::test::have_gpu()) {
    std::fprintf(stderr, "kernels_cuda_bench: no CUDA GPU on this machine\n");
    return 1;
  }
  qwick::gemm_timing();
  qwick::chunked_scan_timing();
  qwick::attention_prefill_timing();
  return 0;
}
