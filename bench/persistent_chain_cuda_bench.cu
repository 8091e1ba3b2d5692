// Whether one persistent kernel would run the decode step's chain of 4-bit matrix-vector products faster
// than a launch each (issue 6's last lever; docs/gpu-notes.md, sessions 46 to 49: it would not). The
// chain: `layers` copies of a DeltaNet layer's five products at the model's shapes, each reading an
// earlier one through RMSNorm:
//   12352 × 2048   the input stack with z          (reads the down projections)
//    2048 × 4096   the output projection           (the input stack)
//     256 × 2048   the router                      (the output projection)
//    9216 × 2048   nine experts' gate|up (eight routed and the shared one, as one matrix; the output
//                  projection, as the MoE reads the layer's hidden state, but only after the router)
//    2304 × 4096   their down projections (one matrix of the same bytes as nine of 2048 × 512; gate|up)
// every matrix its own (1.41 GB at 40 layers: nothing is served from L2). Each row times the chain as a
// CUDA graph (median of 7 launches):
//   launches     the engine's decode GEMV (gemv_cuda.cu, int16 products), one launch a product, with
//                programmatic dependent launch, as the step runs them
//   persistent   one block an SM for the whole chain. Each block owns a fixed share of every product's
//                rows; those rows' codes, scales and biases stream through a ring of shared-memory slots
//                by bulk copies, requested in order as slots free up, so later products' weights arrive
//                while the block waits for the rest of the GPU. Between two products the blocks meet on
//                a counter (each adds itself, thread 0 of each polls), then every block stages the whole
//                input as the engine's GEMVs do (stage_norm, int16 chunks) and runs its rows (a warp a
//                row, chunk_code_dot_i16). The variants (Feed): how many slots and pieces in flight; the
//                experts' pieces held until the router's product is complete (routed, as routing would
//                have it; the top-k itself is not run); no weights in flight during a staging (quiet);
//                the weights on chip (the ring filled once: the floor of this design's own work); which
//                lanes poll for a piece; without products
//   loads        the same blocks, meetings and stagings with no ring: each warp's share of a product
//                loaded into its registers before the product's meeting (routed: the experts' only once
//                their router's product is complete), the next products' shares requested into L2 ahead
//                or not; without meetings (the values wrong): the stream, stagings and products alone
//                (session 49: 32.4 µs a layer against the launches' 30.3 on an H100, 29.9 without meetings)
//   ring alone   the persistent kernel's stream with no meetings, stagings or products; and the same
//                bytes by ordinary loads: what one block an SM streams either way (session 48: the ring
//                ~800 GB/s, the loads 2.4 TB/s)
// Each persistent variant that streams the weights is checked against the engine's GEMV run on that
// variant's own inputs, product by product (a fault shows where it is), and the chain against the
// launches' (the same int16 products summed in another order). Its marked run splits each product into
// the blocks' meeting, the staging and the rows. Exits 1 on a mismatch. Needs a CUDA GPU.
//   persistent_chain_cuda_bench [layers]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_buffer.h"
#include "graph_timing.h"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_launch.h"
#include "kernels/matmul/gemv_core.cuh"
#include "kernels/matmul/matmul_cuda.h"
#include "kernels/tensor_core.cuh"

