// The decode MoE as one kernel (contract in moe_cuda.h), for 4-bit experts.
//
// The three-kernel form (moe_decode_cuda.cu) spends most of its ~36 µs per layer waiting: each
// kernel's weight loads start only once the one before has finished, and each is a short dependent
// chain. Here one block per multiprocessor (all resident, so grid-wide barriers are safe) runs
//   1  RMSNorm(x) staged; router and shared-gate rows, a warp per row, their weights requested
//      before the wait for the previous kernel
//   -- barrier: every logit written
//   2  each block reads the E + 1 logits and routes (route_one, the same choice in every block)
//   3  every weight byte the block will use, requested at once with cp.async into shared memory:
//      its share of the (k + 1)·I gate/up row pairs, then its share of the H down rows of every
//      chosen expert (codes, scales and biases of a row side by side)
//   4  gate/up dots as soon as the first group lands, SwiGLU, act to global memory
//   -- barrier: every act written
//   5  act staged; the down records of the block's output rows, one per group of lanes, weighted into
//      shared memory, then summed per output in route order (as the three-kernel form adds them)
//      and added to x
// so the whole layer's expert weights (~16 MB) are in flight together. 16 warps: with 8, each warp
// ran ~12K dependent instructions and the kernel took longer than the three it replaces (ncu).
// Test: tests/cuda/cuda_kernels_test.cpp (Moe.DecodeMatchesCpu), against the CPU chain and the
// three-kernel form.
#include <algorithm>

#include "kernels/cuda_launch.h"
#include "kernels/matmul/gemv_core.cuh"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/route_warp.cuh"

