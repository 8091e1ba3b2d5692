// Warpgroup matrix products (wgmma, sm_90a PTX): four consecutive warps, the first one's index a
// multiple of 4, multiply A (64×16, from registers) by B (N×16, in shared memory, described by a
// 64-bit descriptor) into f32 accumulators held in registers. The product runs asynchronously: issue,
// commit, and wait for the group before the accumulators, the A registers or B's shared memory are
// touched again.
//
// B's layout ("K-major": a row holds consecutive k): rows of 64 bf16 = 128 bytes, stored back to back
// from a 1024-byte aligned base, with the 128-byte swizzle: the 16-byte chunk c of row r sits at chunk
// c ^ (r % 8) of that row. A k16 step inside the 64-wide row starts 32 bytes further on; 8-row groups
// are 1024 bytes apart. An A operand in shared memory (the SS form) takes the same layout.
// "MN-major" B (kTransB, bf16 only): the same rows and swizzle, but a row holds 64 consecutive n of
// one k; a k16 step is 16 rows (two 8-row groups 1024 bytes apart) and the next 64 n sit at the
// descriptor's leading byte offset.
//
// Thread = 128-thread warpgroup index, w = its warp (rows 16w..16w+15 of A and of the product),
// g = lane / 4, t = lane % 4. A, bf16 pairs (lower k in the low half), mma.sync's A fragment:
//   a[0] = A[16w+g][2t, 2t+1]  a[1] = A[16w+g+8][2t, 2t+1]  a[2] = A[16w+g][2t+8, +9]  a[3] =
//   A[16w+g+8][2t+8, +9]
// Accumulators of m64nNk16: for each 8-wide column block j, d[4j], d[4j+1] = C[16w+g][8j+2t, +1] and
// d[4j+2], d[4j+3] = C[16w+g+8][8j+2t, +1] (mma.sync's C fragment, repeated along n).
#pragma once

#include <cstdint>

namespace qwick::cuda {

// Byte offset of chunk `chunk` (16 bytes) of row `row` in a 128-byte swizzled tile.
__device__ __forceinline__ uint32_t swizzle128(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// Descriptor of a swizzled tile starting at shared address `addr` (1024-byte aligned, plus 32 bytes
// per k16 step when K-major): stride 1024 bytes, 128-byte swizzle, and the leading byte offset, which
// K-major tiles leave unused (16) and MN-major B reads as the distance of its 64-wide n slabs. Built
// from 32-bit halves: the high one is a constant.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t addr, uint32_t leading_bytes = 16) {
  const uint32_t lo = ((addr & 0x3ffff) >> 4) | ((leading_bytes >> 4) << 16), hi = (1024 >> 4) | (1u << 30);
  return static_cast<uint64_t>(hi) << 32 | lo;
}

// The descriptor of the tile `bytes` further on (a multiple of 16). The start address field cannot
// carry over: shared addresses are below 256 KB.
__device__ __forceinline__ uint64_t wgmma_desc_advance(uint64_t desc, uint32_t bytes) {
  return (desc & 0xffffffff00000000ull) | (static_cast<uint32_t>(desc) + (bytes >> 4));
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

// Keeps the compiler from moving accesses of the accumulators across the asynchronous product; on
// A registers after the wait, it keeps them from being reused while a product may still read them.
template <int R>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int R>
__device__ __forceinline__ void wgmma_fence_operands(uint32_t (&a)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

#define QWICK_ACC8(i)                                                                         \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

// The 128 accumulators of an m64n256 product: operands %0..%127 of its asm, and their constraints.
#define QWICK_D128                                                                                     \
  "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26," \
  "%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,"   \
  "%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,"   \
  "%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,"   \
  "%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,"     \
  "%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define QWICK_ACC128                                                                                  \
  QWICK_ACC8(0), QWICK_ACC8(8), QWICK_ACC8(16), QWICK_ACC8(24), QWICK_ACC8(32), QWICK_ACC8(40),       \
      QWICK_ACC8(48), QWICK_ACC8(56), QWICK_ACC8(64), QWICK_ACC8(72), QWICK_ACC8(80), QWICK_ACC8(88), \
      QWICK_ACC8(96), QWICK_ACC8(104), QWICK_ACC8(112), QWICK_ACC8(120)

// d += A·Bᵀ for A 64×16 (registers) and B 256×16 (bf16, K-major, or MN-major with kTransB), f32
// accumulators.
template <bool kTransB = false>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" QWICK_D128
      "}, {%128,%129,%130,%131}, %132, p, 1, 1, %134;\n}\n"
      : QWICK_ACC128
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1), "n"(kTransB ? 1 : 0));
}

// The same for B 144×16: the first 72 accumulators (an expert's rows up to 144 in one product).
template <int R, bool kTransB = false>
__device__ __forceinline__ void wgmma_m64n144k16(float (&d)[R], const uint32_t (&a)[4], uint64_t desc_b) {
  static_assert(R >= 72, "m64n144 accumulates into 72 registers");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %77, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n144k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"
      "%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,"
      "%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71"
      "}, {%72,%73,%74,%75}, %76, p, 1, 1, %78;\n}\n"
      : QWICK_ACC8(0), QWICK_ACC8(8), QWICK_ACC8(16), QWICK_ACC8(24), QWICK_ACC8(32), QWICK_ACC8(40),
        QWICK_ACC8(48), QWICK_ACC8(56), QWICK_ACC8(64)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1), "n"(kTransB ? 1 : 0));
}

// The same for B 128×16: the first 64 accumulators (columns 0..127 in the layout above).
template <int R, bool kTransB = false>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[R], const uint32_t (&a)[4], uint64_t desc_b) {
  static_assert(R >= 64, "m64n128 accumulates into 64 registers");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"
      "%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,"
      "%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
      "}, {%64,%65,%66,%67}, %68, p, 1, 1, %70;\n}\n"
      : QWICK_ACC8(0), QWICK_ACC8(8), QWICK_ACC8(16), QWICK_ACC8(24), QWICK_ACC8(32), QWICK_ACC8(40),
        QWICK_ACC8(48), QWICK_ACC8(56)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1), "n"(kTransB ? 1 : 0));
}

// The same for B 64×16: the first 32 accumulators.
template <int R, bool kTransB = false>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[R], const uint32_t (&a)[4], uint64_t desc_b) {
  static_assert(R >= 32, "m64n64 accumulates into 32 registers");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"
      "%26,%27,%28,%29,%30,%31"
      "}, {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"
      : QWICK_ACC8(0), QWICK_ACC8(8), QWICK_ACC8(16), QWICK_ACC8(24)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1), "n"(kTransB ? 1 : 0));
}

// d += A·Bᵀ for A 64×16 and B 256×16 both in shared memory (K-major, bf16), f32 accumulators.
__device__ __forceinline__ void wgmma_m64n256k16_ss(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" QWICK_D128
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : QWICK_ACC128
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

// d (= or +=) A·Bᵀ for A 64×16 and B 64×16 both in shared memory (K-major): the first 32 accumulators;
// `accumulate` false overwrites them.
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                   bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"
      "%26,%27,%28,%29,%30,%31"
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : QWICK_ACC8(0), QWICK_ACC8(8), QWICK_ACC8(16), QWICK_ACC8(24)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate ? 1 : 0));
}
#undef QWICK_ACC128
#undef QWICK_D128
#undef QWICK_ACC8

}  // namespace qwick::cuda
