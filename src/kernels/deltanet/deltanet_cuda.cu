// Gated DeltaNet stages on the GPU (contracts and layouts in deltanet_cuda.h).
#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/deltanet/deltanet_cuda.h"
#include "kernels/matmul_cuda/gemv_core.cuh"

namespace qwick::cuda {
namespace {

// 1 / ‖x‖ for the L2 norm of a q or k head, from Σ x² (the CPU's l2_norm eps).
__device__ __forceinline__ float inv_l2(float sumsq) {
  return 1.0f / sqrtf(sumsq + 1e-6f);
}

// Where the window after the rows goes (DeltaNetConvArgs::state_out).
__device__ __forceinline__ float* window_after(const DeltaNetConvArgs& a) {
  return a.state_out ? a.state_out : a.state;
}

template <int K>
__global__ void conv_kernel(DeltaNetConvArgs a) {
  wait_and_let_next_start();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.C) return;
  float w[K], hist[K - 1];
#pragma unroll
  for (int j = 0; j < K; ++j) w[j] = a.w[c * K + j];
#pragma unroll
  for (int j = 0; j < K - 1; ++j) hist[j] = a.state[j * a.C + c];
  for (int64_t t = 0; t < a.n; ++t) {
    const float x = f32_or_bf16(a.in, a.in_bf16, t * a.ld_in + c);
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < K - 1; ++j) acc += w[j] * hist[j];
    acc += w[K - 1] * x;
    a.out[t * a.ld_out + c] = siluf_(acc);
#pragma unroll
    for (int j = 0; j + 1 < K - 1; ++j) hist[j] = hist[j + 1];
    hist[K - 2] = x;
  }
  float* const window = window_after(a);
#pragma unroll
  for (int j = 0; j < K - 1; ++j) window[j * a.C + c] = hist[j];
}

// One step of warp_sums16: keep M of the values, swap the other M with the lane 2M apart.
template <int M>
__device__ __forceinline__ void halve_and_swap(float (&v)[16]) {
  const bool upper = threadIdx.x & (2 * M);
#pragma unroll
  for (int i = 0; i < M; ++i) {
    const float first = v[i], second = v[i + M];
    v[i] = (upper ? second : first) + __shfl_xor_sync(kFullMask, upper ? first : second, 2 * M);
  }
}
// Lane l ends with the sum over the warp of v[l / 2] (16 values a lane): each step halves the values a
// lane keeps, so 16 shuffles do the 16 reductions.
__device__ __forceinline__ float warp_sums16(float (&v)[16]) {
  halve_and_swap<8>(v);
  halve_and_swap<4>(v);
  halve_and_swap<2>(v);
  halve_and_swap<1>(v);
  return v[0] + __shfl_xor_sync(kFullMask, v[0], 1);
}