namespace qwick::cuda {
namespace {

constexpr int kWarps = 16, kThreads = 32 * kWarps;
constexpr int kE = 32, kGroup = 64;   // 4-bit codes a 16-byte chunk; codes a scale
constexpr int kSlotBytes = 18 << 10;  // a piece: 16 KB of codes, their scales and biases
constexpr int kMaxSlots = 11, kMaxPhases = 200, kMaxCols = 4096;
constexpr int kMaxChunks = kMaxCols / kE, kMaxCpl = kMaxChunks / 32;  // chunks a lane of a row
constexpr float kEps = 1e-6f;

// One product of the chain: y = W · RMSNorm(x) (gamma the norm's weight), W 4-bit affine in groups of
// kGroup, rows packed back to back (DeviceMatrix's layout).
struct Phase {
  const uint8_t* codes;
  const uint16_t* scales;
  const uint16_t* biases;
  const float* x;
  float* y;
  int rows, cols, piece_rows;  // piece_rows: rows a ring slot holds (16 KB of codes)
  // Its weights may be requested only once product `after` is complete (-1: at any time): the routed
  // experts' matrices are known only once the router's logits are.
  int after;
};

// How the persistent kernel feeds its ring: one variant a row of the table.
struct Feed {
  int slots;         // ring slots in use, 1 .. kMaxSlots
  int in_flight;     // pieces requested and not yet landed, at most (1 .. slots)
  bool routed;       // the experts' pieces requested only once their router's product is complete
  bool quiet;        // a product's pieces requested only once the block has staged its input, so that no
                     // weights are in flight during a staging
  bool stream;       // false: the ring is filled once and never again, and every product reads whatever its
                     // slots hold: the weights on chip (the values are wrong)
  bool meet = true;  // false: no meetings and no stagings, each block streams its pieces alone (no products)
  bool lane0_polls = false;  // a warp waiting for a piece: lane 0 polls its mbarrier (32 ns apart), not
                             // every lane back to back
};

// Block b's share of a product's rows: [rows · b / G, rows · (b + 1) / G).
__device__ __forceinline__ int share_begin(int rows, int b) {
  return static_cast<int>(int64_t{rows} * b / gridDim.x);
}
// Block b's share of product q's weights: its codes, scales and biases, each one range of bytes (16-byte
// aligned at the chain's shapes).
struct ShareRanges {
  const uint8_t* at[3];
  uint32_t bytes[3];
};
__device__ __forceinline__ ShareRanges share_ranges(const Phase& q, int b) {
  const int s0 = share_begin(q.rows, b), n = share_begin(q.rows, b + 1) - s0, groups = q.cols / kGroup;
  const uint32_t scale_bytes = static_cast<uint32_t>(n * groups * 2);
  return {
      {q.codes + int64_t{s0} * q.cols / 2, reinterpret_cast<const uint8_t*>(q.scales + int64_t{s0} * groups),
       reinterpret_cast<const uint8_t*>(q.biases + int64_t{s0} * groups)},
      {static_cast<uint32_t>(n * q.cols / 2), scale_bytes, scale_bytes}};
}
// Whether an mbarrier's phase of this parity has completed (acquire order: its bulk copies' bytes are
// visible to the caller), without waiting.
__device__ __forceinline__ bool mbarrier_done(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
// Whether product q's weights are known once every product before `complete` is: an expert's (routed)
// only once its router's product is.
__device__ __forceinline__ bool weights_known(const Phase& q, bool routed, int complete) {
  return !routed || q.after < 0 || q.after < complete;
}
// marks (or null) [gridDim.x][count][3]: the time (ns) of this block's step k of product p.
__device__ __forceinline__ void mark_time(unsigned long long* marks, int count, int p, int k) {
  if (!marks) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  marks[(int64_t{blockIdx.x} * count + p) * 3 + k] = t;
}
// Staged input chunk c (stage_norm's int16 form): its four words and (d, Σx).
__device__ __forceinline__ void staged_chunk(const uint8_t* xs, int c, uint4 (&xq)[4], float2& xd) {
  const uint4* chunk = reinterpret_cast<const uint4*>(xs + c * kI16ChunkBytes);
#pragma unroll
  for (int k = 0; k < 4; ++k) xq[k] = chunk[k];
  xd = *reinterpret_cast<const float2*>(chunk + 4);
}
// One chunk's share of a row's product: Σ (q·scale + bias)·x over its 32 codes, as the engine's dot_rows
// computes it from the int16 form.
__device__ __forceinline__ float affine_chunk_dot(const uint4& w, const uint4 (&xq)[4], const float2& xd,
                                                  uint16_t scale, uint16_t bias) {
  const float dot = xd.x * static_cast<float>(chunk_code_dot_i16(w, xq));
  return bf16_to_f32(scale) * dot + bf16_to_f32(bias) * xd.y;
}

// The chain: `count` products; piece_base [gridDim.x][count + 1]: block b's first piece of each product
// (its pieces numbered through the chain); done [count]: blocks finished with each product (zero at the
// start). kProducts false: the weights still stream through the ring, unread. marks (or null):
// [gridDim.x][count][3] the times (ns) at which thread 0 saw the product before complete, had staged the
// input and saw the block's rows done.
//
// The ring: piece g goes to slot g % slots once piece g - slots is computed, in order, with at most
// feed.in_flight pieces requested and not landed (the cap tests whether requests beyond what keeps DRAM
// busy delay the input's loads: session 47 found they do not). Whoever finishes a row, waits for a piece
// or waits for the product before runs pump(), which retires landed pieces and requests what it may (one
// thread at a time).
template <bool kProducts>
__global__ void __launch_bounds__(kThreads, 1)
    persistent_chain_kernel(const Phase* phases_in, int count, const int* piece_base, Feed feed,
                            const float* gamma, unsigned long long* done, unsigned long long* marks) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t full[kMaxSlots];
  __shared__ int freed[kMaxSlots];      // rows of the slot's piece computed so far
  __shared__ int slot_free[kMaxSlots];  // its piece computed: the slot may take the piece `slots` on
  __shared__ int next_piece, oldest;    // the next piece to request; the oldest not seen landed
  __shared__ int current;               // the product being computed: every one before it is complete
  __shared__ int staged;                // the last product whose input the block has staged
  __shared__ int pump_lock;
  __shared__ int first[kMaxPhases + 1];
  __shared__ Phase phases[kMaxPhases];
  __shared__ __align__(16) uint8_t xs[kMaxChunks * kI16ChunkBytes];  // the staged input, int16 chunks
  __shared__ float scratch[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, b = blockIdx.x, slots = feed.slots;
  for (int p = threadIdx.x; p <= count; p += kThreads) first[p] = piece_base[b * (count + 1) + p];
  for (int p = threadIdx.x; p < count; p += kThreads) phases[p] = phases_in[p];
  __syncthreads();
  const int total = first[count];
  auto mark = [&](int p, int k) { mark_time(marks, count, p, k); };

  // The product holding piece g: the last with first[p] <= g.
  auto product_of = [&](int g) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (first[mid] <= g)
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  };
  // Piece g's bulk copies into slot g % slots.
  auto issue = [&](int g) {
    const int p = product_of(g);
    const Phase& ph = phases[p];
    const int row = share_begin(ph.rows, b) + (g - first[p]) * ph.piece_rows,
              n = min(ph.piece_rows, share_begin(ph.rows, b + 1) - row), groups = ph.cols / kGroup;
    const int s = g % slots;
    const uint32_t bar = smem_addr(&full[s]), dst = smem_addr(ring + s * kSlotBytes);
    const uint32_t code_bytes = static_cast<uint32_t>(n * ph.cols / 2),
                   scale_bytes = static_cast<uint32_t>(n * groups * 2),
                   scale_at = static_cast<uint32_t>(ph.piece_rows * ph.cols / 2),
                   bias_at = scale_at + static_cast<uint32_t>(ph.piece_rows * groups * 2);
    mbarrier_expect_bytes(bar, code_bytes + 2 * scale_bytes);
    bulk_copy_to_shared(dst, ph.codes + int64_t{row} * ph.cols / 2, code_bytes, bar);
    bulk_copy_to_shared(dst + scale_at, ph.scales + int64_t{row} * groups, scale_bytes, bar);
    bulk_copy_to_shared(dst + bias_at, ph.biases + int64_t{row} * groups, scale_bytes, bar);
  };
  auto landed = [&](int g) { return mbarrier_done(smem_addr(&full[g % slots]), (g / slots) & 1); };
  // Whether piece g may be requested now: its weights known (routed: its router's product complete) and
  // (quiet) its product's input staged.
  auto may_request = [&](int g) {
    const int p = product_of(g);
    return weights_known(phases[p], feed.routed, *static_cast<volatile int*>(&current)) &&
           (!feed.quiet || p <= *static_cast<volatile int*>(&staged));
  };
  auto pump = [&] {
    if (atomicCAS(&pump_lock, 0, 1) != 0) return;  // another thread is at it
    volatile int* is_free = slot_free;
    int next = next_piece, old = oldest;
    while (old < next && landed(old)) ++old;
    while (next < total && next - old < feed.in_flight && is_free[next % slots] && may_request(next)) {
      is_free[next % slots] = 0;
      issue(next++);
    }
    next_piece = next, oldest = old;
    __threadfence_block();
    atomicExch(&pump_lock, 0);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) mbarrier_init(smem_addr(&full[s]), 1), freed[s] = 0, slot_free[s] = 1;
    fence_mbarrier_init();
    current = 0, staged = -1, pump_lock = 0, oldest = 0;
    if (feed.stream) {
      next_piece = 0;
      pump();
    } else {
      for (int g = 0; g < slots && g < total; ++g) issue(g);  // once, whatever the piece
      next_piece = total;
    }
  }
  __syncthreads();

