// The decode MoE in three kernels (contract in moe_cuda.h).
//
// router   blocks over the E router rows, then one block for the shared gate row, each staging
//          RMSNorm(x); each block counts itself in `counter` once its logits are written, and the block
//          that counts last runs route_one on them from L2, so routing costs no launch of its own (with
//          MoeDecodeArgs::sync the blocks count in sync[1] instead and the one-pass blocks route). The
//          shared expert's gate|up blocks (which need no routing) run in the same launch, on the SMs the
//          router leaves idle.
// gate_up  grid (row blocks, k): the routed experts' gate|up, one wave of blocks at the real shape
//          (with the shared expert too it was 288 blocks for 264 places, and the last 24 ran after
//          the rest); each block stages RMSNorm(x), a lane group owns two rows of the gate and the
//          same two of up.
// down     a block of k + 1 warps, warp j staging expert j's activation and reading its down rows (so
//          every expert's loads are in flight at once); the partial sums meet in shared memory and are
//          added to x in expert order.
// one pass gate_up and down as one launch where its blocks all fit the GPU (MoeDecodeArgs::sync): its
//          blocks stage their input while the router runs, and once every router block has counted
//          itself each block routes the logits itself (no last router block, no published routing); the
//          down rows' weights are requested while the gate|up rows finish; the shared expert's down rows
//          are spread over every warp but the one that polls for that wait, ahead of it.
// Test: tests/cuda/moe_cuda_test.cpp (Moe.DecodeMatchesCpu) against the CPU moe_forward.
#include <algorithm>

#include "kernels/cuda/cuda_launch.h"
#include "kernels/matmul_cuda/gemv_core.cuh"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/route_warp.cuh"