namespace qwick::cuda {
namespace {

constexpr int kWarps = 16, kThreads = kWarps * 32;  // 8 left each warp ~12K dependent instructions
constexpr int kE = 32;                              // 4-bit codes per 16-byte chunk
constexpr int kMaxSlots = 32;                       // k + 1
constexpr size_t kMaxSmem = 220 * 1024;             // dynamic, beside the static `mats`

// The block's shared memory, in bytes from the start.
struct Plan {
  int blocks = 0;        // one per multiprocessor
  int route_rows = 0;    // router rows per block (E + 1 with the shared gate), a warp each
  int pairs = 0;         // gate/up row pairs per block, of (k + 1)·I
  int outputs = 0;       // down output rows per block, of H
  int64_t h_record = 0;  // a staged row of input H: codes, scales, biases
  int64_t i_record = 0;  // the same for input I
  int down_lanes = 32;   // lanes per down record
  size_t x_router = 0, x = 0, act = 0, logits = 0, partial = 0, gate_up = 0, down = 0, total = 0;
};

__device__ __forceinline__ int ld_acquire(const int32_t* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Every block of the grid arrives, then waits for `target` arrivals in all.
__device__ __forceinline__ void grid_barrier(int32_t* counter, int target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1);
    while (ld_acquire(counter) < target) {
    }
  }
  __syncthreads();
}

template <WeightFormat Fr>
__global__ void __launch_bounds__(kThreads, 1) moe_kernel(const MoeDecodeArgs a, const Plan P) {
  constexpr int Er = ChunkTraits<Fr>::kElems;
  extern __shared__ uint4 smem4[];
  __shared__ DeviceMatrix mats[kMaxSlots * 3];
  uint8_t* const smem = reinterpret_cast<uint8_t*>(smem4);
  float* const xr = reinterpret_cast<float*>(smem + P.x_router);
  float* const xs = reinterpret_cast<float*>(smem + P.x);
  float* const acts = reinterpret_cast<float*>(smem + P.act);
  float* const logits = reinterpret_cast<float*>(smem + P.logits);
  int32_t* const ids = reinterpret_cast<int32_t*>(logits + a.E + 1);
  float* const coef = reinterpret_cast<float*>(ids + kMaxSlots);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, slots = a.k + 1;
  const int64_t H = a.H, I = a.I;
  let_next_kernel_start();

  // 1. Router rows.
  const int64_t r = static_cast<int64_t>(blockIdx.x) * P.route_rows + warp;
  const DeviceMatrix& rm = a.route_table[r < a.E ? 0 : 1];
  WeightRow row[1];
  if (warp < P.route_rows && r <= a.E) row[0] = weight_row(rm, r < a.E ? r : 0);
  float factor = 1.0f;
  auto stage = [&] {
    wait_for_previous_kernel();  // x comes from the mixer
    factor = stage_norm<Er>(a.x, a.norm_weight, a.eps, H, xr, xr + staged_floats<Er>(H));
    if constexpr (Er != kE) stage_norm<kE>(a.x, a.norm_weight, a.eps, H, xs, xs + staged_floats<kE>(H));
    __syncthreads();
  };
  float acc[1];
  dot_rows<Fr, 1, 2>(row, H / Er, rm.group_size, 32, lane, xr, true, stage, acc);
  if (lane == 0 && row[0].data) a.logits[r] = factor * acc[0];
  grid_barrier(a.counter, static_cast<int>(gridDim.x));

  // 2. Routing, in every block.
  for (int e = threadIdx.x; e <= a.E; e += kThreads) logits[e] = __ldcg(a.logits + e);
  __syncthreads();
  if (warp == 0) route_one(logits, a.E, a.k, ids, coef);
  if (threadIdx.x == 0) ids[a.k] = a.E, coef[a.k] = sigmoidf_(logits[a.E]);
  __syncthreads();
  if (blockIdx.x == 0 && threadIdx.x < a.k)
    a.ids[threadIdx.x] = ids[threadIdx.x], a.weights[threadIdx.x] = coef[threadIdx.x];
  for (int i = threadIdx.x; i < 3 * slots; i += kThreads) mats[i] = a.experts[3 * ids[i / 3] + i % 3];
  __syncthreads();

  // 3. This block's weights, gate/up then down, a warp per row record.
  const int64_t p0 = static_cast<int64_t>(blockIdx.x) * P.pairs;
  const int64_t pairs = std::max<int64_t>(0, std::min<int64_t>(P.pairs, slots * I - p0));
  uint8_t* const gu = smem + P.gate_up;
  for (int64_t i = warp; i < 2 * pairs; i += kWarps) {
    const int64_t p = p0 + i / 2;
    stage_record(mats[3 * (p / I) + i % 2], p % I, gu + i * P.h_record, lane, 32);
  }
  cp_async_commit();
  const int64_t h0 = static_cast<int64_t>(blockIdx.x) * P.outputs;
  const int64_t outputs = std::max<int64_t>(0, std::min<int64_t>(P.outputs, H - h0));
  uint8_t* const dn = smem + P.down;
  for (int64_t i = warp; i < outputs * slots; i += kWarps)
    stage_record(mats[3 * (i % slots) + 2], h0 + i / slots, dn + i * P.i_record, lane, 32);
  cp_async_commit();

  // 4. gate/up and SwiGLU.
  cp_async_wait<1>();
  __syncthreads();
  for (int64_t i = warp; i < pairs; i += kWarps) {
    const uint8_t* const rec[2] = {gu + 2 * i * P.h_record, gu + (2 * i + 1) * P.h_record};
    float gate_up[2];
    record_dots<2>(rec, H, mats[0].group_size, xs, lane, 32, gate_up);
    if (lane == 0) a.act[p0 + i] = siluf_(factor * gate_up[0]) * (factor * gate_up[1]);
  }
  grid_barrier(a.counter, 2 * static_cast<int>(gridDim.x));

  // 5. down, combined in route order, and the residual.
  for (int64_t i = 4 * threadIdx.x; i < slots * I; i += 4 * kThreads) {
    const int64_t s = i / I;
    *reinterpret_cast<float4*>(acts + s * staged_floats<kE>(I) + staged_at<kE>(i % I)) =
        __ldcg(reinterpret_cast<const float4*>(a.act + i));
  }
  cp_async_wait<0>();
  __syncthreads();
  // A record per group of down_lanes lanes; the weighted products meet in shared memory and are added
  // to x in route order.
  float* const partial = reinterpret_cast<float*>(smem + P.partial);  // [outputs][slots]
  const int sub = P.down_lanes, per_warp = 32 / sub;
  const int64_t records = outputs * slots;
  for (int64_t base = int64_t{warp} * per_warp; base < records; base += kWarps * per_warp) {
    const int64_t i = base + lane / sub;  // whole warps iterate, for record_dots' shuffles
    const int64_t j = i < records ? i : base;
    const int s = static_cast<int>(j % slots);
    const uint8_t* const rec[1] = {dn + j * P.i_record};
    float d[1];
    record_dots<1>(rec, I, mats[2].group_size, acts + s * staged_floats<kE>(I), lane % sub, sub, d);
    if (i < records && lane % sub == 0) partial[i] = coef[s] * d[0];
  }
  __syncthreads();
  for (int64_t q = threadIdx.x; q < outputs; q += kThreads) {
    float sum = 0.0f;
    for (int s = 0; s < slots; ++s) sum += partial[q * slots + s];
    a.x[h0 + q] += sum;
  }
  // The last block out resets the counter for the next call (everyone is past both barriers).
  if (threadIdx.x == 0 && atomicAdd(a.counter, 1) == 3 * static_cast<int>(gridDim.x) - 1) *a.counter = 0;
}

template <int E>
int64_t staged_bytes(int64_t n) {
  return sizeof(float) * (staged_floats<E>(n) + 32);
}

Plan make_plan(const MoeDecodeArgs& a) {
  static const int sms = [] {
    int device = 0, n = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
    return n;
  }();
  const int er = a.route_format == WeightFormat::kAffine4   ? 32
                 : a.route_format == WeightFormat::kAffine8 ? 16
                                                            : 8;
  const int64_t slots = a.k + 1, gs = a.expert_group_size;
  Plan p;
  p.blocks = sms;
  p.route_rows = static_cast<int>((a.E + 1 + sms - 1) / sms);
  p.pairs = static_cast<int>((slots * a.I + sms - 1) / sms);
  p.outputs = static_cast<int>((a.H + sms - 1) / sms);
  p.h_record = record_bytes(a.H, std::max<int64_t>(gs, 1));
  p.i_record = record_bytes(a.I, std::max<int64_t>(gs, 1));
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t here = at;
    at += (bytes + 15) / 16 * 16;
    return here;
  };
  p.x_router = take(er == 32 ? 0 : er == 16 ? staged_bytes<16>(a.H) : staged_bytes<8>(a.H));
  p.x = take(staged_bytes<kE>(a.H));
  if (er == 32) p.x_router = p.x;
  p.act = take(sizeof(float) * slots * staged_floats<kE>(a.I));
  p.logits = take(sizeof(float) * (a.E + 1 + 2 * kMaxSlots));
  p.partial = take(sizeof(float) * static_cast<size_t>(p.outputs * slots));
  p.down_lanes = gemv_group_lanes(a.I / kE);
  p.gate_up = take(static_cast<size_t>(2 * p.pairs * p.h_record));
  p.down = take(static_cast<size_t>(p.outputs * slots * p.i_record));
  p.total = at;
  return p;
}