  for (int p = 0; p < count; ++p) {
    const Phase& ph = phases[p];
    if (threadIdx.x == 0) {
      if (p > 0 && feed.meet)  // every block's rows of the product before
        while (load_acquire(done + p - 1) < gridDim.x) pump();
      mark(p, 0);
      *static_cast<volatile int*>(&current) = p;
      pump();  // (routed: the pieces that waited for that product)
    }
    __syncthreads();
    // The input as the engine's decode GEMVs stage it (its barriers also publish the staging).
    const float factor = feed.meet ? stage_norm<kE, 2, true, Act::kI16>(ph.x, gamma, kEps, ph.cols,
                                                                        reinterpret_cast<float*>(xs), scratch)
                                   : 0.0f;
    if (threadIdx.x == 0) {
      mark(p, 1);
      *static_cast<volatile int*>(&staged) = p;
      pump();
    }
    // Lane l computes chunks l, l + 32, ... of each of its warp's rows.
    const int cpl = ph.cols / kE / 32;
    uint4 xq[kMaxCpl][4];
    float2 xd[kMaxCpl];
#pragma unroll
    for (int u = 0; u < kMaxCpl; ++u)
      if (u < cpl) staged_chunk(xs, u * 32 + lane, xq[u], xd[u]);
    const int r0 = share_begin(ph.rows, b), n = share_begin(ph.rows, b + 1) - r0, groups = ph.cols / kGroup;
    for (int j = warp; j < n; j += kWarps) {
      const int k = j / ph.piece_rows, g = first[p] + k, s = g % slots, i = j - k * ph.piece_rows;
      if (feed.stream || g < slots) {  // (on chip, only the first fill is waited for)
        if (feed.lane0_polls) {
          if (lane == 0)
            while (!landed(g)) pump(), __nanosleep(32);
          __syncwarp();
          landed(g);  // (every lane's own acquire of the piece's bytes: it has landed)
        } else {
          while (!landed(g))
            if (lane == 0) pump();
        }
      }
      float acc = 0.0f;
      if constexpr (kProducts) {
        const uint8_t* slot = ring + s * kSlotBytes;
        const uint4* w = reinterpret_cast<const uint4*>(slot + i * ph.cols / 2);
        const uint16_t* sc =
            reinterpret_cast<const uint16_t*>(slot + ph.piece_rows * ph.cols / 2) + i * groups;
        const uint16_t* bi = sc + ph.piece_rows * groups;
#pragma unroll
        for (int u = 0; u < kMaxCpl; ++u)
          if (u < cpl) {
            const int c = u * 32 + lane, grp = c * kE / kGroup;
            acc += affine_chunk_dot(w[c], xq[u], xd[u], sc[grp], bi[grp]);
          }
      }
      acc = warp_sum(acc);  // (its shuffles also end the warp's reads of the slot)
      if (lane == 0) {
        if constexpr (kProducts) ph.y[r0 + j] = factor * acc;
        // The last of the piece's rows frees the slot for the piece `slots` on.
        if (atomicAdd(&freed[s], 1) == min(ph.piece_rows, n - k * ph.piece_rows) - 1) {
          freed[s] = 0;
          __threadfence_block();
          *static_cast<volatile int*>(&slot_free[s]) = 1;
        }
        pump();
      }
    }
    __syncthreads();  // the block's rows written (and its staging read)
    if (threadIdx.x == 0) add_release(done + p, 1), mark(p, 2);
  }
}

// The persistent chain without a ring: each warp's share of a product's weights is loaded into its
// registers (kLoadChunks 16-byte chunks a lane, a round of rows), as the engine's GEMVs load theirs.
// A product's first round is requested before its meeting (unless routed holds it back), so its DRAM
// traffic overlaps the wait for the other blocks and the staging, as a launch's loads overlap its
// wait for the kernel before. Lookahead: the block's share of the next products requested into L2 as
// well. A warp counts itself done with a product as soon as its rows are written, so that it requests
// the next product's weights without waiting for the block's other warps.
constexpr int kLoadChunks = 12;  // the model's shares at 132 blocks: one round (6 rows of 2048 columns)

struct Lookahead {
  int products;      // products ahead of the one computed whose shares are requested into L2 (0: none)
  bool bulk;         // by bulk prefetches from thread 0; false: a 128-byte line a thread
  bool routed;       // as Feed's: an expert's weights requested only once its router's product is complete
  bool meet = true;  // false: no meetings, each block's products from whatever its inputs hold (wrong values)
};

// Row i of round `round` of a warp's rows (rows of kRows a round, the block's share from r0, a warp
// every kWarps rows).
__device__ __forceinline__ int round_row(int r0, int warp, int round, int rows_a_round, int i) {
  return r0 + warp + kWarps * (round * rows_a_round + i);
}
// Round `round` of the warp's rows of ph (round_row's, i < R = kLoadChunks / kCpl, below r1): lane's
// chunks u·32 + lane of each row (kCpl = columns / 1024), with each chunk's scale and bias packed in a
// word.
template <int kCpl>
__device__ __forceinline__ void load_round(const Phase& ph, int r0, int r1, int round, int warp, int lane,
                                           uint4 (&w)[kLoadChunks], uint32_t (&sb)[kLoadChunks]) {
  constexpr int kRows = kLoadChunks / kCpl;
  const int groups = ph.cols / kGroup;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int row = round_row(r0, warp, round, kRows, i);
    if (row < r1)
#pragma unroll
      for (int u = 0; u < kCpl; ++u) {
        const int c = u * 32 + lane;
        const int64_t at = int64_t{row} * groups + c * kE / kGroup;
        w[i * kCpl + u] = load_weights(ph.codes + int64_t{row} * ph.cols / 2 + c * 16);
        sb[i * kCpl + u] = uint32_t{__ldg(ph.scales + at)} | uint32_t{__ldg(ph.biases + at)} << 16;
      }
  }
}
// The products of a round that load_round requested, against the staged input xs; lane 0 writes them.
template <int kCpl>
__device__ __forceinline__ void compute_round(const Phase& ph, int r0, int r1, int round, int warp, int lane,
                                              const uint8_t* xs, float factor, const uint4 (&w)[kLoadChunks],
                                              const uint32_t (&sb)[kLoadChunks]) {
  constexpr int kRows = kLoadChunks / kCpl;
  float acc[kRows] = {};
#pragma unroll
  for (int u = 0; u < kCpl; ++u) {  // each of the lane's input chunks read once for all its rows
    uint4 xq[4];
    float2 xd;
    staged_chunk(xs, u * 32 + lane, xq, xd);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const uint32_t s = sb[i * kCpl + u];
      acc[i] +=
          affine_chunk_dot(w[i * kCpl + u], xq, xd, static_cast<uint16_t>(s), static_cast<uint16_t>(s >> 16));
    }
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int row = round_row(r0, warp, round, kRows, i);
    if (row >= r1) break;
    const float sum = warp_sum(acc[i]);
    if (lane == 0) ph.y[row] = factor * sum;
  }
}