namespace qwick::cuda {
namespace {

// One router row per lane group (eight per block): the launch shares its register budget with the
// gate|up blocks, and two rows spilled there.
constexpr int kRouterRows = 1;
// Router chunks per lane in flight per row: its 8-bit rows of 2048 are 128 chunks, one round of
// loads at 4 (two rounds, one after the other, at 2).
constexpr int kRouterUnroll = 4;
constexpr int kWarps = 8;
constexpr int kRows = 4;  // rows per lane group (gate_up: two of gate, the same two of up)
constexpr int kUnroll = 2;
constexpr int kDownSteps = 2;  // row steps per down block, sharing the staged activations
// Warps of the down block (one per expert, k + 1): the bound keeps its registers within what 10 warps
// may hold. (Each of the SM's four schedulers owns a quarter of the register file, so a block of 9
// warps at 181 registers failed to launch although the block total fit.)
constexpr int kMaxDownWarps = 10;

// The down projections' input under each activation form: int16 stays f32 there. A warp stages each
// act row itself, after the wait for every gate|up block, and the int16 form's per-chunk maximum put
// shuffles into each of its rounds, for products of one chunk a lane (the one-pass kernel took 15.5 µs
// a layer against 13.8 with int16 down rows).
template <Act A>
constexpr Act kDownAct = A == Act::kI16 ? Act::kF32 : A;

// Shared memory per warp of the down kernel: the staged f32 input.
template <int E>
constexpr int64_t down_warp_floats(int64_t I) {
  return staged_floats<E>(I);
}

template <WeightFormat F>
constexpr int elems() {
  return ChunkTraits<F>::kElems;
}

// A gate|up block's input: RMSNorm(x) staged at xs in A's form; returns the norm's factor.
// kL2: x read past L1 (stage_norm).
template <WeightFormat F, Act A, bool kL2 = false>
__device__ __forceinline__ float stage_gate_up_input(const MoeDecodeArgs& a, float* xs) {
  constexpr int E = elems<F>();
  // One float4 at a time: a batch of two spilled (64 bytes at 128 registers).
  const float factor =
      stage_norm<E, 1, kL2, A>(a.x, a.norm_weight, a.eps, a.H, xs, xs + staged_floats<E>(a.H));
  __syncthreads();
  return factor;
}

// Block `block` of expert slot p's gate|up (p = k: the shared expert; `entry` its first matrix in
// a.experts): SwiGLU of its rows into act. `first` and `stage` as dot_rows's; `factor` (set by `stage`
// when first) scales the finished dots.
template <WeightFormat F, Act A, class Stage>
__device__ __forceinline__ void gate_up_rows(const MoeDecodeArgs& a, int sub, int p, int entry, int64_t block,
                                             float* xs, bool first, Stage&& stage, const float& factor) {
  constexpr int E = elems<F>();
  const DeviceMatrix gate = a.experts[entry], up = a.experts[entry + 1];
  const LaneGroups lanes = lane_groups(sub);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, group = lanes.group(lane),
            lane_g = lanes.index(lane);
  constexpr int kPairs = kRows / 2;
  const int64_t pairs_per_block = int64_t{kWarps} * lanes.per_warp() * kPairs;
  const int64_t row0 =
      block * pairs_per_block + static_cast<int64_t>(warp * lanes.per_warp() + group) * kPairs;
  WeightRow rows[kRows];
  const int64_t gate_groups = row_groups(gate), up_groups = row_groups(up);
#pragma unroll
  for (int r = 0; r < kPairs; ++r)
    rows[r] = weight_row(gate, gate_groups, row0 + r), rows[kPairs + r] = weight_row(up, up_groups, row0 + r);
  float acc[kRows];
  dot_rows<F, kRows, kUnroll, A>(rows, gate.cols / E, gate.group_size, sub, lane_g, xs, first, stage, acc);
  if (lane_g != 0) return;
  float* act = a.act + p * a.I;
#pragma unroll
  for (int r = 0; r < kPairs; ++r)
    if (row0 + r < gate.rows) act[row0 + r] = siluf_(factor * acc[r]) * (factor * acc[kPairs + r]);
}

// The same as a block of its own launch: `routed`, the expert comes from the router's ids, which the
// previous kernel writes; otherwise it is the shared expert, in the router's launch, which lets the next
// kernel start once it has waited when `trigger_after_wait` (MoeDecodeArgs::sync).
template <WeightFormat F, Act A>
__device__ __forceinline__ void gate_up_block(const MoeDecodeArgs& a, int sub, int p, int64_t block,
                                              bool routed, bool trigger_after_wait, float* xs) {
  if (routed) wait_for_previous_kernel();
  float factor = 1.0f;
  gate_up_rows<F, A>(
      a, sub, p, 3 * (p < a.k ? a.ids[p] : a.E), block, xs, true,
      [&] {
        if (!routed) {
          prefetch_to_l1(a.norm_weight, a.H);
          wait_for_previous_kernel();  // x comes from the previous kernel
        }
        if (trigger_after_wait) let_next_kernel_start();
        factor = stage_gate_up_input<F, A>(a, xs);
      },
      factor);
}

// Blocks [0, router_blocks): router rows; block router_blocks: the shared gate row; the rest: the
// shared expert's gate|up (RF: the router's format, F: the experts').
template <WeightFormat RF, WeightFormat F, Act A>
__global__ void __launch_bounds__(kWarps * 32, 2)
    router_kernel(const MoeDecodeArgs a, int sub, int router_blocks, int sub_experts) {
  constexpr int E = elems<RF>();
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);
  // The experts' one-pass kernel (a.sync) stages x before it waits for this launch: this launch lets it
  // start only once x is complete, i.e. after waiting for the kernel before.
  const bool trigger_after_wait = a.sync != nullptr;
  if (!trigger_after_wait) let_next_kernel_start();
  if (static_cast<int>(blockIdx.x) > router_blocks)
    return gate_up_block<F, A>(a, sub_experts, a.k, blockIdx.x - router_blocks - 1, false, trigger_after_wait,
                               xs);
  const bool shared_gate = static_cast<int>(blockIdx.x) == router_blocks;
  const DeviceMatrix m = a.route_table[shared_gate ? 1 : 0];
  const LaneGroups lanes = lane_groups(sub);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, group = lanes.group(lane),
            lane_g = lanes.index(lane);
  const int64_t rows_per_block = int64_t{kWarps} * lanes.per_warp() * kRouterRows;
  const int64_t block = shared_gate ? 0 : blockIdx.x;
  const int64_t row0 =
      block * rows_per_block + static_cast<int64_t>(warp * lanes.per_warp() + group) * kRouterRows;
  WeightRow rows[kRouterRows];
  weight_rows<kRouterRows>(m, row_groups(m), row0, rows);
  float factor = 1.0f;
  auto stage = [&] {
    prefetch_to_l1(a.norm_weight, a.H);
    wait_for_previous_kernel();
    if (trigger_after_wait) let_next_kernel_start();
    factor = stage_norm<E>(a.x, a.norm_weight, a.eps, a.H, xs, xs + staged_floats<E>(a.H));
    __syncthreads();
  };
  float acc[kRouterRows];
  dot_rows<RF, kRouterRows, kRouterUnroll>(rows, m.cols / E, m.group_size, sub, lane_g, xs, true, stage, acc);
  if (lane_g == 0) {
    float* out = a.logits + (shared_gate ? a.E : 0);
#pragma unroll
    for (int r = 0; r < kRouterRows; ++r)
      if (row0 + r < m.rows) out[row0 + r] = factor * acc[r];
  }
  __syncthreads();
  if (a.sync) {  // count the block (after the barrier, its release orders the block's logits before it)
    if (threadIdx.x == 0) add_release(a.sync + 1, 1);
    return;
  }
  // The last router block to get here sees every block's logits: count (thread 0's acquire-release add
  // orders the block's writes before it and the others' before this block's reads), and route from L2.
  __shared__ bool last;
  if (threadIdx.x == 0) last = add_acq_rel(a.counter, 1) == router_blocks;
  __syncthreads();
  if (!last) return;
  if (warp == 0) route_one<true>(a.logits, a.E, a.k, a.ids, a.weights);
  if (threadIdx.x == 0) *a.counter = 0;
}

template <WeightFormat F, Act A>
__global__ void __launch_bounds__(kWarps * 32, 2) gate_up_kernel(const MoeDecodeArgs a, int sub) {
  extern __shared__ float4 smem4[];
  let_next_kernel_start();
  gate_up_block<F, A>(a, sub, static_cast<int>(blockIdx.y), blockIdx.x, true, false,
                      reinterpret_cast<float*>(smem4));
}

// Expert slot t's down rows row0 .. row0 + R - 1 (those of the calling lane group), weighted by
// the slot's coefficient, into partial[0 .. R) (lane 0 of the group; a null partial: a lane group
// without rows, which still takes part in the warp's staging). `ids` and `weights`: the routing (the
// router's, or the one-pass block's own in shared memory). The warp's
// staged input is at xs in A's form; `stage` as dot_rows's, run once when `first`, fills it from act
// row t. U: chunks per lane in flight (each row's sum is the same for
// any U).
template <WeightFormat F, Act A, int U, int R = kRows, class Stage>
__device__ __forceinline__ void down_rows(const MoeDecodeArgs& a, const int32_t* ids, const float* weights,
                                          int sub, int lane_g, int t, int64_t row0, float* xs, bool first,
                                          Stage&& stage, float* partial) {
  constexpr int E = elems<F>();
  const DeviceMatrix m = a.experts[t < a.k ? 3 * ids[t] + 2 : 3 * a.E + 2];
  WeightRow rows[R];
  weight_rows<R>(m, row_groups(m), row0, rows);
  float acc[R];
  dot_rows<F, R, U, A>(rows, m.cols / E, m.group_size, sub, lane_g, xs, first, stage, acc);
  // (the shared gate's logit from L2: the router's launch wrote it while one_pass_kernel's blocks ran)
  const float coef = t < a.k ? weights[t] : sigmoidf_(__ldcg(a.logits + a.E));
  if (lane_g == 0 && partial) {
#pragma unroll
    for (int r = 0; r < R; ++r) partial[r] = coef * acc[r];
  }
}
// Warp-wide: act row t into the warp's staging at xs (kL2: past L1, as stage_plain).
template <WeightFormat F, Act A, bool kL2 = false>
__device__ __forceinline__ void stage_down_input(const MoeDecodeArgs& a, int t, float* xs) {
  constexpr int E = elems<F>();
  const int lane = threadIdx.x & 31;
  // The model's 512 values in one round of loads: this staging follows the wait for every gate|up
  // block, so each round is on the MoE's critical path (it was four, one at a time, when a batch of
  // two spilled).
  stage_plain<E, 4, kL2, A>(a.act + t * a.I, a.I, xs, lane, 32);
  __syncwarp();
}
// The block: x[row0 + i] = x_row(i) + Σ_t partial[t · rows + i] in slot order, for i < rows (after a
// barrier); x_row(i) returns x[row0 + i] (the one-pass kernel's thread i loaded it early).
template <class XRow>
__device__ __forceinline__ void add_partials(const MoeDecodeArgs& a, const float* partial, int64_t row0,
                                             int64_t rows, XRow&& x_row) {
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    const int64_t row = row0 + i;
    if (row >= a.H) break;
    float sum = 0.0f;
    for (int t = 0; t <= a.k; ++t) sum += partial[t * rows + i];
    a.x[row] = x_row(i) + sum;
  }
}

