// Gated DeltaNet on the GPU (model-spec.md §2.5), all f32, one kernel per stage:
//
//   deltanet_conv     causal depthwise conv + SiLU over n rows: a thread per (channel, run of 16
//                     rows), then the window state [K-1, C] written for the next chunk, so a chunk's
//                     rows do not wait on each other; that kernel can also L2-normalise q and k
//                     (norm_heads), which saves deltanet_prepare a pass over them. One row without
//                     norms (decode) takes one thread per channel, the window read and written back
//                     into place or into a second window (state_out)
//   deltanet_prepare  per row: q and k L2-normalised per key head in place (q also scaled by
//                     Dk^-1/2); beta = sigmoid(b), decay = exp(-exp(A_log) · softplus(a + dt_bias))
//   deltanet_scan     the recurrence token by token. The state [Hv, Dv, Dk] (row j of a head is
//                     the spec's column j, see deltanet.h) is split into 32-row slices, one block of
//                     4 warps each; a warp carries 8 rows in registers (Dk/32 values per lane) through
//                     all n tokens, prefetching the next token's q, k, v, beta and decay:
//                        u = decay·(S_j·k); S_j = decay·S_j + beta·(v_j - u)·k; o_j = S_j·q
//                     rows are independent, so no block-wide barrier is needed inside the loop.
// The gated output norm is gated_rms_norm_rows (norm_cuda.h).
//
// Tests: tests/cuda/deltanet_cuda_test.cpp (DeltaNet.*) against causal_conv_silu, l2_norm,
// deltanet_gates and deltanet_scan_head, across chunk boundaries and for hundreds of steps.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/matmul_cuda/matmul_cuda.h"

namespace qwick::cuda {

struct DeltaNetConvArgs {
  const float* in;  // pre-conv rows [n, ld_in], C channels
  int64_t ld_in;
  int64_t n, C;
  const float* w;  // [C, K]; tap K-1 multiplies the newest row
  int K;           // 2..4
  float* state;    // [K-1, C], oldest first: the window before the rows, and after them unless state_out
  float* out;      // [n, ld_out]
  int64_t ld_out;
  // When norm_heads > 0, channels [0, 2·norm_heads·norm_dim) are q heads then k heads of norm_dim
  // (32, 64 or 128) channels each, and the output has them L2-normalised per row and head, q also
  // scaled by norm_dim^-1/2: deltanet_prepare's norms (then run it with qk_normalised). Any n; the
  // rows are then always taken in runs.
  int norm_heads = 0, norm_dim = 0;
  // The pre-conv rows in bf16 (read instead of `in`, same ld_in): the prefill input projection's
  // output, which the conv then reads in half the bytes. Not for the decode step.
  const uint16_t* in_bf16 = nullptr;
  bool overlap = false;  // programmatic dependent launches (cuda_launch.h); not for the decode step
  // [K-1, C]: where the window after the rows goes instead of state (decode, which keeps two windows
  // and alternates, so that a step can be undone); null: state.
  float* state_out = nullptr;
};
void deltanet_conv(const DeltaNetConvArgs& a, cudaStream_t stream);
// Head sizes whose norms deltanet_conv can do (norm_dim).
constexpr bool deltanet_conv_norms(int dim) {
  return dim == 32 || dim == 64 || dim == 128;
}

struct DeltaNetPrepareArgs {
  float* qkv;  // post-conv rows [n, ld]: q (Hk·Dk) | k (Hk·Dk) | v
  int64_t ld;
  int64_t n;
  int Hk, Dk, Hv;
  const float* b;  // [n, ld_ba]
  const float* a;
  int64_t ld_ba;
  const float* a_neg;                // [Hv]: -exp(A_log)
  const float* dt_bias;              // [Hv]
  float* beta;                       // [n, Hv]
  float* decay;                      // [n, Hv]
  bool qk_normalised = false;        // deltanet_conv did the norms (norm_heads): the gates only
  const uint16_t* b_bf16 = nullptr;  // b and a in bf16, read instead of b and a (same ld_ba)
  const uint16_t* a_bf16 = nullptr;
  bool overlap = false;  // a programmatic dependent launch (cuda_launch.h)
};
void deltanet_prepare(const DeltaNetPrepareArgs& a, cudaStream_t stream);

struct DeltaNetScanArgs {
  const float* qkv;  // normalised rows [n, ld]: q | k | v; value head h reads key head h / (Hv / Hk)
  int64_t ld;
  const float* beta;   // [n, Hv]
  const float* decay;  // [n, Hv]
  int64_t n;
  int Hk, Hv, Dk, Dv;  // Dk in {32, 64, 128}, Dv a multiple of 32
  float* state;        // [Hv, Dv, Dk]: before the rows, and after them unless state_out
  float* out;          // [n, ld_out], value head h at h·Dv
  int64_t ld_out;
  bool overlap = false;  // programmatic dependent launches (cuda_launch.h), of the chunked scan too
  float* state_out =
      nullptr;  // [Hv, Dv, Dk]: the state after the rows instead of state (decode); null: state
};
void deltanet_scan(const DeltaNetScanArgs& a, cudaStream_t stream);

// Decode (one row): deltanet_conv, deltanet_prepare and deltanet_scan in one launch, with the scan's
// grid (a block per value head and 32 state rows); each block computes the conv, SiLU and L2 norms of
// its key head's q and k (as every block of that key head does) and of its own 32 value channels, and
// its head's gates. The three kernels' results, up to f32 rounding (the norms' sums). The step reads the
// window and the recurrent state from one pair of buffers and writes them to another (the backend
// alternates between two pairs): every block of a key head reads that head's window, so in place its
// blocks would have to count their reads before one of them moved the window on.
struct DeltaNetDecodeStepArgs {
  DeltaNetConvArgs conv;  // n = 1; out unused; state_out set and apart from state
  int Hk, Dk, Hv, Dv;     // as DeltaNetScanArgs
  const float* b;         // [Hv]
  const float* a;
  const float* a_neg;
  const float* dt_bias;
  const float* state;    // [Hv, Dv, Dk] before the step
  float* state_out;      // [Hv, Dv, Dk] after it (apart from state)
  float* out;            // [Hv · Dv]
  bool overlap = false;  // a programmatic dependent launch (launch_kernel)
  // Optional (z.rows > 0, where deltanet_decode_step_carries_z): the mixer's z projection, riding
  // along in blocks of its own, z_out = z · RMSNorm(z_x) (z_norm: the norm's weight, 1 + w; null: z_x
  // as it is). The step does not read z (the out projection does), and its 128 small blocks leave
  // most of the GPU idle; without z the input projection's stack is one wave of blocks, not 1.5.
  DeviceMatrix z = {};
  const float* z_x = nullptr;
  const float* z_norm = nullptr;
  float z_eps = 0.0f;
  float* z_out = nullptr;
  bool z_i16 = false;  // int16 activations into 4-bit z rows (GemvArgs::i16)
};
void deltanet_decode_step(const DeltaNetDecodeStepArgs& a, cudaStream_t stream);
// Whether the step's launch can carry the z projection: the model's shapes (Dk 128, conv kernel 4)
// and a weight format the GEMVs take, with f32 activations.
bool deltanet_decode_step_carries_z(int Dk, int conv_kernel, const DeviceMatrix& z);

}  // namespace qwick::cuda