// The same convolution for chunks of many rows, a thread per (channel, run of kConvRows rows): row t
// reads rows t - K + 1 .. t of [window state; input]. The thread loads its channel's K weights once and
// slides the last K - 1 inputs along in registers, so each input is read once (plus K - 1 rows per
// run). (A thread per (row, channel) read every input K times and its weights once per row: 162 µs
// per 4096-row layer on the H200, about half the copy rate.) The window is left to
// conv_window_kernel, which runs after (a thread overwriting it here could race with one still
// reading it). With norm_heads, a block's q and k heads (whole warps: norm_dim >= 32) are
// L2-normalised per row before the store, their sums of squares reduced per warp and then over the
// head's warps through shared memory: the norms then cost no pass over memory of their own.
// bf16 inputs come through shared memory in 16-byte pieces where the rows allow: each thread's own
// 2-byte loads keep half the bytes of f32 ones in flight (the conv then read at ~2 TB/s, slower than
// from f32 rows).
constexpr int kConvRows = 16, kConvThreads = 128;
template <int K>
__global__ void __launch_bounds__(kConvThreads) conv_rows_kernel(DeltaNetConvArgs a) {
  wait_and_let_next_start();
  const int64_t block_c0 = static_cast<int64_t>(blockIdx.x) * kConvThreads, c = block_c0 + threadIdx.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kConvRows;
  const bool active = c < a.C;  // (no early return: the norms' barrier)
  const int rows = a.n - t0 < kConvRows ? static_cast<int>(a.n - t0) : kConvRows;
  // Rows t0 - (K - 1) .. t0 + rows - 1 of the input (those >= 0), at K - 1 + (row - t0).
  __shared__ __align__(16) uint16_t staged[K - 1 + kConvRows][kConvThreads];
  const bool stage = a.in_bf16 && a.ld_in % 8 == 0 && reinterpret_cast<uintptr_t>(a.in_bf16) % 16 == 0 &&
                     block_c0 + kConvThreads <= a.C;  // uniform over the block
  if (stage) {
    constexpr int kPieces = kConvThreads / 8;  // 8 channels a piece
    for (int i = threadIdx.x; i < (K - 1 + rows) * kPieces; i += kConvThreads) {
      const int r = i / kPieces, piece = i % kPieces;
      const int64_t src = t0 - (K - 1) + r;
      if (src >= 0)
        *reinterpret_cast<uint4*>(&staged[r][8 * piece]) =
            *reinterpret_cast<const uint4*>(a.in_bf16 + src * a.ld_in + block_c0 + 8 * piece);
    }
    __syncthreads();
  }
  const auto input = [&](int64_t src) {  // row src >= 0 of channel c
    return stage ? bf16_to_f32(staged[src - t0 + K - 1][threadIdx.x])
                 : f32_or_bf16(a.in, a.in_bf16, src * a.ld_in + c);
  };
  float w[K], hist[K - 1];
#pragma unroll
  for (int j = 0; j < K; ++j) w[j] = active ? a.w[c * K + j] : 0.0f;
#pragma unroll
  for (int j = 0; j < K - 1; ++j) {
    const int64_t src = t0 - (K - 1) + j;  // < 0: position K - 1 + src of the window
    hist[j] = !active ? 0.0f : src < 0 ? a.state[(K - 1 + src) * a.C + c] : input(src);
  }
  float x[kConvRows];
#pragma unroll
  for (int r = 0; r < kConvRows; ++r) x[r] = active && r < rows ? input(t0 + r) : 0.0f;  // all in flight
  float y[kConvRows];
#pragma unroll
  for (int r = 0; r < kConvRows; ++r) {
    float acc = 0.0f;  // the order of conv_kernel's sum
#pragma unroll
    for (int j = 0; j < K - 1; ++j) acc += w[j] * hist[j];
    acc += w[K - 1] * x[r];
#pragma unroll
    for (int j = 0; j + 1 < K - 1; ++j) hist[j] = hist[j + 1];
    hist[K - 2] = x[r];
    y[r] = siluf_(acc);  // 0 for an inactive channel
  }

  const int64_t qk_channels = 2 * int64_t{a.norm_heads} * a.norm_dim;
  if (block_c0 < qk_channels) {  // uniform over the block
    // Sums of squares per warp and row, then per head and row its factor (once, not per channel).
    __shared__ float warp_ss[kConvThreads / 32][kConvRows], factor[kConvThreads / 32][kConvRows];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, head_warps = a.norm_dim / 32;
    float sq[kConvRows];
#pragma unroll
    for (int r = 0; r < kConvRows; ++r) sq[r] = y[r] * y[r];
    const float ss = warp_sums16(sq);
    if ((lane & 1) == 0) warp_ss[warp][lane >> 1] = ss;
    __syncthreads();
    if (threadIdx.x < kConvThreads / 32 * kConvRows) {  // a thread per (head's first warp, row)
      const int w0 = threadIdx.x / kConvRows, r = threadIdx.x % kConvRows;
      if (w0 % head_warps == 0 && block_c0 + 32 * w0 < qk_channels) {
        float s = 0.0f;
        for (int hw = 0; hw < head_warps; ++hw) s += warp_ss[w0 + hw][r];
        const bool q_head = block_c0 + 32 * w0 < int64_t{a.norm_heads} * a.norm_dim;
        factor[w0][r] = inv_l2(s) * (q_head ? 1.0f / sqrtf(static_cast<float>(a.norm_dim)) : 1.0f);
      }
    }
    __syncthreads();
    if (block_c0 + 32 * warp < qk_channels) {
      const int w0 = warp / head_warps * head_warps;
#pragma unroll
      for (int r = 0; r < kConvRows; ++r) y[r] *= factor[w0][r];
    }
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < kConvRows; ++r)
    if (r < rows) a.out[(t0 + r) * a.ld_out + c] = y[r];
}

