// One weight matrix, kept in its file format: the bytes are the memory-mapped checkpoint's.
//
// W is [rows, cols] and is applied as y = W·x (PyTorch Linear: rows = outputs, cols = inputs).
//
// Dense (F32 / F16 / BF16): row r is `cols` elements starting at data + r * row_stride.
//
// Affine (MLX 4-bit / 8-bit): w[r, c] = scale[r, g] * q[r, c] + bias[r, g], g = c / group_size.
//   Row r holds cols*bits/8 packed bytes at data + r * row_stride, little-endian, lowest bits first:
//
//     4-bit byte j of a row:  [ q(2j+1) | q(2j) ]      (high nibble | low nibble)
//     8-bit byte j of a row:  q(j)
//
//   scales and biases are BF16, cols / group_size of them per row, at scales/biases + r * group_stride.
//   Scales may be negative (MLX makes the group's larger-magnitude extreme the bias).
//
// This header is plain data on purpose: the SIMD kernels include it (see cmake/simd.cmake).
#pragma once

#include <cstddef>
#include <cstdint>

namespace qwick {

enum class WeightFormat : uint8_t { kF32, kF16, kBF16, kAffine4, kAffine8 };

struct WeightMatrix {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  size_t row_stride = 0;  // bytes from one row's data to the next
  const uint8_t* scales = nullptr;
  const uint8_t* biases = nullptr;
  size_t group_stride = 0;  // bytes from one row's scales (and biases) to the next
  int group_size = 0;

  bool is_affine() const { return format == WeightFormat::kAffine4 || format == WeightFormat::kAffine8; }
  int bits() const {
    switch (format) {
      case WeightFormat::kF32:
        return 32;
      case WeightFormat::kF16:
      case WeightFormat::kBF16:
        return 16;
      case WeightFormat::kAffine4:
        return 4;
      case WeightFormat::kAffine8:
        return 8;
    }
    return 0;
  }
  // Rows [first, first + count) as a matrix of their own (same bytes).
  WeightMatrix row_slice(int64_t first, int64_t count) const {
    WeightMatrix m = *this;
    m.rows = count;
    m.data = data + static_cast<size_t>(first) * row_stride;
    if (is_affine()) {
      m.scales = scales + static_cast<size_t>(first) * group_stride;
      m.biases = biases + static_cast<size_t>(first) * group_stride;
    }
    return m;
  }
  // Bytes this matrix occupies (packed data plus scales and biases).
  size_t storage_bytes() const {
    const size_t packed =
        static_cast<size_t>(rows) * static_cast<size_t>(cols) * static_cast<size_t>(bits()) / 8;
    return is_affine() ? packed + 2 * static_cast<size_t>(rows) * static_cast<size_t>(cols / group_size) * 2
                       : packed;
  }
};

const char* weight_format_name(WeightFormat f);

}  // namespace qwick