template <WeightFormat F, Act A>
__global__ void __launch_bounds__(kMaxDownWarps * 32) down_kernel(const MoeDecodeArgs a, int sub) {
  constexpr int E = elems<F>();
  extern __shared__ float4 smem4[];
  let_next_kernel_start();
  wait_for_previous_kernel();  // ids, weights, logits and act come from the two kernels before
  const LaneGroups lanes = lane_groups(sub);
  const int j = threadIdx.x >> 5, lane = threadIdx.x & 31, group = lanes.group(lane),
            lane_g = lanes.index(lane);
  const int64_t rows_per_step = int64_t{lanes.per_warp()} * kRows,
                rows_per_block = rows_per_step * kDownSteps;
  // Per warp: its expert's staged input; after all warps', the partial sums.
  float* xs = reinterpret_cast<float*>(smem4) + j * down_warp_floats<E>(a.I);
  float* partial = reinterpret_cast<float*>(smem4) + (a.k + 1) * down_warp_floats<E>(a.I);  // [k + 1][rows]
  for (int s = 0; s < kDownSteps; ++s) {
    const int64_t row_in_block = s * rows_per_step + int64_t{group} * kRows;
    down_rows<F, kDownAct<A>, kUnroll>(
        a, a.ids, a.weights, sub, lane_g, j, blockIdx.x * rows_per_block + row_in_block, xs, s == 0,
        [&] { stage_down_input<F, kDownAct<A>>(a, j, xs); }, partial + j * rows_per_block + row_in_block);
  }
  __syncthreads();
  const int64_t row0 = blockIdx.x * rows_per_block;
  add_partials(a, partial, row0, rows_per_block, [&](int64_t i) { return a.x[row0 + i]; });
}

