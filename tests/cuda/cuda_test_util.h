// Helpers for the GPU tests: skipping without a GPU, device arrays that start poisoned (NaN bytes),
// random weight matrices in every file format, and error measures.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "kernels/cuda/cuda_launch.h"
#include "model/weight_matrix.h"

namespace qwick::test {

bool have_gpu();
// Use at the top of every GPU test.
#define QWICK_REQUIRE_GPU() \
  if (!::qwick::test::have_gpu()) GTEST_SKIP() << "no CUDA GPU on this machine: GPU test not run"

// The seed of the tests' random inputs: fixed, or QWICK_TEST_SEED's value when set (another draw of
// inputs). A failed test prints it, so QWICK_TEST_SEED replays the failure.
uint64_t test_seed();

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n), buf_(n * sizeof(T)) { poison(); }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  T* data() const { return reinterpret_cast<T*>(buf_.data()); }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    cuda::check(cudaMemcpy(data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    cuda::check(cudaDeviceSynchronize(), "kernel");
    cuda::check(cudaMemcpy(host.data(), data(), n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }
  void poison() { cuda::check(cudaMemset(data(), 0xff, n_ * sizeof(T)), "poison"); }  // NaN for f32 and bf16

 private:
  size_t n_;
  cuda::DeviceBuffer buf_;
};

// A random matrix in `format` that owns its bytes; values of unit scale divided by sqrt(cols). f32
// values are bf16-representable (the GPU converts f32 weights to bf16 at upload).
struct HostMatrix {
  std::vector<uint8_t> data, scales, biases;
  WeightMatrix w;
};
HostMatrix random_matrix(WeightFormat format, int64_t rows, int64_t cols, int group_size,
                         std::mt19937_64& rng);

std::vector<float> randn(size_t n, std::mt19937_64& rng, float scale = 1.0f);
std::vector<float> round_bf16(std::vector<float> v);
std::vector<uint16_t> to_bf16(const std::vector<float>& v);
std::vector<float> from_bf16(const std::vector<uint16_t>& v);

// ‖a − ref‖ / ‖ref‖; fails (returns +inf) when a holds a NaN or infinity.
double rel_err(const std::vector<float>& a, const std::vector<float>& ref);

}  // namespace qwick::test