// The window after the chunk: the last K - 1 rows of [window state; input], per channel.
template <int K>
__global__ void conv_window_kernel(DeltaNetConvArgs a) {
  wait_and_let_next_start();  // (also for conv_rows_kernel's reads of the window)
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.C) return;
  float next[K - 1];
#pragma unroll
  for (int j = 0; j < K - 1; ++j) {
    const int64_t src = a.n - (K - 1) + j;
    next[j] = src < 0 ? a.state[(K - 1 + src) * a.C + c] : f32_or_bf16(a.in, a.in_bf16, src * a.ld_in + c);
  }
  float* const window = window_after(a);
#pragma unroll
  for (int j = 0; j < K - 1; ++j) window[j * a.C + c] = next[j];
}

template <int K>
void launch_conv(const DeltaNetConvArgs& a, cudaStream_t stream) {
  const unsigned blocks = blocks_for(a.C, 128);
  if (a.n > 1 || a.norm_heads > 0) {
    launch_kernel(conv_rows_kernel<K>, dim3(blocks_for(a.C, kConvThreads), blocks_for(a.n, kConvRows)),
                  dim3(kConvThreads), 0, stream, a.overlap, "deltanet_conv", a);
    launch_kernel(conv_window_kernel<K>, dim3(blocks), dim3(128), 0, stream, a.overlap,
                  "deltanet_conv_window", a);
  } else {
    launch_kernel(conv_kernel<K>, dim3(blocks), dim3(128), 0, stream, a.overlap, "deltanet_conv", a);
  }
}

// beta = sigmoid(b), decay = exp(-exp(A_log) · softplus(a + dt_bias)) of one value head.
__device__ __forceinline__ void gates(float b, float a, float a_neg, float dt_bias, float& beta,
                                      float& decay) {
  beta = sigmoidf_(b);
  decay = expf(a_neg * softplusf_(a + dt_bias));
}

// One block per row: a warp per q or k head, then the gates.
__global__ void prepare_kernel(DeltaNetPrepareArgs a) {
  wait_and_let_next_start();
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const float q_scale = 1.0f / sqrtf(static_cast<float>(a.Dk));
  for (int head = warp; head < 2 * a.Hk && !a.qk_normalised; head += warps) {
    float* x = a.qkv + t * a.ld + static_cast<int64_t>(head) * a.Dk;  // q heads, then k heads
    float ss = 0.0f;
    for (int i = lane; i < a.Dk; i += 32) ss += x[i] * x[i];
    ss = warp_sum(ss);
    const float inv = inv_l2(ss);
    const float scale = head < a.Hk ? q_scale : 1.0f;
    for (int i = lane; i < a.Dk; i += 32) x[i] = x[i] * inv * scale;
  }
  for (int h = threadIdx.x; h < a.Hv; h += blockDim.x)
    gates(f32_or_bf16(a.b, a.b_bf16, t * a.ld_ba + h), f32_or_bf16(a.a, a.a_bf16, t * a.ld_ba + h),
          a.a_neg[h], a.dt_bias[h], a.beta[t * a.Hv + h], a.decay[t * a.Hv + h]);
}

constexpr int kScanRowsPerWarp = 8;
constexpr int kScanWarps = 4;
constexpr int kScanRowsPerBlock = kScanRowsPerWarp * kScanWarps;