// The chain (as persistent_chain_kernel's: done, marks) with the weights loaded into registers.
__global__ void __launch_bounds__(kThreads, 1)
    persistent_loads_kernel(const Phase* phases_in, int count, Lookahead look, const float* gamma,
                            unsigned long long* done, unsigned long long* marks) {
  __shared__ Phase phases[kMaxPhases];
  __shared__ __align__(16) uint8_t xs[kMaxChunks * kI16ChunkBytes];
  __shared__ float scratch[32];
  __shared__ int warps_done;  // warps done with the product
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, b = blockIdx.x;
  for (int p = threadIdx.x; p < count; p += kThreads) phases[p] = phases_in[p];
  if (threadIdx.x == 0) warps_done = 0;
  __syncthreads();
  auto mark = [&](int p, int k) { mark_time(marks, count, p, k); };
  // The block's share of products p + 1 .. p + look.products into L2, in order, each once.
  int ahead = 0;  // the next product to request into L2
  auto look_ahead = [&](int p, int complete) {
    for (ahead = max(ahead, p + 1); ahead <= p + look.products && ahead < count; ++ahead) {
      const Phase& q = phases[ahead];
      if (!weights_known(q, look.routed, complete)) return;
      const ShareRanges r = share_ranges(q, b);
      for (int k = 0; k < 3; ++k)
        if (look.bulk) {
          if (threadIdx.x == 0 && r.bytes[k] > 0)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(r.at[k]), "r"(r.bytes[k])
                         : "memory");
        } else {
          for (uint32_t at = 128 * threadIdx.x; at < r.bytes[k]; at += 128 * kThreads)
            prefetch_l2(r.at[k] + at);
        }
    }
  };

  uint4 w[kLoadChunks];
  uint32_t sb[kLoadChunks];
  for (int p = 0; p < count; ++p) {
    const Phase& ph = phases[p];
    const int r0 = share_begin(ph.rows, b), r1 = share_begin(ph.rows, b + 1);
    const int cpl = ph.cols / (32 * kE);  // a lane's chunks of a row: 4 or (the chain's 2048 columns) 2
    const bool wide = cpl == 4;
    auto load = [&](int round) {
      if (wide)
        load_round<4>(ph, r0, r1, round, warp, lane, w, sb);
      else
        load_round<2>(ph, r0, r1, round, warp, lane, w, sb);
    };
    // Before the meeting only the products before p - 1 are known complete.
    const bool early = weights_known(ph, look.routed, p - 1);
    if (early) load(0);
    look_ahead(p, p - 1);
    if (threadIdx.x == 0) {
      if (p > 0 && look.meet)  // every block's rows of the product before
        while (load_acquire(done + p - 1) < gridDim.x) {
        }
      mark(p, 0);
    }
    __syncthreads();
    if (!early) load(0);
    look_ahead(p, p);
    const float factor =
        stage_norm<kE, 2, true, Act::kI16>(ph.x, gamma, kEps, ph.cols, reinterpret_cast<float*>(xs), scratch);
    if (threadIdx.x == 0) mark(p, 1);
    const int per_round = kLoadChunks / cpl, mine = (r1 - r0 - warp + kWarps - 1) / kWarps;
    for (int round = 0; round * per_round < mine; ++round) {
      if (round > 0) load(round);
      if (wide)
        compute_round<4>(ph, r0, r1, round, warp, lane, xs, factor, w, sb);
      else
        compute_round<2>(ph, r0, r1, round, warp, lane, xs, factor, w, sb);
    }
    // The warp's rows written; the block's last warp publishes them all. Each warp's fence orders its
    // writes before its count, and the last warp's fence after seeing the count orders them before its
    // release (a last-block reduction's pattern, among warps).
    if (lane == 0) {
      __threadfence();
      if (atomicAdd(&warps_done, 1) == kWarps - 1) {
        __threadfence();
        warps_done = 0;
        add_release(done + p, 1);
        mark(p, 2);
      }
    }
  }
}

