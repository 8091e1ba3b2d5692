// RMSNorm, gated RMSNorm and the embedding lookup on the GPU (contracts in norm_cuda.h).
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_launch.h"
#include "kernels/norm/norm_cuda.h"

namespace qwick::cuda {
namespace {

// One block per row.
__global__ void rms_norm_kernel(const float* x, int64_t H, const float* w, float eps, float* out_f32,
                                uint16_t* out_bf16) {
  __shared__ float scratch[32];
  const float* row = x + blockIdx.x * H;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) ss += row[i] * row[i];
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(H) + eps);
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    const float v = row[i] * inv * w[i];
    if (out_f32) out_f32[blockIdx.x * H + i] = v;
    if (out_bf16) out_bf16[blockIdx.x * H + i] = f32_to_bf16(v);
  }
}

// One warp per (row, head).
__global__ void gated_norm_kernel(GatedNormArgs a) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (item >= a.n * a.heads) return;
  const int lane = threadIdx.x & 31;
  const int64_t t = item / a.heads, h = item % a.heads;
  const float* x = a.x + t * a.ld_x + h * a.D;
  const float* z = a.z + t * a.ld_z + h * a.D;
  float ss = 0.0f;
  for (int i = lane; i < a.D; i += 32) ss += x[i] * x[i];
  ss = warp_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(a.D) + a.eps);
  for (int i = lane; i < a.D; i += 32) {
    const float v = a.weight[i] * (x[i] * inv) * siluf_(z[i]);
    const int64_t o = t * a.ld_out + h * a.D + i;
    if (a.out_f32)
      a.out_f32[o] = v;
    else
      a.out_bf16[o] = f32_to_bf16(v);
  }
}

__global__ void embed_kernel(DeviceMatrix m, const int32_t* tokens, float* out) {
  const int64_t row = tokens[blockIdx.x];
  const uint8_t* p = m.data + row * m.row_bytes;
  float* o = out + blockIdx.x * m.cols;
  for (int64_t c = threadIdx.x; c < m.cols; c += blockDim.x) {
    if (m.format == WeightFormat::kBF16) {
      o[c] = bf16_to_f32(reinterpret_cast<const uint16_t*>(p)[c]);
      continue;
    }
    const uint32_t q = m.format == WeightFormat::kAffine4 ? (p[c / 2] >> (4 * (c & 1))) & 0xfu : p[c];
    const int64_t g = row * (m.cols / m.group_size) + c / m.group_size;
    o[c] = static_cast<float>(q) * bf16_to_f32(m.scales[g]) + bf16_to_f32(m.biases[g]);
  }
}

}  // namespace

void rms_norm_rows(const float* x, int64_t n, int64_t H, const float* weight, float eps, float* out_f32,
                   uint16_t* out_bf16, cudaStream_t stream) {
  if (n == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(n), 256, 0, stream>>>(x, H, weight, eps, out_f32, out_bf16);
  check_launch("rms_norm");
}

void gated_rms_norm_rows(const GatedNormArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  gated_norm_kernel<<<blocks_for(a.n * a.heads, 8), 256, 0, stream>>>(a);
  check_launch("gated_rms_norm");
}

void embed_rows(const DeviceMatrix& embed, const int32_t* tokens, int64_t n, float* out,
                cudaStream_t stream) {
  if (n == 0) return;
  embed_kernel<<<static_cast<unsigned>(n), 256, 0, stream>>>(embed, tokens, out);
  check_launch("embed");
}

}  // namespace qwick::cuda
