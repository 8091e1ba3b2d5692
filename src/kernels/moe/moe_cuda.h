// The MoE block's routing and glue on the GPU (model-spec.md §2.6), with no host round trip:
//
//   route      per token: softmax over all experts (f32), top-k, renormalise; one warp per token
//   decode     route_decode also writes the gemv index lists of the step: gate|up entries of the k
//              chosen experts and the shared expert, and their down entries
//   prefill    group: each (token, expert) pair takes a rank within its expert as it is routed; the
//              last block scans the counts into group offsets and the tile list of the grouped GEMM (at
//              most tile_rows slots per tile); then each pair goes to its slot (offset + rank) and
//              slot_of[i] remembers where pair i went. Routing and grouping take two kernels
//   swiglu     act = silu(gate) · up, f32 -> f32 or bf16
//   combine    hidden[t] += sigmoid(shared_logit[t]) · shared[t] + Σ_j w[t, j] · down[slot_of(t, j)]
//              in a fixed order, so results do not depend on the slot order within a group
//
// Expert tables hold 3 matrices per expert (gate, up, down) and the shared expert as entry E.
// Tests: tests/cuda/moe_cuda_test.cpp (Moe.*) against route_token (moe/router.h, the CPU routing) and
// the CPU MoE chain (backend/cpu/cpu_moe.cpp: moe_forward),
// including routings where every token picks the same experts and most experts get no rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/matmul_cuda/matmul_cuda.h"