// The routed experts' gate|up and every expert's down in one launch (MoeDecodeArgs::sync), so the down
// rows' weights are requested while the gate|up blocks finish, and no launch separates the two:
//   1. the block stages RMSNorm(x) before anything else: x is complete (the router's launch lets this
//      one start only once it has waited for the kernel before it);
//   2. thread 0 waits for every block of the router's launch to count itself (sync[1] reaching
//      router_blocks for each launch this kernel had seen, sync[0] / blocks, and this one); warp 0 then
//      routes the logits itself (the same route_one as the router's last block without a.sync, so no
//      block of the router publishes the routing and none waits for its count), the block runs its
//      gate|up rows as gate_up_kernel's, and adds itself to sync[0];
//   3. the block takes row blocks id, id + blocks, ... of the down projections: each lane group of
//      warps 1 .. kWarps - 1 first computes one of the block's shared-expert rows (its act is the
//      router's launch's, so this needs only that launch's end), then warp w the routed slots w,
//      w + kWarps, ... A routed slot's first weights are requested before the warp waits for every gate|up
//      block (sync[0]): warp 0 polls the count, the other warps wait on its word in shared memory. The x rows
//      the block adds to are read with its staging, in step 1.
// Every block of the grid must be resident at once (one_pass checks it): a block of step 3 waits
// for all of step 2. Each row's sums are down_kernel's, in the same order.
template <WeightFormat F, Act A>
__global__ void __launch_bounds__(kWarps * 32, 2)
    one_pass_kernel(const MoeDecodeArgs a, int sub_in, int sub_down, unsigned router_blocks) {
  constexpr int E = elems<F>();
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  __shared__ unsigned long long seen;          // sync[0] / blocks: launches of this kernel before this one
  __shared__ int32_t slot_ids[kMaxDownWarps];  // the block's own routing (k < kMaxDownWarps)
  __shared__ float slot_weights[kMaxDownWarps];
  __shared__ unsigned counted;  // warp 0 saw every gate|up block counted
  let_next_kernel_start();
  const unsigned long long blocks = static_cast<unsigned long long>(gridDim.x) * gridDim.y;
  // Thread i's row of x in the block's first row block (x is complete, see 1.), read beside the staging
  // instead of after the down rows' sums, and kept in shared memory (a register spilled).
  __shared__ float x_rows[32 * kRows];
  const unsigned rb0 = blockIdx.y * gridDim.x + blockIdx.x, rows0 = (32u / sub_down) * kRows;
  const float x0 =
      threadIdx.x < rows0 && rb0 * rows0 + threadIdx.x < a.H ? __ldcg(a.x + rb0 * rows0 + threadIdx.x) : 0.0f;
  if (threadIdx.x == 0) counted = 0;
  const float factor = stage_gate_up_input<F, A, true>(a, smem);
  if (threadIdx.x < rows0) x_rows[threadIdx.x] = x0;  // (arrived with the staging's loads)
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    // The last launch with these counters has ended (the router's launch let this one start only after
    // its own wait), and this launch's blocks have added fewer than `blocks`: this one has not.
    seen = atomicAdd(a.sync, 0ull) / blocks;
    wait_until_at_least(a.sync + 1, (seen + 1) * router_blocks);
  }
  __syncthreads();  // (the logits are visible past the acquire: read from L2 below)
  if (warp == 0) {
    route_one<true>(a.logits, a.E, a.k, slot_ids, slot_weights);
    __syncwarp();
    if (blockIdx.x == 0 && blockIdx.y == 0 && lane < a.k)  // the step's routing, for whoever reads it
      a.ids[lane] = slot_ids[lane], a.weights[lane] = slot_weights[lane];
  }
  __syncthreads();
  const int p = static_cast<int>(blockIdx.y);
  gate_up_rows<F, A>(
      a, sub_in, p, 3 * slot_ids[p], blockIdx.x, smem, false, [] {}, factor);
  __syncthreads();  // every row of the block written, and its staging read
  if (threadIdx.x == 0) add_release(a.sync, 1);

  const LaneGroups lanes = lane_groups(sub_down);
  const int group = lanes.group(lane), lane_g = lanes.index(lane);
  // Per row block (rows0 again: held from the top through the kernel it spilled 40–56 bytes).
  const int64_t rows = int64_t{lanes.per_warp()} * kRows;
  float* xs = smem + warp * down_warp_floats<E>(a.I);
  float* partial = smem + kWarps * down_warp_floats<E>(a.I);  // [k + 1][rows]
  bool waited = false;
  // The shared expert's rows of row block rb, one a lane group of warps 1 .. kWarps - 1 (row
  // warp - 1 + (kWarps - 1) · group covers the block's rows: kRows < kWarps); warp 0 polls the count of
  // gate|up blocks meanwhile. Warp 0 running them as a second slot after its routed one was ~2.4 µs of
  // the down phase, and the block's late end kept the next kernel's blocks off its SM.
  static_assert(kRows < kWarps, "a lane group's shared row");
  auto shared_rows = [&](int64_t rb) {
    if (warp == 0 || warp > rows) return;  // uniform over the warp: no group of it has a row
    const int64_t j = warp - 1 + int64_t{kWarps - 1} * group;
    const bool mine = j < rows;
    down_rows<F, kDownAct<A>, 1, 1>(
        a, slot_ids, slot_weights, sub_down, lane_g, a.k, mine ? rb * rows + j : -1, xs, true,
        [&] {
          wait_for_previous_kernel();  // the router's launch
          __syncwarp();                // the warp's last slot is done with xs
          stage_down_input<F, kDownAct<A>, true>(a, a.k, xs);
        },
        mine ? partial + a.k * rows + j : nullptr);
  };
  for (int64_t rb = int64_t{blockIdx.y} * gridDim.x + blockIdx.x; rb * rows < a.H;
       rb += static_cast<int64_t>(blocks)) {
    shared_rows(rb);
    for (int t = warp; t < a.k; t += kWarps) {
      // One chunk a lane in flight: the real shape's 16 chunks a row are one per lane of its 16, and
      // a second slot's registers spilled at the launch's 128.
      down_rows<F, kDownAct<A>, 1>(
          a, slot_ids, slot_weights, sub_down, lane_g, t, rb * rows + int64_t{group} * kRows, xs, true,
          [&] {
            if (!waited) {
              wait_for_previous_kernel();  // the router's launch: the shared expert's act
              // One poller a block, warp 0 (no shared row; slot 0 is always its), instead of one a warp
              // (2,048 on the counter's line).
              if (lane == 0) {
                if (warp == 0) {
                  wait_until_at_least(a.sync, (seen + 1) * blocks);
                  set_block_flag(&counted);
                } else {
                  wait_for_block_flag(&counted);
                }
              }
              waited = true;
            }
            __syncwarp();  // also: the warp's last slot is done with xs
            stage_down_input<F, kDownAct<A>, true>(a, t, xs);
          },
          partial + t * rows + int64_t{group} * kRows);
    }
    __syncthreads();
    add_partials(a, partial, rb * rows, rows,
                 [&](int64_t i) { return rb == rb0 ? x_rows[i] : a.x[rb * rows + i]; });
    __syncthreads();
  }
}

