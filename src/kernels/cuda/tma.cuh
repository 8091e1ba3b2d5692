// Hopper's tensor memory accelerator (TMA, sm_90 PTX): a tensor map (CUtensorMap, encoded on the
// host) describes a 2-D global array and a box; one thread asks for the box at given coordinates and
// the copy engine writes it to shared memory (here with the 128-byte swizzle wgmma reads,
// warpgroup_mma.cuh), counting its bytes on an mbarrier (tensor_core.cuh: mbarrier_expect_bytes).
// Boxes that reach past the array are filled with zeros and still count their full size.
#pragma once

#include <cstdint>

namespace qwick::cuda {

// The box of `map` at element coordinates (x, y) (x the contiguous dimension) to shared address `dst`
// (1024-byte aligned for the 128-byte swizzle), its bytes counted on `bar`. `map` is the generic address
// of a __grid_constant__ kernel parameter.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

}  // namespace qwick::cuda