namespace qwick::cuda {

// One token: routed as moe_route_group routes, plus gemv index lists (table entries):
//   gate_up [2k + 2] = gate of the k chosen experts (3·id), their up (3·id + 1), shared gate, shared up
//   down    [k + 1]  = down of the k chosen experts (3·id + 2), shared down
// so the routed problems come first and the shared expert can also run as a launch of its own.
void moe_route_decode(const float* logits, int n_experts, int k, int32_t* ids, float* weights,
                      int32_t* gate_up_index, int32_t* down_index, cudaStream_t stream);

// Scratch and outputs of the grouping of n·k (token, expert) pairs.
struct MoeGrouping {
  int32_t* offsets;               // [E + 1]  group g owns slots [offsets[g], offsets[g + 1])
  int32_t* counts;                // [E + 1]  scratch: zero before the first grouping, left zero
  int32_t* slot_row;              // [n·k]    token whose row fills each slot
  int32_t* slot_of;               // [n·k]    slot of pair i (token i / k, choice i % k); its rank
                                  //          within the expert between the two kernels
  GemmTile* tiles;                // [max_tiles(n·k, E)]
  int32_t* tile_count;            // [1]
  int tile_rows = kGemmTileRows;  // slots per tile at most: 64, 128 or 144 (GemmArgs::tile_rows)
};
// Tiles of kGemmTileRows (the fewest rows a tile list uses) give the most tiles.
inline int64_t moe_max_tiles(int64_t pairs, int n_experts) {
  return (pairs + kGemmTileRows - 1) / kGemmTileRows + n_experts;
}
// logits [n, ld_logits] -> ids [n, k], weights [n, k] (descending weight; ties to the lower id), and
// the grouping of those pairs into g (the counting in the routing's kernel).
// overlap (here and in MoeCombine): programmatic dependent launches (cuda_launch.h).
void moe_route_group(const float* logits, int64_t ld_logits, int64_t n, int n_experts, int k, int32_t* ids,
                     float* weights, const MoeGrouping& g, cudaStream_t stream, bool overlap = false);

// out[r, j] = silu(gate[r·ld_in + j]) · up[r·ld_in + j] for r < rows, j < width; bf16 when out_bf16.
void swiglu(const float* gate, const float* up, int64_t ld_in, int64_t rows, int64_t width, void* out,
            int64_t ld_out, bool out_bf16, cudaStream_t stream);

// The decode MoE of one token in three kernels (two with MoeDecodeArgs::sync), the glue fused into the
// matrix-vector products (moe_decode_cuda.cu, on the gemv core of matmul_cuda/gemv_core.cuh):
//   router   logits = [router | shared gate] · RMSNorm(x); the last block to finish routes (top-k,
//            renormalise) into ids / weights, or with `sync` every block of the one-pass launch does
//   gate_up  per chosen expert and the shared one: act = silu(gate · RMSNorm(x)) · (up · RMSNorm(x)),
//            gate and up rows read by the same lanes
//   down     a warp per expert, the block's rows of every expert's down projection; the block adds
//            Σ_j w_j · down_j + sigmoid(shared logit) · down_shared to x in a fixed order
// Needs the router and shared gate in one format, every expert matrix in one format and the shared
// expert as wide as the routed ones (moe_decode_fits); otherwise use the separate kernels.
struct MoeDecodeArgs {
  float* x;                  // [H] residual stream, added to
  const float* norm_weight;  // [H] the post-attention norm (1 + w)
  float eps = 0.0f;
  int64_t H = 0, I = 0;  // hidden size, expert (and shared expert) width
  int E = 0, k = 0;
  const DeviceMatrix* route_table;  // device [2]: router [E, H], shared gate [1, H]
  WeightFormat route_format;
  const DeviceMatrix* experts;  // device [(E + 1) · 3] as CudaMoeWeights::experts
  WeightFormat expert_format;
  float* logits;     // [E + 1] scratch: router logits, then the shared gate's
  int32_t* ids;      // [k] scratch
  float* weights;    // [k] scratch
  int32_t* counter;  // [1] zero before the first call; the router's last block resets it
  float* act;        // [(k + 1) · I] scratch
  // [kMoeSyncWords], zero before the first call, or null: the routed experts' gate|up and the down
  // projections in one launch (one_pass_kernel in moe_decode_cuda.cu) where its blocks fit the GPU at
  // once. [0] counts the one-pass blocks that wrote their gate|up rows; [1] the router's blocks that
  // wrote their logits, after which each one-pass block routes them itself (ids and weights then come
  // from its first block). Given to no other call of a decode step (each layer its own).
  unsigned long long* sync = nullptr;
  bool i16 = false;      // int16 activations into 4-bit experts (GemvArgs::i16)
  bool overlap = false;  // launch_kernel's programmatic dependent launch
};
inline constexpr int64_t kMoeSyncWords = 2;  // MoeDecodeArgs::sync's
bool moe_decode_fits(WeightFormat route_format, WeightFormat expert_format, int64_t expert_dim,
                     int64_t shared_dim, int k);
void moe_decode(const MoeDecodeArgs& a, cudaStream_t stream);

// Rows of a multiple of 4 values, 16-byte aligned (8 for bf16 down rows): read four at a time.
struct MoeCombine {
  float* hidden;  // [n, H], accumulated into
  int64_t n = 0, H = 0;
  int k = 0;
  const float* weights;    // [n, k]
  const int32_t* slot_of;  // [n·k] or null: pair i is slot i
  const float* down;       // [slots, ld_down]
  int64_t ld_down = 0;
  const float* shared;  // [n, ld_shared]
  int64_t ld_shared = 0;
  const float* shared_logit;  // [n] at stride ld_logit
  int64_t ld_logit = 1;
  const uint16_t* down16 = nullptr;  // bf16 [slots, ld_down], read instead of down when set
  bool overlap = false;
  // When set, also normed [n, H] = bf16(RMSNorm(hidden) · norm_weight) of the rows just combined (the
  // next layer's input norm: no pass over hidden of its own). H a multiple of 128, at most 4096.
  const float* norm_weight = nullptr;
  float eps = 0.0f;
  uint16_t* normed = nullptr;
};
void moe_combine(const MoeCombine& c, cudaStream_t stream);
// Row sizes whose norm the combine can compute (MoeCombine::normed).
constexpr bool moe_combine_norms(int64_t H) {
  return H % 128 == 0 && H <= 4096;
}

}  // namespace qwick::cuda
