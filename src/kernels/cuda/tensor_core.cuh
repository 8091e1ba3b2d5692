// Warp-level tensor-core and asynchronous-copy primitives (sm_80+ PTX) shared by the GEMM and
// attention kernels.
//
// mma m16n8k16 (bf16 in, f32 accumulate), lane = 4·g + t (g = lane / 4, t = lane % 4):
//   A 16×16 row-major  a0 = A[g][2t, 2t+1]  a1 = A[g+8][2t, 2t+1]  a2 = A[g][2t+8, 2t+9]  a3 = A[g+8][2t+8,
//   2t+9] B 16×8             b0 = B[2t, 2t+1][g]  b1 = B[2t+8, 2t+9][g] C 16×8             c0, c1 = C[g][2t,
//   2t+1]  c2, c3 = C[g+8][2t, 2t+1]
// Pairs are bf16x2 words, the lower index in the low half.
#pragma once

#include <cstdint>

namespace qwick::cuda {

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The same with f16 inputs.
__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// m16n8k8 with tf32 inputs (A 16×8: a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4];
// B 8×8: b0 = B[t][g], b1 = B[t+4][g]; C as m16n8k16).
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x as a tf32 mma operand, rounded to nearest (ties away from zero): half a tf32 ulp is added to its
// bits and the 13 low bits are left for the tensor core, which reads only an operand's top 19 bits.
// One integer add, where cvt.rna.tf32.f32 compiles to a finiteness test, the add, a mask and a select
// on sm_90 (in the chunked scan those were a third of all instructions). An infinity's bits become a
// NaN's; the operands here are finite.
__device__ __forceinline__ uint32_t to_tf32(float x) {
  return __float_as_uint(x) + 0x1000u;
}
// The value the tensor core sees for to_tf32(x).
__device__ __forceinline__ float tf32_value(uint32_t bits) {
  return __uint_as_float(bits & 0xffffe000u);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 (or 4) bytes global -> shared (a shared-space address), asynchronously; zero-filled when !valid
// (src then unread).
__device__ __forceinline__ void cp_async16_shared(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4_shared(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}
// The same to a generic pointer into shared memory.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  cp_async16_shared(smem_addr(dst), src, valid);
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  cp_async4_shared(smem_addr(dst), src, valid);
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// mbarrier: an arrival counter in shared memory (8 bytes) whose phase completes when `count`
// arrivals have come, then starts over; waits name the parity of the phase they wait for.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival, made once every cp.async this thread issued before it has landed.
__device__ __forceinline__ void cp_async_mbarrier_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// The copy engine's side of an mbarrier (sm_90): after mbarrier_init, make the barrier visible to
// bulk copies; then one thread announces the bytes the phase waits for and issues the copies, each of
// which counts its bytes against the barrier as they land. A copy's addresses and size are multiples of
// 16 bytes; a phase waits for less than 2^20 bytes.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_copy_to_shared(uint32_t dst, const void* src, uint32_t bytes,
                                                    uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// Four 8×8 bf16 matrices from shared memory: lanes 8i .. 8i+7 give the 16-byte rows of matrix i, and
// lane 4g + t receives row g, elements 2t, 2t+1 of each (.trans: column g, elements 2t, 2t+1).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

// The transpose of an 8×8 bf16 matrix held one bf16x2 word per lane (lane 4g + t: row g, elements
// 2t, 2t+1): turns a C fragment's pair into the B fragment pair of the transposed product.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
  return r;
}

}  // namespace qwick::cuda
