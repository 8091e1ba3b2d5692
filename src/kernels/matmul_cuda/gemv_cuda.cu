// Decode GEMV: y = W·x for one f32 row x, weights in file format (see matmul_cuda.h).
//
// Block: 8 warps (16 for a gated norm at one row a lane group, kGatedWarps). The block stages the
// (transformed) input in shared memory, then each group of `sub` lanes runs dot_rows (gemv_core.cuh) over
// kRows consecutive rows of one problem per step (the whole warp for inputs of 32 chunks and more, see
// gemv_group_lanes). Large matrices give a block several steps so the staging is shared by more rows. A stack
// of matrices is laid out as consecutive block ranges, one per problem, so no block idles on a short matrix.
//
// Test: tests/cuda/gemv_cuda_test.cpp (Gemv.*) against matmul_rows_reference and the CPU norms.
#include "kernels/cuda/cuda_launch.h"
#include "kernels/matmul_cuda/gemv_core.cuh"

namespace qwick::cuda {
namespace {

// Four rows per lane group with two chunks each in flight, two blocks per multiprocessor: measured
// best of (rows, chunks, blocks) = (4, 2, 2), (4, 1, 2), (2, 2, 2), (8, 1, 1), (4, 2, 1) on the H200.
// Matrices too short to fill the GPU with four rows per group
// take two or one (more blocks; the 2048-row output projections), see rows_per_group.
constexpr int kWarps = 8;
constexpr int kUnroll = 2;  // chunks per lane in flight per row
constexpr int kMinBlocks = 2;
// Row steps per block for matrices with blocks to spare (the lm_head): 4 took 127.5 µs against 131.0
// for 8, 132.2 for 2 and 143.2 for 1 (gemv_cuda_bench on an H200).
constexpr int kMaxSteps = 4;
// A gated-norm input (the DeltaNet output projection) at one row a lane group: blocks of 16 warps, one
// a multiprocessor. Every block stages the whole input, o and z (32 KB from L2 for the model's 4096
// values, 8 MB over the GPU at once at 256 blocks), and computes every head's norm and gate; half the
// blocks halve that, and a warp norms two heads instead of four. 6.4 → 5.9 µs a layer, decode +0.9 %
// at 4K.
constexpr int kGatedWarps = 16;

enum class Transform { kPlain, kNorm, kGatedNorm };

struct GemvLaunch {
  GemvArgs a;
  int sub = 32;           // lanes per row
  int steps = 1;          // row steps per block
  int64_t rows_per_step;  // kWarps · (32 / sub) · kRows
  bool stacked = false;   // problem p owns blocks [first_block[p], first_block[p + 1])
  int32_t first_block[kGemvMaxStack + 1] = {};
};

// kRows: rows per lane group and step; W: warps a block (kWarps, or kGatedWarps), at the same warps an
// SM whatever W (the same 128 registers a thread).
template <WeightFormat F, Transform T, Act A, int kRows, int W = kWarps>
__global__ void __launch_bounds__(W * 32, kMinBlocks* kWarps / W) gemv_kernel(const GemvLaunch L) {
  constexpr int E = ChunkTraits<F>::kElems;
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);  // (the int16 form, Act::kI16, replaces the f32 one)
  const GemvArgs& a = L.a;
  if (!a.trigger_after_wait) let_next_kernel_start();
  auto wait = [&] {
    wait_for_previous_kernel();
    if (a.trigger_after_wait) let_next_kernel_start();
  };
  int p = static_cast<int>(blockIdx.y);
  int64_t block = blockIdx.x;
  if (L.stacked) {
    p = 0;
    while (p + 1 < a.problems && static_cast<int32_t>(blockIdx.x) >= L.first_block[p + 1]) ++p;
    block -= L.first_block[p];
  }
  const bool indexed = a.table && a.index;
  if (indexed) wait();  // the index list comes from an earlier kernel
  const DeviceMatrix m = a.table ? a.table[indexed ? a.index[p] : p] : a.single;
  const int64_t block_row = block * L.rows_per_step * L.steps;
  if (block_row >= m.rows) {  // uniform over the block: a shorter matrix of the problems
    wait();
    return;
  }
  const float* x = a.x + p * a.x_stride;
  float factor = 1.0f;
  // Staging loads in flight a thread: the model's 2048 inputs in one round of loads after the wait
  // where the registers allow. With four rows per group a batch of two spills in the f32 RMSNorm (48
  // bytes at 128 registers), so one at a time there (two rounds); the int16 form's holds no spill.
  constexpr int kNormBatch = kRows == 4 && A != Act::kI16 ? 1 : 2, kPlainBatch = kRows == 4 ? 1 : 4;
  auto stage = [&] {
    if constexpr (T == Transform::kNorm) prefetch_to_l1(a.norm_weight, m.cols);
    if constexpr (T == Transform::kGatedNorm) prefetch_to_l1(a.norm_weight, a.head_dim);
    wait();  // x comes from an earlier kernel
    if constexpr (T == Transform::kNorm)
      factor = stage_norm<E, kNormBatch, false, A>(x, a.norm_weight, a.eps, m.cols, xs,
                                                   xs + staged_floats<E>(a.max_cols));
    else if constexpr (T == Transform::kGatedNorm)
      stage_gated_norm<E, A>(x, a.gate_z + p * a.x_stride, a.norm_weight, a.eps, a.head_dim, m.cols, xs);
    else
      stage_plain<E, kPlainBatch, false, A>(x, m.cols, xs, threadIdx.x, blockDim.x);
    __syncthreads();
  };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const LaneGroups lanes = lane_groups(L.sub);
  const int group = lanes.group(lane), lane_g = lanes.index(lane);
  float* y = a.y + p * a.y_stride;
  const int64_t groups = row_groups(m);
  for (int s = 0; s < L.steps; ++s) {
    const int64_t row0 =
        block_row + s * L.rows_per_step + static_cast<int64_t>(warp * lanes.per_warp() + group) * kRows;
    WeightRow rows[kRows];
    weight_rows<kRows>(m, groups, row0, rows);
    float acc[kRows];
    dot_rows<F, kRows, kUnroll, A>(rows, m.cols / E, m.group_size, L.sub, lane_g, xs, s == 0, stage, acc);
    if (lane_g != 0) continue;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = row0 + r;
      if (row < m.rows) y[row] = a.accumulate ? y[row] + factor * acc[r] : factor * acc[r];
    }
  }
}

