// Device helpers shared by the CUDA kernels: bf16 bit conversions (round to nearest even, as the CPU
// side's core/numeric.h), warp and block reductions, and the scalar activations in f32 as torch
// computes them.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace qwick::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float bf16_to_f32(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
// Four bf16 values from one 8-byte load (p 8-byte aligned), as floats.
__device__ __forceinline__ float4 load4_bf16(const uint16_t* p) {
  const uint2 q = *reinterpret_cast<const uint2*>(p);
  return make_float4(__uint_as_float(q.x << 16), __uint_as_float(q.x & 0xffff0000u),
                     __uint_as_float(q.y << 16), __uint_as_float(q.y & 0xffff0000u));
}
// Element i of rows stored in f32, or in bf16 where `bf16` is set (prefill's projections may write
// either).
__device__ __forceinline__ float f32_or_bf16(const float* f32, const uint16_t* bf16, int64_t i) {
  return bf16 ? bf16_to_f32(bf16[i]) : f32[i];
}
// Elements i .. i + 3 of the same (f32 rows 16-byte aligned there, bf16 ones 8-byte aligned).
__device__ __forceinline__ float4 f32_or_bf16_4(const float* f32, const uint16_t* bf16, int64_t i) {
  return bf16 ? load4_bf16(bf16 + i) : *reinterpret_cast<const float4*>(f32 + i);
}
// Two floats as a bf16 pair in one 32-bit word, `lo` in the low half (the element with the lower index).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(f32_to_bf16(lo)) | (static_cast<uint32_t>(f32_to_bf16(hi)) << 16);
}

__device__ __forceinline__ float sigmoidf_(float x) {
  return 1.0f / (1.0f + expf(-x));
}
__device__ __forceinline__ float siluf_(float x) {
  return x / (1.0f + expf(-x));
}
__device__ __forceinline__ float softplusf_(float x) {
  return x > 20.0f ? x : log1pf(expf(x));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats of shared memory; the call ends with a barrier, so it may be reused.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}

// Max over the block, as block_sum.
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  v = warp_max(v);
  __syncthreads();
  return v;
}

// Programmatic dependent launch: a kernel launched with the attribute may start while the previous
// one runs; it must wait before reading anything the previous kernels wrote. Both are no-ops in a
// kernel launched without it.
__device__ __forceinline__ void wait_for_previous_kernel() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void let_next_kernel_start() {
  asm volatile("griddepcontrol.launch_dependents;");
}
// The line holding p requested, without waiting for it, into this SM's L1 (data no kernel writes: L1 is
// not coherent) or into L2 (data an earlier kernel wrote or a running one may write).
__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
// Order-preserving map of a float to an unsigned key (larger float, larger key; negative floats
// reversed below the positive ones), and back: the sampler's cuts and the router's top-k compare keys.
__device__ __forceinline__ uint32_t ordered_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}
// A counter that blocks of other grids running at the same time add to: read it with acquire order
// (the writes made before the adds that it sees are then visible), or add to it after a release fence.
__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release(unsigned long long* p, unsigned long long v) {
  asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// *p += v, returning the old value, with acquire and release order at the GPU's scope: after a barrier
// of the block, the block's earlier writes are visible to whoever sees this add, and the writes of the
// adds it sees are visible to the block (one thread adds; no fence of every thread).
__device__ __forceinline__ int add_acq_rel(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
// *p = v, with release order: the writes before it (the warp's, after a __syncwarp) are visible to a
// thread that reads v with acquire order.
__device__ __forceinline__ void store_release(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// Spin until *p >= target (one thread; the caller publishes the result to its block or warp).
__device__ __forceinline__ void wait_until_at_least(const unsigned long long* p, unsigned long long target) {
  while (load_acquire(p) < target) __nanosleep(32);
}
// A flag in shared memory by which one thread tells its block what it saw with acquire order: set
// with release order, read with acquire order at the block's scope (the order then carries over).
__device__ __forceinline__ void set_block_flag(unsigned* flag) {
  asm volatile(
      "st.release.cta.shared.u32 [%0], 1;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(flag)))
      : "memory");
}
__device__ __forceinline__ void wait_for_block_flag(const unsigned* flag) {
  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(flag));
  for (unsigned v = 0;; __nanosleep(20)) {
    asm volatile("ld.acquire.cta.shared.u32 %0, [%1];" : "=r"(v) : "r"(at) : "memory");
    if (v) return;
  }
}

// Both, at a prefill kernel's start: the next kernel's launch then begins once this one's last
// blocks are resident, and its blocks wait where this one's leave SMs free (no launch gap).
__device__ __forceinline__ void wait_and_let_next_start() {
  wait_for_previous_kernel();
  let_next_kernel_start();
}

}  // namespace qwick::cuda