// A warp's 8 rows of value head h's state [Dv, Dk] from row j0, lane l's EPL elements from l·EPL:
// where they are, loaded into and stored from registers.
template <int EPL, typename T>
__device__ __forceinline__ T* state_rows(T* state, int Dv, int Dk, int h, int j0) {
  const int lane = threadIdx.x & 31;
  return state + (static_cast<int64_t>(h) * Dv + j0) * Dk + lane * EPL;
}
template <int EPL>
__device__ __forceinline__ void load_rows(const float* state, int Dk, float (&S)[kScanRowsPerWarp][EPL]) {
#pragma unroll
  for (int r = 0; r < kScanRowsPerWarp; ++r)
#pragma unroll
    for (int e = 0; e < EPL; ++e) S[r][e] = state[r * Dk + e];
}
template <int EPL>
__device__ __forceinline__ void store_rows(float* state, int Dk, const float (&S)[kScanRowsPerWarp][EPL]) {
#pragma unroll
  for (int r = 0; r < kScanRowsPerWarp; ++r)
#pragma unroll
    for (int e = 0; e < EPL; ++e) state[r * Dk + e] = S[r][e];
}

// One token through a warp's 8 state rows (EPL = Dk / 32 values per lane per row; lane l holds
// elements l·EPL .. of q, k and of each row): u = decay·(S_j·k); S_j = decay·S_j + beta·(v_j − u)·k;
// o_j = S_j·q. Returns o of row `lane` in lanes 0-7.
template <int EPL>
__device__ __forceinline__ float token_step(float (&S)[kScanRowsPerWarp][EPL], const float (&q)[EPL],
                                            const float (&k)[EPL], const float (&v)[kScanRowsPerWarp],
                                            float beta, float decay) {
  const int lane = threadIdx.x & 31;
  float sk[kScanRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kScanRowsPerWarp; ++r) {
    sk[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) sk[r] += S[r][e] * k[e];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int r = 0; r < kScanRowsPerWarp; ++r) sk[r] += __shfl_xor_sync(kFullMask, sk[r], o);
  float out[kScanRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kScanRowsPerWarp; ++r) {
    const float delta = beta * (v[r] - decay * sk[r]);
    out[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      S[r][e] = decay * S[r][e] + delta * k[e];
      out[r] += S[r][e] * q[e];
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int r = 0; r < kScanRowsPerWarp; ++r) out[r] += __shfl_xor_sync(kFullMask, out[r], o);
  float mine = 0.0f;
#pragma unroll
  for (int r = 0; r < kScanRowsPerWarp; ++r)
    if (lane == r) mine = out[r];
  return mine;
}

template <int EPL>  // state values per lane per row = Dk / 32
__global__ void __launch_bounds__(kScanWarps * 32) scan_kernel(DeltaNetScanArgs a) {
  wait_and_let_next_start();
  const int h = blockIdx.x, kh = h / (a.Hv / a.Hk);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j0 = blockIdx.y * kScanRowsPerBlock + warp * kScanRowsPerWarp;
  const int64_t key_dim = static_cast<int64_t>(a.Hk) * a.Dk;
  const int64_t q_off = static_cast<int64_t>(kh) * a.Dk + lane * EPL;
  const int64_t k_off = key_dim + q_off;
  const int64_t v_off = 2 * key_dim + static_cast<int64_t>(h) * a.Dv + j0;
  float S[kScanRowsPerWarp][EPL];
  load_rows<EPL>(state_rows<EPL>(a.state, a.Dv, a.Dk, h, j0), a.Dk, S);

  // Inputs of token t, loaded one token ahead.
  float q[EPL], k[EPL], v[kScanRowsPerWarp], beta = 0.0f, decay = 0.0f;
  auto load = [&](int64_t t) {
    const float* row = a.qkv + t * a.ld;
#pragma unroll
    for (int e = 0; e < EPL; ++e) q[e] = row[q_off + e], k[e] = row[k_off + e];
#pragma unroll
    for (int r = 0; r < kScanRowsPerWarp; ++r) v[r] = row[v_off + r];
    beta = a.beta[t * a.Hv + h];
    decay = a.decay[t * a.Hv + h];
  };
  if (a.n > 0) load(0);
  for (int64_t t = 0; t < a.n; ++t) {
    float cq[EPL], ck[EPL], cv[kScanRowsPerWarp];
#pragma unroll
    for (int e = 0; e < EPL; ++e) cq[e] = q[e], ck[e] = k[e];
#pragma unroll
    for (int r = 0; r < kScanRowsPerWarp; ++r) cv[r] = v[r];
    const float cbeta = beta, cdecay = decay;
    if (t + 1 < a.n) load(t + 1);
    const float o = token_step<EPL>(S, cq, ck, cv, cbeta, cdecay);
    if (lane < kScanRowsPerWarp) a.out[t * a.ld_out + static_cast<int64_t>(h) * a.Dv + j0 + lane] = o;
  }
  store_rows<EPL>(state_rows<EPL>(a.state_out ? a.state_out : a.state, a.Dv, a.Dk, h, j0), a.Dk, S);
}

// Conv + SiLU of channel c for the decode row: reads the window (hist, oldest first) and the new input
// x; conv_shift then writes the window moved on into state_out.
template <int K>
__device__ __forceinline__ float conv_read(const DeltaNetConvArgs& a, int64_t c, float (&hist)[K - 1],
                                           float& x) {
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < K - 1; ++j) hist[j] = a.state[j * a.C + c], acc += a.w[c * K + j] * hist[j];
  x = a.in[c];
  acc += a.w[c * K + K - 1] * x;
  return siluf_(acc);
}
template <int K>
__device__ __forceinline__ void conv_shift(const DeltaNetConvArgs& a, int64_t c, const float (&hist)[K - 1],
                                           float x) {
#pragma unroll
  for (int j = 0; j + 1 < K - 1; ++j) a.state_out[j * a.C + c] = hist[j + 1];
  a.state_out[(K - 2) * a.C + c] = x;
}

