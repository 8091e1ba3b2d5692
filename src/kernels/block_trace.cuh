// The device side of block_trace.h: QWICK_TRACE_BLOCK() as a kernel's first statement records the
// block's start and its exit; wait_for_previous_kernel (cuda_common.cuh) records the first warp past the
// wait, block_trace_mark<0 or 1>() the first warp at a point of the kernel's (a decode GEMV's mark 0: its
// staged input, gemv_core.cuh; mark 1: its first row step's products summed, gemv_cuda.cu),
// block_trace_mark<2 or 3>() the last warp there. Nothing is compiled in without QWICK_BLOCK_TRACE.
//
// Only kernels that open with QWICK_TRACE_BLOCK() may run during a traced step: the wait's record finds
// the block's slot in shared memory, which other kernels never set (a stale slot left there by another
// kernel's block could be taken for theirs).
#pragma once

#ifdef QWICK_BLOCK_TRACE

#include "kernels/block_trace.h"

namespace qwick::cuda {
namespace {
// This translation unit's copy (see register_block_trace_unit).
__device__ BlockTraceBuffer g_block_trace;
[[maybe_unused]] const bool g_block_trace_unit = register_block_trace_unit(
    [](const BlockTraceBuffer& b) { return cudaMemcpyToSymbol(g_block_trace, &b, sizeof b); });
}  // namespace

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The block's record: its slot, and a tag that tells a slot set by this block from stale shared memory.
struct BlockTraceSlot {
  unsigned slot, tag;
};
constexpr unsigned kBlockTraceTag = 0x5a17c0deu;
__device__ __forceinline__ unsigned linear_block() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}
__device__ __forceinline__ BlockTraceSlot& block_trace_slot() {
  __shared__ BlockTraceSlot slot;
  return slot;
}
// The block's record, or null (not traced, or the buffer full).
__device__ __forceinline__ BlockTraceRecord* block_trace_record() {
  const BlockTraceSlot s = block_trace_slot();
  const BlockTraceBuffer b = g_block_trace;
  if (!b.records || s.tag != (kBlockTraceTag ^ linear_block()) || s.slot >= b.capacity) return nullptr;
  return b.records + s.slot;
}

// Lane 0 of each warp: the first wait of the block; the first warp at mark 0 or 1, the last at 2 or 3.
__device__ __forceinline__ void block_trace_waited() {
  if ((threadIdx.x & 31) != 0) return;
  if (BlockTraceRecord* r = block_trace_record())
    atomicMin(reinterpret_cast<unsigned long long*>(&r->waited), global_ns());
}
template <int I>
__device__ __forceinline__ void block_trace_mark() {
  static_assert(I >= 0 && I < 4, "four marks");
  if ((threadIdx.x & 31) != 0) return;
  if (BlockTraceRecord* r = block_trace_record()) {
    auto* at = reinterpret_cast<unsigned long long*>(&r->mark[I]);
    if constexpr (I < 2)
      atomicMin(at, global_ns());
    else
      atomicMax(at, global_ns());
  }
}

struct BlockTraceScope {
  __device__ BlockTraceScope() {
    const uint64_t start = global_ns();
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
      const BlockTraceBuffer b = g_block_trace;
      const unsigned slot = b.records ? atomicAdd(b.count, 1u) : ~0u;
      if (slot < b.capacity) {
        unsigned sm;
        asm("mov.u32 %0, %%smid;" : "=r"(sm));
        b.records[slot] = BlockTraceRecord{start,
                                           ~0ull,
                                           {~0ull, ~0ull, 0, 0},
                                           0,
                                           linear_block(),
                                           gridDim.x * gridDim.y * gridDim.z,
                                           blockDim.x * blockDim.y * blockDim.z,
                                           sm};
      }
      block_trace_slot() = BlockTraceSlot{slot, kBlockTraceTag ^ linear_block()};
    }
    __syncthreads();
  }
  __device__ ~BlockTraceScope() {
    if ((threadIdx.x & 31) != 0) return;
    if (BlockTraceRecord* r = block_trace_record())
      atomicMax(reinterpret_cast<unsigned long long*>(&r->end), global_ns());
  }
};

}  // namespace qwick::cuda

#define QWICK_TRACE_BLOCK() const ::qwick::cuda::BlockTraceScope qwick_block_trace_scope_

#else

namespace qwick::cuda {
__device__ __forceinline__ void block_trace_waited() {}
template <int I>
__device__ __forceinline__ void block_trace_mark() {}
}  // namespace qwick::cuda

#define QWICK_TRACE_BLOCK() static_cast<void>(0)

#endif