template <WeightFormat Fr>
void launch(const MoeDecodeArgs& a, const Plan& p, cudaStream_t stream) {
  static bool configured = false;
  if (!configured) {
    check(cudaFuncSetAttribute(moe_kernel<Fr>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kMaxSmem)),
          "moe decode: shared memory limit");
    configured = true;
  }
  launch_kernel(moe_kernel<Fr>, dim3(static_cast<unsigned>(p.blocks)), dim3(kThreads), p.total, stream,
                a.overlap, "moe decode", a, p);
}

}  // namespace

bool moe_decode_single_fits(const MoeDecodeArgs& a) {
  const int64_t gs = a.expert_group_size;
  // Row records in 16-byte pieces: the scales (and biases) of a row must fill whole pieces.
  const bool records = gs > 0 && a.H % gs == 0 && a.I % gs == 0 && (a.H / gs * 2) % 16 == 0 &&
                       (a.I / gs * 2) % 16 == 0 && a.H % kE == 0 && a.I % kE == 0;
  if (a.expert_format != WeightFormat::kAffine4 || a.q8 || !records || a.k + 1 > kMaxSlots) return false;
  const Plan p = make_plan(a);
  return p.route_rows <= kWarps && p.total <= kMaxSmem;
}

void moe_decode_single(const MoeDecodeArgs& a, cudaStream_t stream) {
  const Plan p = make_plan(a);
  switch (a.route_format) {
    case WeightFormat::kAffine4:
      return launch<WeightFormat::kAffine4>(a, p, stream);
    case WeightFormat::kAffine8:
      return launch<WeightFormat::kAffine8>(a, p, stream);
    default:
      return launch<WeightFormat::kBF16>(a, p, stream);
  }
}

}  // namespace qwick::cuda