// The z projection's rows carried by the step's launch (DeltaNetDecodeStepArgs::z), computed as the
// decode GEMV does (gemv_core.cuh): a lane group of up to 16 lanes owns four rows, with four chunks a
// lane in flight, so a block of four warps covers 32 rows of the model's z (4096 × 2048) and the launch
// is one wave: 128 step blocks and 128 z blocks, two of the kernel's blocks per SM.
constexpr int kZRowsPerGroup = 4, kZUnroll = 4;
template <WeightFormat F>
int z_lanes(int64_t cols) {
  return std::min(16, gemv_group_lanes(cols / ChunkTraits<F>::kElems));
}
template <WeightFormat F>
int64_t z_rows_per_block(int64_t cols) {
  return int64_t{kScanWarps} * (32 / z_lanes<F>(cols)) * kZRowsPerGroup;
}
template <WeightFormat F, Act A>
__device__ __forceinline__ void z_block(const DeviceMatrix m, const float* x, const float* norm, float eps,
                                        float* out, int64_t block, int sub) {
  constexpr int E = ChunkTraits<F>::kElems;
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);
  const LaneGroups lanes = lane_groups(sub);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, group = lanes.group(lane),
            lane_g = lanes.index(lane);
  const int64_t row0 = block * kScanWarps * lanes.per_warp() * kZRowsPerGroup +
                       static_cast<int64_t>(warp * lanes.per_warp() + group) * kZRowsPerGroup;
  WeightRow rows[kZRowsPerGroup];
  weight_rows<kZRowsPerGroup>(m, row_groups(m), row0, rows);
  float factor = 1.0f;
  // The model's 2048 inputs in one round of loads at the block's 128 threads (one at a time took four
  // dependent rounds after the wait, and the z blocks end last in the step's launch).
  auto stage = [&] {
    if (norm) prefetch_to_l1(norm, m.cols);
    wait_for_previous_kernel();  // the residual comes from the kernel before the input projection
    if (norm)
      factor = stage_norm<E, 4, false, A>(x, norm, eps, m.cols, xs, xs + staged_floats<E>(m.cols));
    else
      stage_plain<E, 4, false, A>(x, m.cols, xs, threadIdx.x, blockDim.x);
    __syncthreads();
  };
  float acc[kZRowsPerGroup];
  dot_rows<F, kZRowsPerGroup, kZUnroll, A>(rows, m.cols / E, m.group_size, sub, lane_g, xs, true, stage, acc);
  if (lane_g != 0) return;
