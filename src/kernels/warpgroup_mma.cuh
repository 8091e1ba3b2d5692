// Warpgroup matrix products (wgmma, sm_90a PTX): four consecutive warps, the first one's index a
// multiple of 4, multiply operands that sit in shared memory, described by 64-bit descriptors, into
// f32 accumulators held in registers. The product runs asynchronously: issue, commit, and wait for
// the group before the accumulators or the operands' shared memory are touched again.
//
// Operand layout used here (both operands "K-major": a row of A or of B holds consecutive k):
//   rows of 64 bf16 = 128 bytes, stored back to back from a 1024-byte aligned base, with the 128-byte
//   swizzle: the 16-byte chunk c of row r sits at chunk c ^ (r % 8) of that row. A k16 step inside the
//   64-wide row starts 32 bytes further on; 8-row groups are 1024 bytes apart.
//
// Accumulators of m64nNk16, thread = 128-thread warpgroup index, w = its warp (rows 16w..16w+15),
// g = lane / 4, t = lane % 4: for each 8-wide column block j, d[4j], d[4j+1] = C[16w+g][8j+2t, +1]
// and d[4j+2], d[4j+3] = C[16w+g+8][8j+2t, +1] (mma.sync's C fragment, repeated along n).
#pragma once

#include <cstdint>

namespace qwick::cuda {

// Byte offset of chunk `chunk` (16 bytes) of row `row` in a 128-byte swizzled tile.
__device__ __forceinline__ uint32_t swizzle128(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// Descriptor of a swizzled K-major tile starting at shared address `addr` (1024-byte aligned, plus
// 32 bytes per k16 step): leading byte offset unused (1), stride 1024 bytes, 128-byte swizzle.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3ffff) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

// Orders this thread's ordinary shared-memory writes (stores, cp.async) before the tensor cores'
// reads of them; each writing thread issues it before the barrier that publishes the data.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N committed groups of this warpgroup are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accesses of the accumulators across the asynchronous product.
template <int R>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d += A·Bᵀ for A 64×16 and B 128×16 (bf16, K-major), f32 accumulators. scale-d, a predicate, is 1:
// accumulate; the callers start from zeroed accumulators.
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"
      "%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,"
      "%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

}  // namespace qwick::cuda