int elems_of(WeightFormat f) {
  return f == WeightFormat::kAffine4 ? 32 : f == WeightFormat::kAffine8 ? 16 : 8;
}

// Shared memory of a gate|up block: the staged input and 32 floats of scratch.
template <WeightFormat F>
size_t gate_up_smem(int64_t H) {
  return sizeof(float) * static_cast<size_t>(staged_floats<elems<F>()>(H) + 32);
}
template <WeightFormat F>
unsigned gate_up_blocks(const MoeDecodeArgs& a, int sub) {
  return blocks_for(a.I, kWarps * (32 / sub) * (kRows / 2));
}

// Returns the blocks that count themselves in sync[1] (with a.sync): the router rows' and the shared gate's.
template <WeightFormat RF, WeightFormat F, Act A>
unsigned launch_router(const MoeDecodeArgs& a, cudaStream_t stream) {
  constexpr int E = elems<RF>();
  const int sub = gemv_group_lanes(a.H / E), sub_experts = gemv_group_lanes(a.H / elems<F>());
  const int rows_per_block = kWarps * (32 / sub) * kRouterRows;
  const int router_blocks = static_cast<int>(blocks_for(a.E, rows_per_block));
  const size_t smem = std::max({sizeof(float) * static_cast<size_t>(staged_floats<E>(a.H) + 32),
                                sizeof(float) * static_cast<size_t>(a.E), gate_up_smem<F>(a.H)});
  launch_kernel(router_kernel<RF, F, A>, dim3(router_blocks + 1 + gate_up_blocks<F>(a, sub_experts)),
                dim3(kWarps * 32), smem, stream, a.overlap, "moe router", a, sub, router_blocks, sub_experts);
  return static_cast<unsigned>(router_blocks + 1);
}