#pragma unroll
  for (int r = 0; r < kZRowsPerGroup; ++r)
    if (row0 + r < m.rows) out[row0 + r] = factor * acc[r];
}

constexpr int kMaxStepDk = 128;  // q and k of a key head staged in shared memory, one channel a thread

// The decode step of one (value head, 32 state rows) block: conv + SiLU of its key head's q and k
// channels and of its 32 value channels, the L2 norms, the gates, then token_step. Every block of the
// key head's value heads reads its q and k channels; the first of them (value head kh·Hv/Hk, rows 0-31)
// writes their window moved on. The value channels and the state rows are the block's own.
// kZ: the launch also carries the z projection (format ZF, input form ZA) in blocks past the step's Hv
// columns.
template <int EPL, int K, bool kZ = false, WeightFormat ZF = WeightFormat::kAffine4, Act ZA = Act::kF32>
__global__ void __launch_bounds__(kScanWarps * 32, kZ ? 2 : 1)
    decode_step_kernel(DeltaNetDecodeStepArgs a, int z_sub) {
  if constexpr (kZ) {
    if (static_cast<int>(blockIdx.x) >= a.Hv) {
      let_next_kernel_start();
      return z_block<ZF, ZA>(a.z, a.z_x, a.z_norm, a.z_eps, a.z_out,
                             (static_cast<int64_t>(blockIdx.x) - a.Hv) * gridDim.y + blockIdx.y, z_sub);
    }
  }
  constexpr int kThreads = kScanWarps * 32, kQkPerThread = kMaxStepDk / kThreads;
  __shared__ float qs[kMaxStepDk], ks[kMaxStepDk], vs[kScanRowsPerBlock], scratch[32], beta_decay[2];
  const int h = blockIdx.x, kh = h / (a.Hv / a.Hk), tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31, j0 = blockIdx.y * kScanRowsPerBlock;
  const int64_t key_dim = int64_t{a.Hk} * a.Dk;

  // The state rows first: their loads are the longest, and no kernel of this step writes them (with
  // overlap they are requested while the input projection still runs).
  let_next_kernel_start();
  const int r0 = j0 + warp * kScanRowsPerWarp;
  float S[kScanRowsPerWarp][EPL];
  load_rows<EPL>(state_rows<EPL>(a.state, a.Dv, a.Dk, h, r0), a.Dk, S);
  // What the reads after the wait take besides the projections, requested before it, so that their
  // round trips (from DRAM: the step's weights stream through L2 in between) overlap the wait: each
  // channel's convolution weights and the gate constants into L1 (no kernel writes them), the channel's
  // window of last step's rows into L2.
  // This thread's q and k channels: f(qk, i, d, channel) for element d = tid + i · kThreads of q (qk 0)
  // and of k (qk 1) of the key head; and its value channel (tid < kScanRowsPerBlock).
  auto qk_channels = [&](auto&& f) {
#pragma unroll
    for (int qk = 0; qk < 2; ++qk)
#pragma unroll
      for (int i = 0; i < kQkPerThread; ++i) {
        const int d = tid + i * kThreads;
        if (d < a.Dk) f(qk, i, d, qk * key_dim + int64_t{kh} * a.Dk + d);
      }
  };
  const int64_t v_channel = 2 * key_dim + int64_t{h} * a.Dv + j0 + tid;
  auto request_channel = [&](int64_t c) {
    prefetch_l1(a.conv.w + c * K);
#pragma unroll
    for (int j = 0; j < K - 1; ++j) prefetch_l2(a.conv.state + j * a.conv.C + c);
  };
  qk_channels([&](int, int, int, int64_t c) { request_channel(c); });
  if (tid < kScanRowsPerBlock) request_channel(v_channel);
  if (tid == 0) prefetch_l1(a.a_neg + h), prefetch_l1(a.dt_bias + h);

  wait_for_previous_kernel();  // the projections

  const bool moves_qk = h % (a.Hv / a.Hk) == 0 && blockIdx.y == 0;
  float ss[2] = {0.0f, 0.0f};
  qk_channels([&](int qk, int, int d, int64_t c) {
    float hist[K - 1], x;
    const float v = conv_read<K>(a.conv, c, hist, x);
    if (moves_qk) conv_shift<K>(a.conv, c, hist, x);
    (qk == 0 ? qs : ks)[d] = v;
    ss[qk] += v * v;
  });
  if (tid < kScanRowsPerBlock) {
    float vh[K - 1], vx;
    vs[tid] = conv_read<K>(a.conv, v_channel, vh, vx);
    conv_shift<K>(a.conv, v_channel, vh, vx);
  }
  if (tid == 0) gates(a.b[h], a.a[h], a.a_neg[h], a.dt_bias[h], beta_decay[0], beta_decay[1]);
  // block_sum's barriers also order the staging above before the reads below.
  const float q_scale = inv_l2(block_sum(ss[0], scratch)) / sqrtf(static_cast<float>(a.Dk)),
              k_scale = inv_l2(block_sum(ss[1], scratch));

  float q[EPL], k[EPL], v[kScanRowsPerWarp];
#pragma unroll
  for (int e = 0; e < EPL; ++e) q[e] = qs[lane * EPL + e] * q_scale, k[e] = ks[lane * EPL + e] * k_scale;
#pragma unroll
  for (int r = 0; r < kScanRowsPerWarp; ++r) v[r] = vs[warp * kScanRowsPerWarp + r];
  const float o = token_step<EPL>(S, q, k, v, beta_decay[0], beta_decay[1]);
  if (lane < kScanRowsPerWarp) a.out[int64_t{h} * a.Dv + r0 + lane] = o;
  store_rows<EPL>(state_rows<EPL>(a.state_out, a.Dv, a.Dk, h, r0), a.Dk, S);
}

