// A q8 KV cache's rows as bf16 (contract in attention_cuda.h).
//
// A thread per 4 bytes of a row: one 4-byte load, the row's scale (shared by the row's threads, from
// L1), two 4-byte stores. Each value is kv_q8_value, which bf16 holds exactly only when the scale is a
// power of two; otherwise bf16 rounds it (as a bf16 cache rounds its values).
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/kv_q8.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"

namespace qwick::cuda {
namespace {

__global__ void q8_to_bf16_kernel(const uint8_t* q8, const float* scale, int64_t rows, int head_dim,
                                  int64_t capacity, uint16_t* out) {
  const int quads = head_dim / 4;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * quads) return;
  const int64_t row = static_cast<int64_t>(blockIdx.y) * capacity + i / quads;
  const int64_t at = row * head_dim + (i % quads) * 4;
  const uint32_t w = *reinterpret_cast<const uint32_t*>(q8 + at);
  const float s = scale[row];
  uint2 o;
  o.x = pack_bf16x2(kv_q8_value(w & 0xff, s), kv_q8_value((w >> 8) & 0xff, s));
  o.y = pack_bf16x2(kv_q8_value((w >> 16) & 0xff, s), kv_q8_value(w >> 24, s));
  *reinterpret_cast<uint2*>(out + at) = o;
}

}  // namespace

void kv_q8_to_bf16(const uint8_t* q8, const float* scale, int64_t rows, int n_kv_heads, int head_dim,
                   int64_t capacity, uint16_t* out, cudaStream_t stream) {
  if (rows == 0) return;
  if (head_dim % 4 != 0) check(cudaErrorInvalidValue, "kv_q8_to_bf16: head_dim must be a multiple of 4");
  constexpr int kThreads = 256;
  const dim3 grid(blocks_for(rows * (head_dim / 4), kThreads), static_cast<unsigned>(n_kv_heads));
  launch_kernel(q8_to_bf16_kernel, grid, dim3(kThreads), 0, stream, false, "kv_q8_to_bf16", q8, scale, rows,
                head_dim, capacity, out);
}

}  // namespace qwick::cuda
