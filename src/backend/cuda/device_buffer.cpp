#include "backend/cuda/device_buffer.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "kernels/cuda/cuda_launch.h"

namespace qwick::cuda {
namespace {

std::atomic<int64_t> g_held{0}, g_peak{0};

}  // namespace

int64_t device_bytes_held() {
  return g_held.load();
}
int64_t device_bytes_peak() {
  return g_peak.load();
}

DeviceBuffer::DeviceBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  check(cudaMalloc(&data_, bytes), "cudaMalloc");
  const int64_t now = g_held += static_cast<int64_t>(bytes);
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ == nullptr) return;
  cudaFree(data_);
  g_held -= static_cast<int64_t>(size_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
  return *this;
}

}  // namespace qwick::cuda