// The same bytes as the ring streams (each block its share of every product's codes, scales and
// biases) by ordinary 16-byte loads, four a thread in flight: what one block an SM reaches without bulk
// copies.
__global__ void __launch_bounds__(kThreads, 1)
    load_stream_kernel(const Phase* phases, int count, uint32_t* sink) {
  uint32_t acc = 0;
  for (int p = 0; p < count; ++p) {
    const ShareRanges r = share_ranges(phases[p], blockIdx.x);
    for (int k = 0; k < 3; ++k) {
      const uint4* v = reinterpret_cast<const uint4*>(r.at[k]);
      const int n = static_cast<int>(r.bytes[k] / 16);
      for (int i = threadIdx.x; i < n; i += 4 * kThreads) {
        uint4 w[4];
#pragma unroll
        for (int u = 0; u < 4; ++u)
          w[u] = i + u * kThreads < n ? load_weights(v + i + u * kThreads) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 4; ++u) acc ^= w[u].x ^ w[u].y ^ w[u].z ^ w[u].w;
      }
    }
  }
  if (acc == 0x9E3779B9u) *sink = acc;  // (never, in practice: keeps the loads)
}

// Device memory filled with random bits (codes), or bf16 values (scales in [lo, hi)).
__device__ __forceinline__ uint32_t mix(uint64_t i, uint32_t seed) {
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t{seed} << 32);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return static_cast<uint32_t>(h);
}
__global__ void fill_bits(uint32_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = mix(i, seed);
}
__global__ void fill_bf16(uint16_t* p, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = f32_to_bf16(lo + (hi - lo) * static_cast<float>(mix(i, seed) >> 8) * (1.0f / (1 << 24)));
}
__global__ void fill_f32(float* p, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = lo + (hi - lo) * static_cast<float>(mix(i, seed) >> 8) * (1.0f / (1 << 24));
}

}  // namespace
}  // namespace qwick::cuda