template <int EPL>
void launch_decode_step(const DeltaNetDecodeStepArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.Hv), static_cast<unsigned>(a.Dv / kScanRowsPerBlock));
  switch (a.conv.K) {
    case 2:
      return launch_kernel(decode_step_kernel<EPL, 2>, grid, dim3(kScanWarps * 32), 0, stream, a.overlap,
                           "deltanet_decode_step", a, 0);
    case 3:
      return launch_kernel(decode_step_kernel<EPL, 3>, grid, dim3(kScanWarps * 32), 0, stream, a.overlap,
                           "deltanet_decode_step", a, 0);
    case 4:
      return launch_kernel(decode_step_kernel<EPL, 4>, grid, dim3(kScanWarps * 32), 0, stream, a.overlap,
                           "deltanet_decode_step", a, 0);
    default:
      check(cudaErrorInvalidValue, "deltanet_decode_step: kernel size must be 2..4");
  }
}

// The step with the z projection along (Dk 128, conv kernel 4): its blocks take further columns of the
// grid, as many as cover z's rows.
template <WeightFormat F, Act A>
void launch_decode_step_with_z(const DeltaNetDecodeStepArgs& a, cudaStream_t stream) {
  constexpr int E = ChunkTraits<F>::kElems;
  const unsigned cols = static_cast<unsigned>(a.Dv / kScanRowsPerBlock);
  const int64_t z_blocks = blocks_for(a.z.rows, static_cast<int>(z_rows_per_block<F>(a.z.cols)));
  const dim3 grid(static_cast<unsigned>(a.Hv + (z_blocks + cols - 1) / cols), cols);
  const size_t smem = sizeof(float) * static_cast<size_t>(staged_floats<E>(a.z.cols) + 32);
  launch_kernel(decode_step_kernel<4, 4, true, F, A>, grid, dim3(kScanWarps * 32), smem, stream, a.overlap,
                "deltanet_decode_step", a, z_lanes<F>(a.z.cols));
}

}  // namespace