template <WeightFormat F, Act A>
void launch_experts(const MoeDecodeArgs& a, cudaStream_t stream) {
  constexpr int E = elems<F>();
  const int sub_in = gemv_group_lanes(a.H / E);
  launch_kernel(gate_up_kernel<F, A>, dim3(gate_up_blocks<F>(a, sub_in), static_cast<unsigned>(a.k)),
                dim3(kWarps * 32), gate_up_smem<F>(a.H), stream, a.overlap, "moe gate_up", a, sub_in);
  const int sub_down = gemv_group_lanes(a.I / E);
  const int rows_per_block = (32 / sub_down) * kRows * kDownSteps;
  const size_t down_smem =
      sizeof(float) * static_cast<size_t>((a.k + 1) * (down_warp_floats<E>(a.I) + rows_per_block));
  launch_kernel(down_kernel<F, A>, dim3(blocks_for(a.H, rows_per_block)), dim3(32 * (a.k + 1)), down_smem,
                stream, a.overlap, "moe down", a, sub_down);
}

// one_pass_kernel's configuration: `fits` false where its blocks would not all be resident at once or
// its shared memory passes 48 KiB (the caller then launches the two kernels).
struct OnePass {
  bool fits = false;
  int sub_in = 0, sub_down = 0;
  dim3 grid;
  size_t smem = 0;
};
template <WeightFormat F, Act A>
OnePass one_pass(const MoeDecodeArgs& a) {
  constexpr int E = elems<F>();
  OnePass o;
  o.sub_in = gemv_group_lanes(a.H / E);
  o.sub_down = gemv_group_lanes(a.I / E);
  o.grid = dim3(gate_up_blocks<F>(a, o.sub_in), static_cast<unsigned>(a.k));
  const int64_t rows = (32 / o.sub_down) * kRows;
  o.smem =
      std::max(gate_up_smem<F>(a.H),
               sizeof(float) * static_cast<size_t>(kWarps * down_warp_floats<E>(a.I) + (a.k + 1) * rows));
  if (o.smem > 48 * 1024) return o;
  int per_sm = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, one_pass_kernel<F, A>, kWarps * 32, o.smem),
        "moe_decode: occupancy");
  o.fits = int64_t{per_sm} * multiprocessor_count() >= int64_t{o.grid.x} * o.grid.y;
  return o;
}