int main(int argc, char** argv) {
  using namespace qwick;
  using namespace qwick::cuda;
  const int layers = argc > 1 ? std::atoi(argv[1]) : 40;
  try {
    struct Shape {
      int rows, cols;
      bool routed;  // requested only once the layer's router product is complete
      int back;     // its input: the output of the product this many before it
    };
    constexpr int kRouter = 2;  // the router's product in a layer
    const Shape layer[] = {{12352, 2048, false, 1},
                           {2048, 4096, false, 1},
                           {256, 2048, false, 1},
                           {9216, 2048, true, 2},
                           {2304, 4096, true, 1}};
    const int per_layer = static_cast<int>(std::size(layer)), count = per_layer * layers;
    if (layers < 1 || count > kMaxPhases) {
      std::fprintf(stderr, "persistent_chain_cuda_bench: layers must be 1..%d\n", kMaxPhases / per_layer);
      return 1;
    }
    const int blocks = multiprocessor_count();
    const double copy_gbps = probe_cuda_device().copy_gbps;

    // The weights, one allocation a product; the activations: the chain's input, then each product's output
    // (one set for the launches, one for the persistent kernel).
    constexpr int kMaxRows = 12352;
    std::vector<DeviceBuffer> weights;
    std::vector<DeviceMatrix> mats;
    double bytes = 0;
    for (int p = 0; p < count; ++p) {
      const Shape sh = layer[p % per_layer];
      const size_t code_bytes = size_t(sh.rows) * sh.cols / 2,
                   scale_count = size_t(sh.rows) * sh.cols / kGroup;
      DeviceBuffer& buf = weights.emplace_back(code_bytes + 4 * scale_count);
      DeviceMatrix m;
      m.format = WeightFormat::kAffine4;
      m.group_size = kGroup;
      m.rows = sh.rows;
      m.cols = sh.cols;
      m.data = buf.data();
      m.row_bytes = sh.cols / 2;
      m.scales = reinterpret_cast<const uint16_t*>(buf.data() + code_bytes);
      m.biases = m.scales + scale_count;
      fill_bits<<<1024, 256>>>(reinterpret_cast<uint32_t*>(buf.data()), int64_t(code_bytes / 4), 3u * p);
      fill_bf16<<<256, 256>>>(const_cast<uint16_t*>(m.scales), int64_t(scale_count), 3u * p + 1, 0.01f,
                              0.02f);
      fill_bf16<<<256, 256>>>(const_cast<uint16_t*>(m.biases), int64_t(scale_count), 3u * p + 2, -0.12f,
                              -0.10f);
      mats.push_back(m);
      bytes += static_cast<double>(buf.size());
    }
    DeviceBuffer x0(kMaxCols * sizeof(float)), gamma(kMaxCols * sizeof(float));
    fill_f32<<<16, 256>>>(reinterpret_cast<float*>(x0.data()), kMaxCols, 7, -1.0f, 1.0f);
    fill_f32<<<16, 256>>>(reinterpret_cast<float*>(gamma.data()), kMaxCols, 8, 0.5f, 1.5f);
    check(cudaGetLastError(), "fill");
    DeviceBuffer y_launch(size_t(count) * kMaxRows * sizeof(float)), y_persist(y_launch.size());
    auto y_of = [&](const DeviceBuffer& y, int p) {
      return reinterpret_cast<float*>(y.data()) + size_t(p) * kMaxRows;
    };
    auto x_of = [&](const DeviceBuffer& y, int p) {
      const int from = p - layer[p % per_layer].back;
      return from < 0 ? reinterpret_cast<const float*>(x0.data()) : y_of(y, from);
    };
    const float* gamma_f = reinterpret_cast<const float*>(gamma.data());

    // The persistent kernel's tables: its products, each block's first piece of each.
    std::vector<Phase> phases(count);
    std::vector<int> piece_base(size_t(blocks) * (count + 1));
    for (int p = 0; p < count; ++p) {
      const DeviceMatrix& m = mats[p];
      phases[p] = Phase{m.data,
                        m.scales,
                        m.biases,
                        x_of(y_persist, p),
                        y_of(y_persist, p),
                        int(m.rows),
                        int(m.cols),
                        static_cast<int>((16 << 10) / m.row_bytes),
                        layer[p % per_layer].routed ? p - p % per_layer + kRouter : -1};
    }
    for (int b = 0; b < blocks; ++b) {
      int g = 0;
      for (int p = 0; p < count; ++p) {
        piece_base[size_t(b) * (count + 1) + p] = g;
        const int64_t rows =
            int64_t(phases[p].rows) * (b + 1) / blocks - int64_t(phases[p].rows) * b / blocks;
        g += static_cast<int>((rows + phases[p].piece_rows - 1) / phases[p].piece_rows);
      }
      piece_base[size_t(b) * (count + 1) + count] = g;
    }
    DeviceBuffer phases_d(phases.size() * sizeof(Phase)), base_d(piece_base.size() * sizeof(int)),
        done(size_t(count) * sizeof(unsigned long long));
    check(cudaMemcpy(phases_d.data(), phases.data(), phases_d.size(), cudaMemcpyHostToDevice), "upload");
    check(cudaMemcpy(base_d.data(), piece_base.data(), base_d.size(), cudaMemcpyHostToDevice), "upload");
    check(cudaDeviceSynchronize(), "fill");

    const size_t ring_bytes = size_t(kMaxSlots) * kSlotBytes;
    // Every block must be resident at once (the blocks wait for each other).
    for (auto kernel : {persistent_chain_kernel<true>, persistent_chain_kernel<false>})
      check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(ring_bytes)),
            "shared memory limit");
    auto fits = [&](const void* kernel, size_t smem) {
      int per_sm = 0;
      check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem), "occupancy");
      return per_sm >= 1;
    };
    if (!fits(reinterpret_cast<const void*>(persistent_chain_kernel<true>), ring_bytes) ||
        !fits(reinterpret_cast<const void*>(persistent_chain_kernel<false>), ring_bytes) ||
        !fits(reinterpret_cast<const void*>(persistent_loads_kernel), 0)) {
      std::fprintf(stderr, "persistent_chain_cuda_bench: a block does not fit an SM\n");
      return 1;
    }

    // The engine's GEMV a launch a product: product p reads its input from `in` (x_of) and writes `out`'s
    // output p (in = out: the chain; in = the persistent kernel's outputs: each of its products again).
    auto gemvs = [&](cudaStream_t stream, const DeviceBuffer& in, const DeviceBuffer& out) {
      for (int p = 0; p < count; ++p) {
        GemvArgs a;
        a.single = mats[p];
        a.format = WeightFormat::kAffine4;
        a.max_rows = mats[p].rows;
        a.max_cols = mats[p].cols;
        a.x = x_of(in, p);
        a.y = y_of(out, p);
        a.norm_weight = gamma_f;
        a.eps = kEps;
        a.i16 = true;
        a.overlap = true;
        gemv(a, stream);
      }
    };
    // A persistent variant: its launch (marks: null, or where its kernel marks its times), and whether its
    // outputs are the products (checked).
    struct Variant {
      std::string name;
      bool checked;
      std::function<void(cudaStream_t, unsigned long long*)> launch;
    };
    auto meetings_from_zero = [&](cudaStream_t stream) {
      check(cudaMemsetAsync(done.data(), 0, done.size(), stream), "memset");
    };
    auto ring = [&](const char* name, bool products, Feed feed) {
      return Variant{
          name, products && feed.stream, [&, products, feed](cudaStream_t stream, unsigned long long* marks) {
            meetings_from_zero(stream);
            launch_kernel(products ? persistent_chain_kernel<true> : persistent_chain_kernel<false>,
                          dim3(blocks), dim3(kThreads), ring_bytes, stream, false, "persistent chain",
                          reinterpret_cast<const Phase*>(phases_d.data()), count,
                          reinterpret_cast<const int*>(base_d.data()), feed, gamma_f,
                          reinterpret_cast<unsigned long long*>(done.data()), marks);
          }};
    };
    auto loads = [&](const char* name, Lookahead look) {
      return Variant{name, look.meet, [&, look](cudaStream_t stream, unsigned long long* marks) {
                       meetings_from_zero(stream);
                       launch_kernel(persistent_loads_kernel, dim3(blocks), dim3(kThreads), 0, stream, false,
                                     "persistent loads", reinterpret_cast<const Phase*>(phases_d.data()),
                                     count, look, gamma_f, reinterpret_cast<unsigned long long*>(done.data()),
                                     marks);
                     }};
    };

    std::printf(
        "%d layers of %d products (%.2f GB), %d blocks; copy bandwidth %.0f GB/s; median of 7 graph "
        "launches\n",
        layers, per_layer, bytes / 1e9, blocks, copy_gbps);
    std::printf("%-40s %10s %12s %8s %10s\n", "chain", "us", "us a layer", "GB/s", "% of copy");
    auto row = [&](const char* name, double us) {
      std::printf("%-40s %10.1f %12.2f %8.0f %10.1f\n", name, us, us / layers, bytes / us / 1e3,
                  100.0 * bytes / us / 1e3 / copy_gbps);
    };
    row("byte floor", bytes / copy_gbps / 1e3);
    row("launches (engine GEMV)",
        graph_us_per_call(7, 1, [&](cudaStream_t s) { gemvs(s, y_launch, y_launch); }));
    const Variant variants[] = {
        ring("persistent, 11 slots", true, {kMaxSlots, kMaxSlots, false, false, true}),
        ring("persistent, 11 slots, 4 in flight", true, {kMaxSlots, 4, false, false, true}),
        ring("persistent, 11 slots, 2 in flight", true, {kMaxSlots, 2, false, false, true}),
        ring("persistent, 11 slots, 1 in flight", true, {kMaxSlots, 1, false, false, true}),
        ring("persistent, 11 slots, routed", true, {kMaxSlots, kMaxSlots, true, false, true}),
        ring("persistent, 11 slots, 2 in flight, routed", true, {kMaxSlots, 2, true, false, true}),
        ring("persistent, 2 slots", true, {2, 2, false, false, true}),
        ring("persistent, 11 slots, quiet staging", true, {kMaxSlots, kMaxSlots, false, true, true}),
        ring("persistent, 11 slots, lane 0 polls", true,
             {kMaxSlots, kMaxSlots, false, false, true, true, true}),
        ring("persistent, 2 in flight, lane 0 polls", true, {kMaxSlots, 2, false, false, true, true, true}),
        ring("persistent, 11 slots, no products", false, {kMaxSlots, kMaxSlots, false, false, true}),
        ring("persistent, 2 in flight, no products", false, {kMaxSlots, 2, false, false, true}),
        ring("persistent, weights on chip", true, {kMaxSlots, kMaxSlots, false, false, false}),
        ring("persistent, weights on chip, no products", false, {kMaxSlots, kMaxSlots, false, false, false}),
        loads("loads, requested before the meeting", {0, false, false}),
        loads("loads, 1 ahead into L2 (bulk)", {1, true, false}),
        loads("loads, 2 ahead into L2 (bulk)", {2, true, false}),
        loads("loads, 1 ahead into L2 (lines)", {1, false, false}),
        loads("loads, 2 ahead into L2 (lines)", {2, false, false}),
        loads("loads, routed", {0, false, true}),
        loads("loads, 2 ahead (bulk), routed", {2, true, true}),
        loads("loads, 2 ahead (lines), routed", {2, false, true}),
        loads("loads, no meetings", {0, false, false, false}),
        loads("loads, 2 ahead (lines), no meetings", {2, false, false, false}),
    };
    for (const Variant& v : variants)
      row(v.name.c_str(), graph_us_per_call(7, 1, [&](cudaStream_t s) { v.launch(s, nullptr); }));
    // The stream alone: no meetings, no stagings, no products.
    for (bool lane0 : {false, true})
      for (int k : {1, 2, 4, kMaxSlots}) {
        char name[64];
        std::snprintf(name, sizeof name, "ring alone, %d in flight%s", k, lane0 ? ", lane 0 polls" : "");
        Feed f{kMaxSlots, k, false, false, true};
        f.meet = false;
        f.lane0_polls = lane0;
        const Variant alone = ring(name, false, f);
        row(name, graph_us_per_call(7, 1, [&](cudaStream_t s) { alone.launch(s, nullptr); }));
      }
    {
      DeviceBuffer sink(sizeof(uint32_t));
      row("loads alone, 16 warps an SM", graph_us_per_call(7, 1, [&](cudaStream_t stream) {
            launch_kernel(load_stream_kernel, dim3(blocks), dim3(kThreads), 0, stream, false, "load stream",
                          reinterpret_cast<const Phase*>(phases_d.data()), count,
                          reinterpret_cast<uint32_t*>(sink.data()));
          }));
    }

    // Each variant once more, its times marked, and (if its outputs are products) checked: against the
    // engine's GEMV run on the variant's own inputs, product by product (so that a fault shows where it
    // is, not where the chain carries it), and against the chain of launches.
    DeviceBuffer marks_d(size_t(blocks) * count * 3 * sizeof(unsigned long long)), y_ref(y_launch.size());
    std::vector<unsigned long long> marks(marks_d.size() / sizeof(unsigned long long));
    std::vector<float> launched(y_launch.size() / 4), got(launched.size()), ref(launched.size());
    check(cudaMemcpy(launched.data(), y_launch.data(), y_launch.size(), cudaMemcpyDeviceToHost), "download");
    // max |a - b| / max |b| over product p's rows; row: where |a - b| is largest.
    auto rel_diff = [&](const std::vector<float>& a, const std::vector<float>& c, int p, int* row) {
      double diff = 0, scale = 0;
      for (int r = 0; r < phases[p].rows; ++r) {
        const size_t i = size_t(p) * kMaxRows + r;
        const double d = std::fabs(double(a[i]) - c[i]);
        if (!(d <= diff)) diff = d, *row = r;  // (NaN too)
        scale = std::max(scale, double(std::fabs(c[i])));
      }
      return diff / scale;
    };
    const char* names[] = {"input", "out proj", "router", "gate|up", "down"};
    std::printf("\nus a product, median over blocks and layers 2..%d\n%-40s %-9s %8s %8s %8s %8s\n", layers,
                "variant", "product", "meeting", "staging", "rows", "in all");
    bool ok = true;
    std::vector<std::string> checks;
    for (const Variant& v : variants) {
      cudaStream_t stream;
      check(cudaStreamCreate(&stream), "stream");
      // Outputs start as NaN: a product read before it is written shows.
      check(cudaMemsetAsync(y_persist.data(), 0xff, y_persist.size(), stream), "memset");
      v.launch(stream, reinterpret_cast<unsigned long long*>(marks_d.data()));
      if (v.checked) gemvs(stream, y_persist, y_ref);
      check(cudaStreamSynchronize(stream), "check run");
      cudaStreamDestroy(stream);
      check(cudaMemcpy(marks.data(), marks_d.data(), marks_d.size(), cudaMemcpyDeviceToHost), "download");
      for (int k = 0; k < per_layer; ++k) {
        std::vector<double> parts[4];
        for (int b = 0; b < blocks; ++b)
          for (int p = per_layer + k; p < count; p += per_layer) {
            const unsigned long long* m = &marks[(size_t(b) * count + p) * 3];
            const unsigned long long before = m[-1];  // the block's end of the product before
            const double t[4] = {double(m[0] - before), double(m[1] - m[0]), double(m[2] - m[1]),
                                 double(m[2] - before)};
            for (int i = 0; i < 4; ++i) parts[i].push_back(t[i] / 1e3);
          }
        std::printf("%-40s %-9s", k == 0 ? v.name.c_str() : "", names[k]);
        for (auto& t : parts) {
          std::nth_element(t.begin(), t.begin() + int64_t(t.size() / 2), t.end());
          std::printf(" %8.2f", t.empty() ? 0.0 : t[t.size() / 2]);
        }
        std::printf("\n");
      }
      if (!v.checked) continue;
      check(cudaMemcpy(got.data(), y_persist.data(), y_persist.size(), cudaMemcpyDeviceToHost), "download");
      check(cudaMemcpy(ref.data(), y_ref.data(), y_ref.size(), cudaMemcpyDeviceToHost), "download");
      double local = 0, chain = 0;
      int local_p = 0, local_row = 0, chain_p = 0, unused = 0;
      for (int p = 0; p < count; ++p) {
        int r = 0;
        const double d = rel_diff(got, ref, p, &r), c = rel_diff(got, launched, p, &unused);
        if (!(d <= local)) local = d, local_p = p, local_row = r;
        if (!(c <= chain)) chain = c, chain_p = p;
      }
      // The block that computed that row.
      const int rows = phases[local_p].rows;
      int owner = 0;
      while (owner + 1 < blocks && int64_t(rows) * (owner + 1) / blocks <= local_row) ++owner;
      const bool good = local < 1e-4;  // (false for NaN)
      ok = ok && good;
      char line[256];
      std::snprintf(line, sizeof line,
                    "%-40s each product %.2e (product %d, row %d: block %d)%s; chain %.2e "
                    "(product %d)",
                    v.name.c_str(), local, local_p, local_row, owner, good ? "" : "  MISMATCH", chain,
                    chain_p);
      checks.push_back(line);
    }
    std::printf(
        "\ncheck: persistent vs the engine's GEMV, worst max|diff| / max|y|; each product from the variant's "
        "own input, and the chain against the launches'\n");
    for (const std::string& line : checks) std::printf("%s\n", line.c_str());
    return ok ? 0 : 1;
  } catch (const std::exception& e) {  // check() throws
    std::fprintf(stderr, "persistent_chain_cuda_bench: %s\n", e.what());
    return 1;
  }
}
