// MoE routing, grouping, SwiGLU and the weighted combine on the GPU (contracts in moe_cuda.h).
#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/route_warp.cuh"

namespace qwick::cuda {
namespace {

__global__ void route_decode_kernel(const float* logits, int E, int k, int32_t* ids, float* weights,
                                    int32_t* gate_up, int32_t* down) {
  route_one(logits, E, k, ids, weights);
  __syncwarp();
  const int lane = threadIdx.x;
  if (lane < k) {
    gate_up[lane] = 3 * ids[lane];
    gate_up[k + lane] = 3 * ids[lane] + 1;
    down[lane] = 3 * ids[lane] + 2;
  } else if (lane == k) {
    gate_up[2 * k] = 3 * E;
    gate_up[2 * k + 1] = 3 * E + 1;
    down[k] = 3 * E + 2;
  }
}

// Inclusive scan of v over the block (up to 1024 threads): a scan in each warp, then over the warps'
// totals. `totals` holds 32 values.
__device__ __forceinline__ int32_t block_inclusive_scan(int32_t v, int32_t* totals) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int32_t u = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += u;
  }
  if (lane == 31) totals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int32_t w = lane < static_cast<int>(blockDim.x >> 5) ? totals[lane] : 0;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int32_t u = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += u;
    }
    totals[lane] = w;
  }
  __syncthreads();
  return warp > 0 ? v + totals[warp - 1] : v;
}

// The grouping's counting, in the kernel that routes the pairs: each pair takes the next rank within its
// expert from counts[e] (a global atomic, so the order inside a group is arbitrary; the combine reads the
// pairs back in a fixed order), kept in slot_of until place_kernel turns it into the slot. The last block to
// finish turns the counts into offsets and the tile list (full tiles of tile_rows slots, the last holding the
// rest) and zeroes them for the next grouping. (Counting in one block of its own put that block's launch at
// ~12 µs of the routing chain of every MoE layer in a 4K timeline.)
__device__ __forceinline__ void rank_pair(const MoeGrouping& g, int64_t pair, int32_t expert) {
  g.slot_of[pair] = atomicAdd(&g.counts[expert], 1);
}

// Called by every thread of every block once its pairs are ranked.
__device__ void finish_counts(const MoeGrouping& g, int E) {
  __shared__ bool last;
  __shared__ int32_t totals[2][32];
  __threadfence();
  __syncthreads();  // the block's ranks are taken
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(&g.counts[E], 1) == static_cast<int32_t>(gridDim.x) - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // A thread owns a run of `per` experts: its counts' sums, scanned over the block, place the run.
  const int per = (E + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
  const int e0 = min(E, static_cast<int>(threadIdx.x) * per), e1 = min(E, e0 + per);
  int32_t slots = 0, n_tiles = 0;
  for (int e = e0; e < e1; ++e) {
    const int32_t c = atomicExch(&g.counts[e], 0);  // read from L2, and left zero
    g.offsets[e] = c;                               // (the count, until the scan places the run)
    slots += c;
    n_tiles += (c + g.tile_rows - 1) / g.tile_rows;
  }
  const int32_t slot_end = block_inclusive_scan(slots, totals[0]);
  const int32_t tile_end = block_inclusive_scan(n_tiles, totals[1]);
  int32_t begin = slot_end - slots, tile = tile_end - n_tiles;
  for (int e = e0; e < e1; ++e) {
    const int32_t end = begin + g.offsets[e];
    g.offsets[e] = begin;
    for (int32_t s = begin; s < end; s += g.tile_rows)
      g.tiles[tile++] = GemmTile{e, s, min(end, s + g.tile_rows)};
    begin = end;
  }
  if (threadIdx.x == blockDim.x - 1) {
    g.offsets[E] = slot_end;
    *g.tile_count = tile_end;
    g.counts[E] = 0;
  }
}

// A warp per token; lane j < k ranks the token's j-th pair.
__global__ void route_kernel(const float* logits, int64_t ld, int64_t n, int E, int k, int32_t* ids,
                             float* weights, MoeGrouping g) {
  wait_and_let_next_start();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (t < n) {
    route_one(logits + t * ld, E, k, ids + t * k, weights + t * k);
    const int lane = threadIdx.x & 31;
    if (lane < k) rank_pair(g, t * k + lane, ids[t * k + lane]);  // (this lane wrote that id)
  }
  finish_counts(g, E);
}

__global__ void place_kernel(const int32_t* ids, int64_t pairs, int k, MoeGrouping g) {
  wait_and_let_next_start();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  const int32_t s = g.offsets[ids[i]] + g.slot_of[i];
  g.slot_row[s] = static_cast<int32_t>(i / k);
  g.slot_of[i] = s;
}

template <bool kBf16>
__global__ void swiglu_kernel(const float* gate, const float* up, int64_t ld_in, int64_t rows, int64_t width,
                              void* out, int64_t ld_out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * width) return;
  const int64_t r = i / width, j = i % width;
  const float v = siluf_(gate[r * ld_in + j]) * up[r * ld_in + j];
  if constexpr (kBf16)
    static_cast<uint16_t*>(out)[r * ld_out + j] = f32_to_bf16(v);
  else
    static_cast<float*>(out)[r * ld_out + j] = v;
}