template <WeightFormat F, Act A>
void launch_all(MoeDecodeArgs a, cudaStream_t stream) {
  const OnePass o = a.sync ? one_pass<F, A>(a) : OnePass{};
  if (!o.fits) a.sync = nullptr;  // the router's last block then routes
  unsigned router_blocks = 0;
  with_device_format(a.route_format, "moe_decode: router weights must be affine 4/8-bit or bf16",
                     [&](auto rf) { router_blocks = launch_router<rf.value, F, A>(a, stream); });
  if (o.fits)
    launch_kernel(one_pass_kernel<F, A>, o.grid, dim3(kWarps * 32), o.smem, stream, a.overlap, "moe experts",
                  a, o.sub_in, o.sub_down, router_blocks);
  else
    launch_experts<F, A>(a, stream);
}

}  // namespace

bool moe_decode_fits(WeightFormat route_format, WeightFormat expert_format, int64_t expert_dim,
                     int64_t shared_dim, int k) {
  auto gpu_format = [](WeightFormat f) {
    return f == WeightFormat::kAffine4 || f == WeightFormat::kAffine8 || f == WeightFormat::kBF16;
  };
  // Shared memory of the down kernel: k + 1 staged inputs of expert_dim floats and partial sums, under
  // 48 KiB.
  const int E = elems_of(expert_format);
  const int64_t down_floats = (k + 1) * ((expert_dim + E - 1) / E * (E + 4) + 64);
  return gpu_format(route_format) && gpu_format(expert_format) && expert_dim == shared_dim &&
         k < kMaxDownWarps && expert_dim % elems_of(expert_format) == 0 && down_floats * 4 < 48 * 1024;
}

void moe_decode(const MoeDecodeArgs& a, cudaStream_t stream) {
  if (a.E > 32 * kMaxExpertsPerLane || a.k >= kMaxDownWarps || a.k > a.E)
    check(cudaErrorInvalidValue, "moe_decode: expert count");
  switch (a.expert_format) {
    case WeightFormat::kAffine4:
      if (a.i16) return launch_all<WeightFormat::kAffine4, Act::kI16>(a, stream);
      return launch_all<WeightFormat::kAffine4, Act::kF32>(a, stream);
    case WeightFormat::kAffine8:
      return launch_all<WeightFormat::kAffine8, Act::kF32>(a, stream);
    default:
      return launch_all<WeightFormat::kBF16, Act::kF32>(a, stream);
  }
}

}  // namespace qwick::cuda
