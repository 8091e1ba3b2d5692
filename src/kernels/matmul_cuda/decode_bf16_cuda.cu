// A weight matrix decoded to bf16 rows on the GPU (matmul_cuda.h: decode_bf16), with the values the
// wgmma GEMM decodes into its fragments (gemm_wgmma_cuda.cu: fragment): 4-bit codes by one bf16 fma
// (gemm_tile.cuh: dequant4_pair), 8-bit codes in f32 rounded to bf16 (dequant8_pair). A GEMM over the copy
// then sums the same products as one over the codes.
//
// With `part` 0 or 1, m is the gate or the up matrix of a SwiGLU pair and its rows go to 8-row runs of
// their stacked copy: gate rows 8i..8i+7 to rows 16i..16i+7, up rows to 16i+8..16i+15, the order the
// SwiGLU epilogue takes (gemm_tile.cuh: tile_row), so a block's 128 rows are 64 outputs' gate and up.
//
// A thread writes 8 outputs (16 bytes) from one 4-byte word of 4-bit codes, two of 8-bit ones or 16
// bytes of bf16; the 8 lie in one quantization group (groups are multiples of 32 wide).
//
// Tests: tests/cuda/gemm_cuda_test.cpp (Gemm.DecodeBf16MatchesTheKernelsValues) against
// dequantize_row and through the wgmma kernel; Gemm.TmaMatchesCpu for the SwiGLU order.
#include "kernels/matmul_cuda/dequant.cuh"
#include "kernels/matmul_cuda/gemm_tile.cuh"

namespace qwick::cuda {
namespace {

template <WeightFormat F>
__global__ void decode_bf16_kernel(DeviceMatrix m, uint16_t* out, int part) {
  const int64_t per_row = m.cols / 8, i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m.rows * per_row) return;
  const int64_t r = i / per_row, c = (i % per_row) * 8;
  const uint8_t* row = m.data + r * m.row_bytes;
  uint4 v;
  if constexpr (F == WeightFormat::kBF16) {
    v = *reinterpret_cast<const uint4*>(row + 2 * c);
  } else {
    const int64_t q = r * (m.cols / m.group_size) + c / m.group_size;
    const uint32_t sc = m.scales[q], bi = m.biases[q];
    if constexpr (F == WeightFormat::kAffine4) {
      const uint32_t w = *reinterpret_cast<const uint32_t*>(row + c / 2), s2 = sc | sc << 16,
                     b2 = bi | bi << 16;
      v = make_uint4(dequant4_pair(w, w >> 4, 0, s2, b2), dequant4_pair(w, w >> 4, 1, s2, b2),
                     dequant4_pair(w, w >> 4, 2, s2, b2), dequant4_pair(w, w >> 4, 3, s2, b2));
    } else {
      const uint2 w = *reinterpret_cast<const uint2*>(row + c);
      const float s = bf16_to_f32(static_cast<uint16_t>(sc)), b = bf16_to_f32(static_cast<uint16_t>(bi));
      v = make_uint4(dequant8_pair(w.x, 0, s, b), dequant8_pair(w.x, 16, s, b), dequant8_pair(w.y, 0, s, b),
                     dequant8_pair(w.y, 16, s, b));
    }
  }
  const int64_t out_row = part < 0 ? r : 16 * (r / 8) + 8 * part + r % 8;
  *reinterpret_cast<uint4*>(out + out_row * m.cols + c) = v;
}

}  // namespace

void decode_bf16(const DeviceMatrix& m, uint16_t* out, cudaStream_t stream, int part) {
  if (m.cols % 64 != 0 || !aligned16(out) || (part >= 0 && m.rows % 8 != 0))
    check(cudaErrorInvalidValue,
          "decode_bf16: columns a multiple of 64, output 16-byte aligned, a SwiGLU part's rows a multiple of "
          "8");
  const int64_t threads = m.rows * m.cols / 8;
  if (threads == 0) return;
  with_device_format(m.format, "decode_bf16: weights must be affine 4/8-bit or bf16 on the GPU", [&](auto f) {
    decode_bf16_kernel<f.value><<<blocks_for(threads, 256), 256, 0, stream>>>(m, out, part);
  });
  check_launch("decode_bf16");
}

}  // namespace qwick::cuda