bool deltanet_decode_step_carries_z(int Dk, int conv_kernel, const DeviceMatrix& z) {
  const bool format = z.format == WeightFormat::kAffine4 || z.format == WeightFormat::kAffine8 ||
                      z.format == WeightFormat::kBF16;
  // The staged input within the default 48 KB of shared memory: bf16 rows stage the most, 24 KB for
  // 4096 inputs (at 8192 they would take 48 KB and more).
  return Dk == 128 && conv_kernel == 4 && format && z.cols % 64 == 0 && z.cols <= 4096;
}

void deltanet_conv(const DeltaNetConvArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  if (a.norm_heads > 0 && (!deltanet_conv_norms(a.norm_dim) || 2 * int64_t{a.norm_heads} * a.norm_dim > a.C))
    check(cudaErrorInvalidValue, "deltanet_conv: norms need heads of 32, 64 or 128 channels");
  switch (a.K) {
    case 2:
      launch_conv<2>(a, stream);
      break;
    case 3:
      launch_conv<3>(a, stream);
      break;
    case 4:
      launch_conv<4>(a, stream);
      break;
    default:
      check(cudaErrorInvalidValue, "deltanet_conv: kernel size must be 2..4");
  }
}

void deltanet_prepare(const DeltaNetPrepareArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  launch_kernel(prepare_kernel, dim3(static_cast<unsigned>(a.n)), dim3(a.qk_normalised ? 32 : 256), 0, stream,
                a.overlap, "deltanet_prepare", a);  // gates only: a warp
}

void deltanet_decode_step(const DeltaNetDecodeStepArgs& a, cudaStream_t stream) {
  if (a.conv.n != 1 || a.Dv % kScanRowsPerBlock != 0 || a.Hk <= 0 || a.Hv % a.Hk != 0)
    check(cudaErrorInvalidValue, "deltanet_decode_step: shape");
  if (a.conv.in_bf16) check(cudaErrorInvalidValue, "deltanet_decode_step: f32 input only");
  if (!a.conv.state_out || a.conv.state_out == a.conv.state || !a.state_out || a.state_out == a.state)
    check(cudaErrorInvalidValue, "deltanet_decode_step: the states after the step need buffers of their own");
  if (a.z.rows > 0) {
    if (!deltanet_decode_step_carries_z(a.Dk, a.conv.K, a.z))
      check(cudaErrorInvalidValue, "deltanet_decode_step: cannot carry this z projection");
    if (a.z_i16 && a.z.format == WeightFormat::kAffine4)
      return launch_decode_step_with_z<WeightFormat::kAffine4, Act::kI16>(a, stream);
    return with_device_format(a.z.format, "deltanet_decode_step: z format",
                              [&](auto f) { launch_decode_step_with_z<f.value, Act::kF32>(a, stream); });
  }
  switch (a.Dk) {
    case 32:
      launch_decode_step<1>(a, stream);
      break;
    case 64:
      launch_decode_step<2>(a, stream);
      break;
    case 128:
      launch_decode_step<4>(a, stream);
      break;
    default:
      check(cudaErrorInvalidValue, "deltanet_decode_step: Dk must be 32, 64 or 128");
  }
}

void deltanet_scan(const DeltaNetScanArgs& a, cudaStream_t stream) {
  if (a.Dv % kScanRowsPerBlock != 0 || a.Hv % a.Hk != 0)
    check(cudaErrorInvalidValue, "deltanet_scan: Dv must be a multiple of 32 and Hv of Hk");
  const dim3 grid(static_cast<unsigned>(a.Hv), static_cast<unsigned>(a.Dv / kScanRowsPerBlock));
  const auto launch = [&](auto kernel) {
    launch_kernel(kernel, grid, dim3(kScanWarps * 32), 0, stream, a.overlap, "deltanet_scan", a);
  };
  switch (a.Dk) {
    case 32:
      launch(scan_kernel<1>);
      break;
    case 64:
      launch(scan_kernel<2>);
      break;
    case 128:
      launch(scan_kernel<4>);
      break;
    default:
      check(cudaErrorInvalidValue, "deltanet_scan: Dk must be 32, 64 or 128");
  }
}

}  // namespace qwick::cuda