// Four consecutive f32 values of a row in one 16-byte load.
__device__ __forceinline__ float4 load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ void add_scaled(float4& acc, float w, const float4& v) {
  acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
}

// A thread per four outputs of a row, the experts' rows read with vector loads. With the norm, a block
// per row.
__global__ void combine_kernel(MoeCombine c) {
  wait_and_let_next_start();
  const int64_t t = blockIdx.y;
  const int64_t h = 4 * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  if (h >= c.H) return;  // (never with the norm: its barriers)
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  add_scaled(acc, sigmoidf_(c.shared_logit[t * c.ld_logit]), load4(c.shared + t * c.ld_shared + h));
#pragma unroll 8
  for (int j = 0; j < c.k; ++j) {
    const int64_t pair = t * c.k + j;
    const int64_t at = (c.slot_of ? c.slot_of[pair] : pair) * c.ld_down + h;
    add_scaled(acc, c.weights[pair], f32_or_bf16_4(c.down, c.down16, at));
  }
  float4* out = reinterpret_cast<float4*>(c.hidden + t * c.H + h);
  float4 x = *out;
  add_scaled(x, 1.0f, acc);
  *out = x;
  if (!c.normed) return;
  __shared__ float scratch[32];
  const float ss = block_sum(x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(c.H) + c.eps);
  const float4 w = load4(c.norm_weight + h);
  *reinterpret_cast<uint2*>(c.normed + t * c.H + h) = make_uint2(
      pack_bf16x2(x.x * inv * w.x, x.y * inv * w.y), pack_bf16x2(x.z * inv * w.z, x.w * inv * w.w));
}

}  // namespace

void moe_route_group(const float* logits, int64_t ld, int64_t n, int E, int k, int32_t* ids, float* weights,
                     const MoeGrouping& g, cudaStream_t stream, bool overlap) {
  if (E > 32 * kMaxExpertsPerLane || k > 32 || k > E)
    check(cudaErrorInvalidValue, "moe_route_group: expert count");
  if (g.tile_rows != 64 && g.tile_rows != 128 && g.tile_rows != 144)
    check(cudaErrorInvalidValue, "moe_route_group: tiles of 64, 128 or 144 rows");
  // At least one block, so that a grouping of no rows still writes its offsets and tile count.
  launch_kernel(route_kernel, dim3(std::max(1u, blocks_for(n, 8))), dim3(256), 0, stream, overlap,
                "moe_route", logits, ld, n, E, k, ids, weights, g);
  const int64_t pairs = n * k;
  if (pairs == 0) return;
  launch_kernel(place_kernel, dim3(blocks_for(pairs, 256)), dim3(256), 0, stream, overlap, "moe_place", ids,
                pairs, k, g);
}

void moe_route_decode(const float* logits, int E, int k, int32_t* ids, float* weights, int32_t* gate_up,
                      int32_t* down, cudaStream_t stream) {
  if (E > 32 * kMaxExpertsPerLane || k >= 32 || k > E)
    check(cudaErrorInvalidValue, "moe_route_decode: expert count");
  route_decode_kernel<<<1, 32, 0, stream>>>(logits, E, k, ids, weights, gate_up, down);
  check_launch("moe_route_decode");
}

void swiglu(const float* gate, const float* up, int64_t ld_in, int64_t rows, int64_t width, void* out,
            int64_t ld_out, bool out_bf16, cudaStream_t stream) {
  if (rows * width == 0) return;
  const unsigned blocks = blocks_for(rows * width, 256);
  if (out_bf16)
    swiglu_kernel<true><<<blocks, 256, 0, stream>>>(gate, up, ld_in, rows, width, out, ld_out);
  else
    swiglu_kernel<false><<<blocks, 256, 0, stream>>>(gate, up, ld_in, rows, width, out, ld_out);
  check_launch("swiglu");
}

void moe_combine(const MoeCombine& c, cudaStream_t stream) {
  if (c.n == 0) return;
  auto aligned = [](const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  if (c.H % 4 != 0 || c.ld_down % 4 != 0 || c.ld_shared % 4 != 0 || !aligned(c.hidden, 16) ||
      !aligned(c.shared, 16) || !(c.down16 ? aligned(c.down16, 8) : aligned(c.down, 16)))
    check(cudaErrorInvalidValue, "moe_combine: rows must be multiples of 4 values, 16-byte aligned");
  if (c.normed && (!moe_combine_norms(c.H) || !aligned(c.norm_weight, 16) || !aligned(c.normed, 8)))
    check(cudaErrorInvalidValue, "moe_combine: the norm takes rows of a multiple of 128 values up to 4096");
  const unsigned threads = c.normed ? static_cast<unsigned>(c.H / 4) : 256;
  launch_kernel(combine_kernel, dim3(blocks_for(c.H / 4, threads), static_cast<unsigned>(c.n)), dim3(threads),
                0, stream, c.overlap, "moe_combine", c);
}

}  // namespace qwick::cuda
