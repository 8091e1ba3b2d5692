// The decode matrix-vector kernels at Qwen3.6-35B-A3B's shapes, alone: time per call and GB/s over
// the weight bytes each call reads. Every problem has enough copies of its weights (one per layer,
// at least 200 MB in all) that no call finds them in L2, as in a real decode step. Values are random
// (speed does not depend on them). Prints a table; needs a CUDA GPU.
//   gemv_cuda_bench [reps]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "core/error.h"
#include "graph_timing.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/matmul_cuda/matmul_cuda.h"
#include "kernels/moe/moe_cuda.h"

namespace qwick::cuda {
namespace {

std::mt19937_64 rng(7);

// Device buffer of random bytes (weights), copied from a 16 MB random pool at a random offset.
DeviceBuffer random_bytes(size_t n) {
  static const std::vector<uint8_t> pool = [] {
    std::vector<uint8_t> p(size_t{16} << 20);
    for (size_t i = 0; i < p.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(p.data() + i, &v, 8);
    }
    return p;
  }();
  DeviceBuffer d(n);
  for (size_t done = 0; done < n;) {
    const size_t off = rng() % (pool.size() / 2), len = std::min(n - done, pool.size() - off);
    check(cudaMemcpy(d.data() + done, pool.data() + off, len, cudaMemcpyHostToDevice), "upload");
    done += len;
  }
  return d;
}
DeviceBuffer random_floats(size_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> h(n);
  for (auto& v : h) v = dist(rng);
  DeviceBuffer d(n * sizeof(float));
  check(cudaMemcpy(d.data(), h.data(), n * sizeof(float), cudaMemcpyHostToDevice), "upload");
  return d;
}
DeviceBuffer constant_bf16(size_t n, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  std::vector<uint16_t> h(n, static_cast<uint16_t>(bits >> 16));
  DeviceBuffer d(n * 2);
  check(cudaMemcpy(d.data(), h.data(), n * 2, cudaMemcpyHostToDevice), "upload");
  return d;
}

struct Matrix {
  DeviceBuffer data, scales, biases;
  DeviceMatrix m;
  int64_t bytes() const {
    return m.rows * m.row_bytes + (m.group_size ? 2 * 2 * m.rows * (m.cols / m.group_size) : 0);
  }
};
Matrix affine(int64_t rows, int64_t cols, int bits) {
  Matrix w;
  w.m.format = bits == 4 ? WeightFormat::kAffine4 : WeightFormat::kAffine8;
  w.m.group_size = 64;
  w.m.rows = rows;
  w.m.cols = cols;
  w.m.row_bytes = cols * bits / 8;
  const size_t groups = static_cast<size_t>(rows * cols / 64);
  w.data = random_bytes(static_cast<size_t>(rows * w.m.row_bytes));
  w.scales = constant_bf16(groups, 0.01f);
  w.biases = constant_bf16(groups, -0.075f);
  w.m.data = w.data.data();
  w.m.scales = reinterpret_cast<const uint16_t*>(w.scales.data());
  w.m.biases = reinterpret_cast<const uint16_t*>(w.biases.data());
  return w;
}

template <typename T>
DeviceBuffer upload_vector(const std::vector<T>& v) {
  DeviceBuffer d(v.size() * sizeof(T));
  check(cudaMemcpy(d.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return d;
}

// Median over `reps` of the time per call of `copies` calls in a row (call i on copy i), repeated to at
// least 64 calls in one graph, as the decode step runs them.
double time_per_call_us(int reps, int copies, const std::function<void(int, cudaStream_t)>& call) {
  const int rounds = (64 + copies - 1) / copies;
  return graph_us_per_call(reps, rounds * copies, [&](cudaStream_t stream) {
    for (int r = 0; r < rounds; ++r)
      for (int i = 0; i < copies; ++i) call(i, stream);
  });
}

void row(const char* name, double us, double bytes) {
  std::printf("| %-44s | %9.2f | %8.1f | %8.0f |\n", name, us, bytes / 1e6, bytes / (us * 1e-6) / 1e9);
}

int run(int reps) {
  const int64_t H = 2048;
  DeviceBuffer x = random_floats(8192, 1.0f), z = random_floats(8192, 1.0f), norm = random_floats(8192, 1.0f);
  DeviceBuffer y = random_floats(300000, 1.0f);
  const float* xp = reinterpret_cast<const float*>(x.data());
  float* yp = reinterpret_cast<float*>(y.data());
  std::printf("| %-44s | %9s | %8s | %8s |\n| --- | ---: | ---: | ---: |\n", "kernel (shape)", "us/call",
              "MB", "GB/s");
  struct Variant {
    const char* name;
    bool overlap, i16;
  };
  for (auto [title, overlap, i16] : {Variant{"plain launch, f32 activations", false, false},
                                     Variant{"programmatic launch, f32 activations", true, false},
                                     Variant{"programmatic launch, int16 activations", true, true}}) {
    std::printf("| %-44s |           |          |          |\n", title);
    {  // lm_head with the final norm fused
      Matrix w = affine(248320, H, 4);
      GemvArgs a;
      a.single = w.m;
      a.format = w.m.format;
      a.max_rows = w.m.rows;
      a.max_cols = H;
      a.x = xp;
      a.y = yp;
      a.norm_weight = reinterpret_cast<const float*>(norm.data());
      a.eps = 1e-6f;
      a.overlap = overlap;
      a.i16 = i16;
      row("lm_head 248320x2048 q4, RMSNorm",
          time_per_call_us(reps, 1, [&](int, cudaStream_t st) { gemv(a, st); }),
          static_cast<double>(w.bytes()));
    }
    // The input stacks as the decode step runs them: DeltaNet qkv | b | a (its z projection rides in
    // the decode step's launch) and attention q+gate | k | v, 8 layers' worth each.
    struct Stack {
      const char* name;
      std::vector<int64_t> rows;
    };
    for (const Stack& stack : {Stack{"DeltaNet in_proj stack 8256x2048 q4, RMSNorm", {8192, 32, 32}},
                               Stack{"attention q|k|v stack 9216x2048 q4, RMSNorm", {8192, 512, 512}}}) {
      const int copies = 8;
      std::vector<std::vector<Matrix>> layers;
      std::vector<DeviceBuffer> tables;
      double bytes = 0;
      for (int c = 0; c < copies; ++c) {
        layers.push_back({});
        for (int64_t rows : stack.rows) layers.back().push_back(affine(rows, H, 4));
        std::vector<DeviceMatrix> t;
        for (auto& m : layers.back()) t.push_back(m.m);
        tables.push_back(upload_vector(t));
      }
      for (auto& m : layers[0]) bytes += static_cast<double>(m.bytes());
      GemvArgs a;
      a.problems = static_cast<int>(stack.rows.size());
      a.format = WeightFormat::kAffine4;
      a.max_rows = *std::max_element(stack.rows.begin(), stack.rows.end());
      a.max_cols = H;
      for (size_t p = 0; p < stack.rows.size(); ++p) a.stack_rows[p] = stack.rows[p];
      a.x = xp;
      a.y = yp;
      a.y_stride = a.max_rows;
      a.norm_weight = reinterpret_cast<const float*>(norm.data());
      a.eps = 1e-6f;
      a.overlap = overlap;
      a.i16 = i16;
      row(stack.name,
          time_per_call_us(reps, copies,
                           [&](int c, cudaStream_t st) {
                             GemvArgs b = a;
                             b.table =
                                 reinterpret_cast<const DeviceMatrix*>(tables[static_cast<size_t>(c)].data());
                             gemv(b, st);
                           }),
          bytes);
    }
    {  // DeltaNet out_proj with the gated norm fused, accumulating into the residual
      const int copies = 16;
      std::vector<Matrix> ws;
      for (int c = 0; c < copies; ++c) ws.push_back(affine(H, 4096, 4));
      row("DeltaNet out_proj 2048x4096 q4, gated norm",
          time_per_call_us(reps, copies,
                           [&](int c, cudaStream_t st) {
                             GemvArgs a;
                             a.single = ws[static_cast<size_t>(c)].m;
                             a.format = WeightFormat::kAffine4;
                             a.max_rows = H;
                             a.max_cols = 4096;
                             a.x = xp;
                             a.gate_z = reinterpret_cast<const float*>(z.data());
                             a.head_dim = 128;
                             a.norm_weight = reinterpret_cast<const float*>(norm.data());
                             a.eps = 1e-6f;
                             a.y = yp;
                             a.accumulate = true;
                             a.overlap = overlap;
                             a.i16 = i16;
                             gemv(a, st);
                           }),
          static_cast<double>(ws[0].bytes()));
    }
    {  // the decode MoE: router (8-bit) + 8 of 256 experts + the shared expert; 16 different inputs
       // pick different experts, so the 9 of a call are seldom in L2
      const int copies = 1, inputs = 16, E = 256, k = 8;
      const int64_t I = 512;
      std::vector<std::vector<Matrix>> experts, routes;
      std::vector<DeviceBuffer> expert_tables, route_tables;
      for (int c = 0; c < copies; ++c) {
        experts.push_back({});
        std::vector<DeviceMatrix> t;
        for (int e = 0; e <= E; ++e)
          for (auto [rows, cols] : {std::pair{I, H}, std::pair{I, H}, std::pair{H, I}}) {
            experts.back().push_back(affine(rows, cols, 4));
            t.push_back(experts.back().back().m);
          }
        expert_tables.push_back(upload_vector(t));
        routes.push_back({});
        routes.back().push_back(affine(E, H, 8));
        routes.back().push_back(affine(1, H, 8));
        route_tables.push_back(
            upload_vector(std::vector<DeviceMatrix>{routes.back()[0].m, routes.back()[1].m}));
      }
      const double bytes = static_cast<double>(routes[0][0].bytes() + routes[0][1].bytes() +
                                               (k + 1) * 3 * experts[0][0].bytes());
      DeviceBuffer logits(sizeof(float) * (E + 1)), ids(sizeof(int32_t) * k), weights(sizeof(float) * k),
          act(sizeof(float) * (k + 1) * I), counter(sizeof(int32_t));
      check(cudaMemset(counter.data(), 0, sizeof(int32_t)), "counter");
      DeviceBuffer residual = random_floats(static_cast<size_t>(inputs * H), 1.0f);
      row("MoE: router + 8 experts + shared, 3 kernels",
          time_per_call_us(reps, inputs,
                           [&](int i, cudaStream_t st) {
                             const int c = 0;
                             MoeDecodeArgs a;
                             a.x = reinterpret_cast<float*>(residual.data()) + i * H;
                             a.norm_weight = reinterpret_cast<const float*>(norm.data());
                             a.eps = 1e-6f;
                             a.H = H;
                             a.I = I;
                             a.E = E;
                             a.k = k;
                             a.route_table = reinterpret_cast<const DeviceMatrix*>(
                                 route_tables[static_cast<size_t>(c)].data());
                             a.route_format = WeightFormat::kAffine8;
                             a.experts = reinterpret_cast<const DeviceMatrix*>(
                                 expert_tables[static_cast<size_t>(c)].data());
                             a.expert_format = WeightFormat::kAffine4;
                             a.logits = reinterpret_cast<float*>(logits.data());
                             a.ids = reinterpret_cast<int32_t*>(ids.data());
                             a.weights = reinterpret_cast<float*>(weights.data());
                             a.counter = reinterpret_cast<int32_t*>(counter.data());
                             a.act = reinterpret_cast<float*>(act.data());
                             a.i16 = i16;
                             a.overlap = overlap;
                             moe_decode(a, st);
                           }),
          bytes);
    }
  }
  check(cudaDeviceSynchronize(), "bench");
  return 0;
}

}  // namespace
}  // namespace qwick::cuda

int main(int argc, char** argv) {
  try {
    return qwick::cuda::run(argc > 1 ? std::atoi(argv[1]) : 20);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemv_cuda_bench: %s\n", e.what());
    return 1;
  }
}