// Rows per lane group: the fewest waves of blocks (kMinBlocks per multiprocessor), and for as many
// waves the fewest rows (more, shorter blocks): the 2048-row output projections take 1 (256 blocks,
// where 4 gave 64), the DeltaNet qkv|b|a stack 4 (258 blocks; 2 would give 516, two waves). A
// block's life is mostly fixed latency, so a second wave costs nearly as much as the first. (Measured
// against choosing by the fullest last wave, which split the 12352-row DeltaNet and 9216-row attention
// stacks: 369 against 379 tok/s at 4K.)
int rows_per_group(const GemvArgs& a, int sub) {
  const int64_t groups = int64_t{kWarps} * (32 / sub), slots = int64_t{kMinBlocks} * multiprocessor_count();
  auto waves = [&](int r) {
    int64_t blocks = 0;
    if (a.table && !a.index && a.problems <= kGemvMaxStack && a.stack_rows[0] > 0)
      for (int p = 0; p < a.problems; ++p) blocks += (a.stack_rows[p] + groups * r - 1) / (groups * r);
    else
      blocks = (a.max_rows + groups * r - 1) / (groups * r) * a.problems;
    return (blocks + slots - 1) / slots;
  };
  int best = 4;
  for (int r : {2, 1})
    if (waves(r) <= waves(best)) best = r;
  return best;
}

