// Device memory for the CUDA backend: one cudaMalloc per region (weights, sequence state, scratch),
// carved into typed arrays by a bump allocator, with the bytes held counted for `memory()`.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace qwick::cuda {

// Bytes this process holds through DeviceBuffer now, and the most it ever held.
int64_t device_bytes_held();
int64_t device_bytes_peak();

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Lays arrays out in a region: first a sizing pass with a null base (take() only counts), then the
// same calls again over the allocated buffer.
class Carver {
 public:
  explicit Carver(uint8_t* base) : base_(base) {}
  template <typename T>
  T* take(size_t count) {
    used_ = (used_ + 255) / 256 * 256;  // every array 256-byte aligned
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += count * sizeof(T);
    return p;
  }
  size_t used() const { return used_; }

 private:
  uint8_t* base_;
  size_t used_ = 0;
};

}  // namespace qwick::cuda
