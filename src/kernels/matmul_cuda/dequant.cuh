// Decoding one 16-byte chunk of a weight row on the GPU: 32 codes of 4 bits, 16 of 8 bits or 8 bf16
// values (the packing is drawn in model/weight_matrix.h). Every chunk lies inside one quantization
// group because group sizes are multiples of 32 (checked at upload).
#pragma once

#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/matmul_cuda/matmul_cuda.h"

namespace qwick::cuda {

// Host side: runs f(std::integral_constant<WeightFormat, F>{}) for a weight format the GPU kernels
// take (affine 4/8-bit, bf16), so a launcher picks its kernel instance once; any other format fails
// with `error`.
template <class Fn>
void with_device_format(WeightFormat format, const char* error, Fn&& f) {
  switch (format) {
    case WeightFormat::kAffine4:
      return f(std::integral_constant<WeightFormat, WeightFormat::kAffine4>{});
    case WeightFormat::kAffine8:
      return f(std::integral_constant<WeightFormat, WeightFormat::kAffine8>{});
    case WeightFormat::kBF16:
      return f(std::integral_constant<WeightFormat, WeightFormat::kBF16>{});
    default:
      check(cudaErrorInvalidValue, error);
  }
}

template <WeightFormat F>
struct ChunkTraits;
template <>
struct ChunkTraits<WeightFormat::kAffine4> {
  static constexpr int kElems = 32;
};
template <>
struct ChunkTraits<WeightFormat::kAffine8> {
  static constexpr int kElems = 16;
};
template <>
struct ChunkTraits<WeightFormat::kBF16> {
  static constexpr int kElems = 8;
};

// Byte offset of column `col` (a chunk start) within a packed row.
template <WeightFormat F>
__device__ __forceinline__ int64_t col_byte(int64_t col) {
  if constexpr (F == WeightFormat::kAffine4) return col / 2;
  if constexpr (F == WeightFormat::kAffine8) return col;
  return col * 2;
}

// The raw code (affine) or value bits (bf16) of element i of a chunk held in four 32-bit words.
template <WeightFormat F>
__device__ __forceinline__ uint32_t chunk_code(const uint4& c, int i) {
  const uint32_t w[4] = {c.x, c.y, c.z, c.w};
  if constexpr (F == WeightFormat::kAffine4) return (w[i >> 3] >> (4 * (i & 7))) & 0xfu;
  if constexpr (F == WeightFormat::kAffine8) return (w[i >> 2] >> (8 * (i & 3))) & 0xffu;
  return (w[i >> 1] >> (16 * (i & 1))) & 0xffffu;
}

// Element i of a chunk as f32, given its group's scale and bias (ignored for bf16).
template <WeightFormat F>
__device__ __forceinline__ float chunk_value(const uint4& c, int i, float scale, float bias) {
  const uint32_t code = chunk_code<F>(c, i);
  if constexpr (F == WeightFormat::kBF16) return __uint_as_float(code << 16);
  return static_cast<float>(code) * scale + bias;
}

// Columns `col` / group size and groups per row: shifts for the power-of-two groups of real
// checkpoints; other sizes divide (64-bit divisions, ~25 instructions even on their 32-bit path).
// bf16 matrices have no groups (0).
__device__ __forceinline__ int64_t group_of(const DeviceMatrix& m, int64_t col) {
  const int g = m.group_size;
  if (g <= 0) return 0;
  return (g & (g - 1)) == 0 ? col >> (__ffs(g) - 1) : col / g;
}
__device__ __forceinline__ int64_t row_groups(const DeviceMatrix& m) {
  return group_of(m, m.cols);
}

// Scale and bias of the group holding column `col` of row `row`.
__device__ __forceinline__ void group_params(const DeviceMatrix& m, int64_t row, int64_t col, float* scale,
                                             float* bias) {
  const int64_t g = row * row_groups(m) + group_of(m, col);
  *scale = bf16_to_f32(m.scales[g]);
  *bias = bf16_to_f32(m.biases[g]);
}

}  // namespace qwick::cuda