template <WeightFormat F, Transform T, Act A, int kRows, int W = kWarps>
void launch_gemv(const GemvArgs& a, int sub, cudaStream_t stream) {
  constexpr int E = ChunkTraits<F>::kElems;
  GemvLaunch L;
  L.a = a;
  L.sub = sub;
  // rows_per_group counted waves of kWarps blocks at kMinBlocks an SM; W warps a block fill the same
  // warps an SM, so the waves are the same.
  L.rows_per_step = int64_t{W} * (32 / L.sub) * kRows;
  dim3 grid;
  if (a.table && !a.index && a.problems <= kGemvMaxStack && a.stack_rows[0] > 0) {
    L.stacked = true;
    for (int p = 0; p < a.problems; ++p)
      L.first_block[p + 1] = L.first_block[p] + static_cast<int32_t>(blocks_for(
                                                    a.stack_rows[p], static_cast<int>(L.rows_per_step)));
    grid = dim3(static_cast<unsigned>(L.first_block[a.problems]), 1);
  } else {
    // Several steps per block once there are blocks to spare (the lm_head): staging shared by more rows.
    constexpr int64_t kEnoughBlocks = 132 * 4;
    while (L.steps < kMaxSteps &&
           static_cast<int64_t>(blocks_for(a.max_rows, static_cast<int>(L.rows_per_step) * L.steps * 2)) *
                   a.problems >=
               kEnoughBlocks)
      L.steps *= 2;
    grid = dim3(blocks_for(a.max_rows, static_cast<int>(L.rows_per_step) * L.steps),
                static_cast<unsigned>(a.problems));
  }
  const size_t smem = sizeof(float) * static_cast<size_t>(staged_floats<E>(a.max_cols) + 32);
  if (smem > 48 * 1024) {  // inputs past 10K columns; never during the decode graph's capture
    static bool configured = false;
    if (!configured)
      check(cudaFuncSetAttribute(gemv_kernel<F, T, A, kRows, W>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 160 * 1024),
            "gemv: shared memory limit");
    configured = true;
  }
  launch_kernel(gemv_kernel<F, T, A, kRows, W>, grid, dim3(W * 32), smem, stream, a.overlap, "gemv", L);
}

template <WeightFormat F, Transform T, Act A>
void launch_rows(const GemvArgs& a, cudaStream_t stream) {
  const int sub = gemv_group_lanes(a.max_cols / ChunkTraits<F>::kElems);
  switch (rows_per_group(a, sub)) {
    case 4:
      return launch_gemv<F, T, A, 4>(a, sub, stream);
    case 2:
      return launch_gemv<F, T, A, 2>(a, sub, stream);
    default:
      if constexpr (T == Transform::kGatedNorm) return launch_gemv<F, T, A, 1, kGatedWarps>(a, sub, stream);
      return launch_gemv<F, T, A, 1>(a, sub, stream);
  }
}

// int16 activations with 4-bit weights and, for the gated norm, heads of a multiple of 32 values (a
// chunk in one head).
template <WeightFormat F, Transform T>
void launch(const GemvArgs& a, cudaStream_t stream) {
  if constexpr (F == WeightFormat::kAffine4) {
    if (a.i16 && (T != Transform::kGatedNorm || a.head_dim % 32 == 0))
      return launch_rows<F, T, Act::kI16>(a, stream);
  }
  launch_rows<F, T, Act::kF32>(a, stream);
}

template <WeightFormat F>
void launch_format(const GemvArgs& a, cudaStream_t stream) {
  if (a.gate_z) {
    if (!gemv_gated_norm_fits(a.head_dim) || a.max_cols % a.head_dim != 0 || !aligned16(a.x) ||
        !aligned16(a.gate_z) || !aligned16(a.norm_weight) || a.x_stride % 4 != 0)
      check(cudaErrorInvalidValue,
            "gemv: the gated norm's heads must divide the input (a multiple of 4, at most 128 values), "
            "x, z and the norm's weights 16-byte aligned");
    launch<F, Transform::kGatedNorm>(a, stream);
  } else if (a.norm_weight) {
    launch<F, Transform::kNorm>(a, stream);
  } else {
    launch<F, Transform::kPlain>(a, stream);
  }
}

}  // namespace

void gemv(const GemvArgs& a, cudaStream_t stream) {
  if (a.stream && gemv_stream_fits(a)) return gemv_stream(a, stream);
  with_device_format(a.format, "gemv: weights must be affine 4/8-bit or bf16 on the GPU",
                     [&](auto f) { launch_format<f.value>(a, stream); });
}

}  // namespace qwick::cuda
