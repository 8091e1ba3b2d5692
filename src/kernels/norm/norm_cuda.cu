// RMSNorm, gated RMSNorm and the embedding lookup on the GPU (contracts in norm_cuda.h).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/norm/norm_cuda.h"

namespace qwick::cuda {
namespace {

// Four values of f32 rows as one 16-byte load; their normalised values to f32 or bf16 outputs.
__device__ __forceinline__ float sumsq4(const float4& v) {
  return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
}
__device__ __forceinline__ void store4(float* out_f32, uint16_t* out_bf16, int64_t at, const float4& v) {
  if (out_f32) *reinterpret_cast<float4*>(out_f32 + at) = v;
  if (out_bf16)
    *reinterpret_cast<uint2*>(out_bf16 + at) = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
}

// One block per row, four values a thread at a time (the second pass finds the row in L1).
__global__ void rms_norm_kernel(const float* x, int64_t H, const float* w, float eps, float* out_f32,
                                uint16_t* out_bf16) {
  wait_and_let_next_start();
  __shared__ float scratch[32];
  const float4* row = reinterpret_cast<const float4*>(x + blockIdx.x * H);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < H / 4; i += blockDim.x) ss += sumsq4(row[i]);
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(H) + eps);
  for (int64_t i = threadIdx.x; i < H / 4; i += blockDim.x) {
    const float4 v = row[i], g = w4[i];
    store4(out_f32, out_bf16, blockIdx.x * H + 4 * i,
           make_float4(v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z, v.w * inv * g.w));
  }
}

// One warp per (row, head), four values a lane at a time.
__global__ void gated_norm_kernel(GatedNormArgs a) {
  wait_and_let_next_start();
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (item >= a.n * a.heads) return;
  const int lane = threadIdx.x & 31;
  const int64_t t = item / a.heads, h = item % a.heads;
  const float* x = a.x + t * a.ld_x + h * a.D;
  const int64_t z0 = t * a.ld_z + h * a.D;
  // The head's x and z in registers, every load in flight before the reduction (a second pass over
  // x with z loaded only then exposed two memory latencies a head).
  constexpr int kPer = kGatedNormMaxHead / 128;
  float4 v[kPer], g[kPer];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = 4 * lane + 128 * j;
    if (i >= a.D) break;
    v[j] = *reinterpret_cast<const float4*>(x + i);
    g[j] = f32_or_bf16_4(a.z, a.z_bf16, z0 + i);
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j)
    if (4 * lane + 128 * j < a.D) ss += sumsq4(v[j]);
  ss = warp_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(a.D) + a.eps);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = 4 * lane + 128 * j;
    if (i >= a.D) break;
    const float4 w = *reinterpret_cast<const float4*>(a.weight + i);
    store4(a.out_f32, a.out_bf16, t * a.ld_out + h * a.D + i,
           make_float4(w.x * (v[j].x * inv) * siluf_(g[j].x), w.y * (v[j].y * inv) * siluf_(g[j].y),
                       w.z * (v[j].z * inv) * siluf_(g[j].z), w.w * (v[j].w * inv) * siluf_(g[j].w)));
  }
}

// Eight consecutive values a thread (a 4-bit word, an 8-bit pair of words or a bf16 quad of words, and
// one group's scale and bias, since groups are multiples of 32 values): one round of loads after the
// token's, where a value at a time took a dependent round trip each (4.1 µs a decode step).
constexpr int kEmbedPerThread = 8;
__global__ void embed_kernel(DeviceMatrix m, const int32_t* tokens, float* out) {
  const int64_t row = tokens[blockIdx.x];
  const uint8_t* p = m.data + row * m.row_bytes;
  float* o = out + blockIdx.x * m.cols;
  for (int64_t c = kEmbedPerThread * threadIdx.x; c < m.cols; c += kEmbedPerThread * blockDim.x) {
    float v[kEmbedPerThread];
    if (m.format == WeightFormat::kBF16) {
      const uint4 w = *reinterpret_cast<const uint4*>(p + 2 * c);
      const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
        v[2 * i] = __uint_as_float(words[i] << 16), v[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    } else {
      const int64_t g = row * (m.cols / m.group_size) + c / m.group_size;
      const float scale = bf16_to_f32(m.scales[g]), bias = bf16_to_f32(m.biases[g]);
      if (m.format == WeightFormat::kAffine4) {
        const uint32_t w = *reinterpret_cast<const uint32_t*>(p + c / 2);
#pragma unroll
        for (int i = 0; i < kEmbedPerThread; ++i)
          v[i] = static_cast<float>((w >> (4 * i)) & 0xfu) * scale + bias;
      } else {
        const uint2 w = *reinterpret_cast<const uint2*>(p + c);
#pragma unroll
        for (int i = 0; i < kEmbedPerThread; ++i)
          v[i] = static_cast<float>(((i < 4 ? w.x : w.y) >> (8 * (i & 3))) & 0xffu) * scale + bias;
      }
    }
    *reinterpret_cast<float4*>(o + c) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4*>(o + c + 4) = make_float4(v[4], v[5], v[6], v[7]);
  }
}

}  // namespace

void rms_norm_rows(const float* x, int64_t n, int64_t H, const float* weight, float eps, float* out_f32,
                   uint16_t* out_bf16, cudaStream_t stream, bool overlap) {
  if (n == 0) return;
  if (H % 4 != 0 || !aligned16(x) || !aligned16(weight) || !aligned16(out_f32) ||
      reinterpret_cast<uintptr_t>(out_bf16) % 8 != 0)
    check(cudaErrorInvalidValue, "rms_norm: rows must be multiples of 4 values, 16-byte aligned");
  launch_kernel(rms_norm_kernel, dim3(static_cast<unsigned>(n)), dim3(256), 0, stream, overlap, "rms_norm", x,
                H, weight, eps, out_f32, out_bf16);
}

void gated_rms_norm_rows(const GatedNormArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  if (a.D > kGatedNormMaxHead) check(cudaErrorInvalidValue, "gated_rms_norm: heads of at most 256 values");
  if (a.D % 4 != 0 || a.ld_x % 4 != 0 || a.ld_z % 4 != 0 || a.ld_out % 4 != 0 || !aligned16(a.x) ||
      (a.z_bf16 ? reinterpret_cast<uintptr_t>(a.z_bf16) % 8 != 0 : !aligned16(a.z)) || !aligned16(a.weight) ||
      !aligned16(a.out_f32) || reinterpret_cast<uintptr_t>(a.out_bf16) % 8 != 0)
    check(cudaErrorInvalidValue,
          "gated_rms_norm: heads and rows must be multiples of 4 values, 16-byte aligned");
  launch_kernel(gated_norm_kernel, dim3(blocks_for(a.n * a.heads, 8)), dim3(256), 0, stream, a.overlap,
                "gated_rms_norm", a);
}

void embed_rows(const DeviceMatrix& embed, const int32_t* tokens, int64_t n, float* out,
                cudaStream_t stream) {
  if (n == 0) return;
  if (embed.cols % kEmbedPerThread != 0 || !aligned16(out) ||
      (embed.format != WeightFormat::kBF16 && embed.group_size % kEmbedPerThread != 0))
    check(cudaErrorInvalidValue, "embed: rows must be multiples of 8 values, the output 16-byte aligned");
  launch_kernel(embed_kernel, dim3(static_cast<unsigned>(n)), dim3(256), 0, stream, false, "embed", embed,
                tokens, out);
}

}  // namespace qwick::cuda
