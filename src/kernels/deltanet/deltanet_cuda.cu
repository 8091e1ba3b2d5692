// Gated DeltaNet stages on the GPU (contracts and layouts in deltanet_cuda.h).
#include <algorithm>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_launch.h"
#include "kernels/deltanet/deltanet_cuda.h"

namespace qwick::cuda {
namespace {

template <int K>
__global__ void conv_kernel(DeltaNetConvArgs a) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.C) return;
  float w[K], hist[K - 1];
#pragma unroll
  for (int j = 0; j < K; ++j) w[j] = a.w[c * K + j];
#pragma unroll
  for (int j = 0; j < K - 1; ++j) hist[j] = a.state[j * a.C + c];
  for (int64_t t = 0; t < a.n; ++t) {
    const float x = a.in[t * a.ld_in + c];
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < K - 1; ++j) acc += w[j] * hist[j];
    acc += w[K - 1] * x;
    a.out[t * a.ld_out + c] = siluf_(acc);
#pragma unroll
    for (int j = 0; j + 1 < K - 1; ++j) hist[j] = hist[j + 1];
    hist[K - 2] = x;
  }
#pragma unroll
  for (int j = 0; j < K - 1; ++j) a.state[j * a.C + c] = hist[j];
}

// The same convolution for chunks of many rows, a thread per (channel, run of kConvRows rows): row t
// reads rows t - K + 1 .. t of [window state; input]. The thread loads its channel's K weights once and
// slides the last K - 1 inputs along in registers, so each input is read once (plus K - 1 rows per
// run). (A thread per (row, channel) read every input K times and its weights once per row: 162 µs
// per 4096-row layer on the H200, about half the copy rate.) The window is left to
// conv_window_kernel, which runs after (a thread overwriting it here could race with one still
// reading it).
constexpr int kConvRows = 16;
template <int K>
__global__ void conv_rows_kernel(DeltaNetConvArgs a) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kConvRows;
  if (c >= a.C) return;
  float w[K], hist[K - 1];
#pragma unroll
  for (int j = 0; j < K; ++j) w[j] = a.w[c * K + j];
#pragma unroll
  for (int j = 0; j < K - 1; ++j) {
    const int64_t src = t0 - (K - 1) + j;  // < 0: position K - 1 + src of the window
    hist[j] = src < 0 ? a.state[(K - 1 + src) * a.C + c] : a.in[src * a.ld_in + c];
  }
  const int rows = a.n - t0 < kConvRows ? static_cast<int>(a.n - t0) : kConvRows;
  float x[kConvRows];
#pragma unroll
  for (int r = 0; r < kConvRows; ++r) x[r] = r < rows ? a.in[(t0 + r) * a.ld_in + c] : 0.0f;  // all in flight
#pragma unroll
  for (int r = 0; r < kConvRows; ++r) {
    if (r >= rows) break;
    float acc = 0.0f;  // the order of conv_kernel's sum
#pragma unroll
    for (int j = 0; j < K - 1; ++j) acc += w[j] * hist[j];
    acc += w[K - 1] * x[r];
#pragma unroll
    for (int j = 0; j + 1 < K - 1; ++j) hist[j] = hist[j + 1];
    hist[K - 2] = x[r];
    a.out[(t0 + r) * a.ld_out + c] = siluf_(acc);
  }
}

// The window after the chunk: the last K - 1 rows of [window state; input], per channel.
template <int K>
__global__ void conv_window_kernel(DeltaNetConvArgs a) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.C) return;
  float next[K - 1];
#pragma unroll
  for (int j = 0; j < K - 1; ++j) {
    const int64_t src = a.n - (K - 1) + j;
    next[j] = src < 0 ? a.state[(K - 1 + src) * a.C + c] : a.in[src * a.ld_in + c];
  }
#pragma unroll
  for (int j = 0; j < K - 1; ++j) a.state[j * a.C + c] = next[j];
}

template <int K>
void launch_conv(const DeltaNetConvArgs& a, cudaStream_t stream) {
  const unsigned blocks = blocks_for(a.C, 128);
  if (a.row_parallel && a.n > 1) {
    conv_rows_kernel<K><<<dim3(blocks, blocks_for(a.n, kConvRows)), 128, 0, stream>>>(a);
    conv_window_kernel<K><<<blocks, 128, 0, stream>>>(a);
  } else {
    conv_kernel<K><<<blocks, 128, 0, stream>>>(a);
  }
}

// One block per row: a warp per q or k head, then the gates.
__global__ void prepare_kernel(DeltaNetPrepareArgs a) {
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const float q_scale = 1.0f / sqrtf(static_cast<float>(a.Dk));
  for (int head = warp; head < 2 * a.Hk; head += warps) {
    float* x = a.qkv + t * a.ld + static_cast<int64_t>(head) * a.Dk;  // q heads, then k heads
    float ss = 0.0f;
    for (int i = lane; i < a.Dk; i += 32) ss += x[i] * x[i];
    ss = warp_sum(ss);
    const float inv = 1.0f / sqrtf(ss + 1e-6f);
    const float scale = head < a.Hk ? q_scale : 1.0f;
    for (int i = lane; i < a.Dk; i += 32) x[i] = x[i] * inv * scale;
  }
  for (int h = threadIdx.x; h < a.Hv; h += blockDim.x) {
    a.beta[t * a.Hv + h] = sigmoidf_(a.b[t * a.ld_ba + h]);
    a.decay[t * a.Hv + h] = expf(a.a_neg[h] * softplusf_(a.a[t * a.ld_ba + h] + a.dt_bias[h]));
  }
}

// Conv + SiLU of one channel for one row, updating its window.
template <int K>
__device__ __forceinline__ float conv_one(const DeltaNetConvArgs& a, int64_t c) {
  float acc = 0.0f, hist[K - 1];
#pragma unroll
  for (int j = 0; j < K - 1; ++j) hist[j] = a.state[j * a.C + c], acc += a.w[c * K + j] * hist[j];
  const float x = a.in[c];
  acc += a.w[c * K + K - 1] * x;
#pragma unroll
  for (int j = 0; j + 1 < K - 1; ++j) a.state[j * a.C + c] = hist[j + 1];
  a.state[(K - 2) * a.C + c] = x;
  return siluf_(acc);
}

constexpr int kPrepThreads = 128;

template <int K>
__global__ void __launch_bounds__(kPrepThreads) decode_prepare_kernel(DeltaNetDecodePrepArgs a) {
  __shared__ float scratch[32];
  const int qk_blocks = 2 * a.Hk;
  if (static_cast<int>(blockIdx.x) < qk_blocks) {  // q head or k head: conv, then the L2 norm over the head
    const int64_t c0 = static_cast<int64_t>(blockIdx.x) * a.Dk;
    float v[4], ss = 0.0f;  // Dk <= 4 · kPrepThreads
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int d = threadIdx.x + i * kPrepThreads;
      v[i] = d < a.Dk ? conv_one<K>(a.conv, c0 + d) : 0.0f;
      ss += v[i] * v[i];
    }
    ss = block_sum(ss, scratch);
    const float scale = (1.0f / sqrtf(ss + 1e-6f)) *
                        (static_cast<int>(blockIdx.x) < a.Hk ? 1.0f / sqrtf(static_cast<float>(a.Dk)) : 1.0f);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int d = threadIdx.x + i * kPrepThreads;
      if (d < a.Dk) a.conv.out[c0 + d] = v[i] * scale;
    }
    return;
  }
  const int vb = static_cast<int>(blockIdx.x) - qk_blocks;
  const int64_t c =
      static_cast<int64_t>(qk_blocks) * a.Dk + static_cast<int64_t>(vb) * kPrepThreads + threadIdx.x;
  if (c < a.conv.C) a.conv.out[c] = conv_one<K>(a.conv, c);
  if (vb == 0)
    for (int h = threadIdx.x; h < a.Hv; h += kPrepThreads) {
      a.beta[h] = sigmoidf_(a.b[h]);
      a.decay[h] = expf(a.a_neg[h] * softplusf_(a.a[h] + a.dt_bias[h]));
    }
}

constexpr int kScanRowsPerWarp = 8;
constexpr int kScanWarps = 4;
constexpr int kScanRowsPerBlock = kScanRowsPerWarp * kScanWarps;

template <int EPL>  // state values per lane per row = Dk / 32
__global__ void __launch_bounds__(kScanWarps * 32) scan_kernel(DeltaNetScanArgs a) {
  const int h = blockIdx.x, kh = h / (a.Hv / a.Hk);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j0 = blockIdx.y * kScanRowsPerBlock + warp * kScanRowsPerWarp;
  const int64_t key_dim = static_cast<int64_t>(a.Hk) * a.Dk;
  const int64_t q_off = static_cast<int64_t>(kh) * a.Dk + lane * EPL;
  const int64_t k_off = key_dim + q_off;
  const int64_t v_off = 2 * key_dim + static_cast<int64_t>(h) * a.Dv + j0;
  float* state = a.state + (static_cast<int64_t>(h) * a.Dv + j0) * a.Dk + lane * EPL;

  float S[kScanRowsPerWarp][EPL];
#pragma unroll
  for (int r = 0; r < kScanRowsPerWarp; ++r)
#pragma unroll
    for (int e = 0; e < EPL; ++e) S[r][e] = state[r * a.Dk + e];

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

    float sk[kScanRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kScanRowsPerWarp; ++r) {
      sk[r] = 0.0f;
#pragma unroll
      for (int e = 0; e < EPL; ++e) sk[r] += S[r][e] * ck[e];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int r = 0; r < kScanRowsPerWarp; ++r) sk[r] += __shfl_xor_sync(kFullMask, sk[r], o);
    float out[kScanRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kScanRowsPerWarp; ++r) {
      const float delta = cbeta * (cv[r] - cdecay * sk[r]);
      out[r] = 0.0f;
#pragma unroll
      for (int e = 0; e < EPL; ++e) {
        S[r][e] = cdecay * S[r][e] + delta * ck[e];
        out[r] += S[r][e] * cq[e];
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
    if (lane < kScanRowsPerWarp) a.out[t * a.ld_out + static_cast<int64_t>(h) * a.Dv + j0 + lane] = mine;
  }
#pragma unroll
  for (int r = 0; r < kScanRowsPerWarp; ++r)
#pragma unroll
    for (int e = 0; e < EPL; ++e) state[r * a.Dk + e] = S[r][e];
}

}  // namespace

void deltanet_conv(const DeltaNetConvArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
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
  check_launch("deltanet_conv");
}

void deltanet_prepare(const DeltaNetPrepareArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  prepare_kernel<<<static_cast<unsigned>(a.n), 256, 0, stream>>>(a);
  check_launch("deltanet_prepare");
}

void deltanet_decode_prepare(const DeltaNetDecodePrepArgs& a, cudaStream_t stream) {
  if (a.Dk > 4 * kPrepThreads || a.conv.n != 1)
    check(cudaErrorInvalidValue, "deltanet_decode_prepare: shape");
  const int64_t v_channels = a.conv.C - 2 * int64_t{a.Hk} * a.Dk;
  const unsigned blocks =
      static_cast<unsigned>(2 * a.Hk) + std::max(1u, blocks_for(v_channels, kPrepThreads));
  switch (a.conv.K) {
    case 2:
      decode_prepare_kernel<2><<<blocks, kPrepThreads, 0, stream>>>(a);
      break;
    case 3:
      decode_prepare_kernel<3><<<blocks, kPrepThreads, 0, stream>>>(a);
      break;
    case 4:
      decode_prepare_kernel<4><<<blocks, kPrepThreads, 0, stream>>>(a);
      break;
    default:
      check(cudaErrorInvalidValue, "deltanet_decode_prepare: kernel size must be 2..4");
  }
  check_launch("deltanet_decode_prepare");
}

void deltanet_scan(const DeltaNetScanArgs& a, cudaStream_t stream) {
  if (a.Dv % kScanRowsPerBlock != 0 || a.Hv % a.Hk != 0)
    check(cudaErrorInvalidValue, "deltanet_scan: Dv must be a multiple of 32 and Hv of Hk");
  const dim3 grid(static_cast<unsigned>(a.Hv), static_cast<unsigned>(a.Dv / kScanRowsPerBlock));
  switch (a.Dk) {
    case 32:
      scan_kernel<1><<<grid, kScanWarps * 32, 0, stream>>>(a);
      break;
    case 64:
      scan_kernel<2><<<grid, kScanWarps * 32, 0, stream>>>(a);
      break;
    case 128:
      scan_kernel<4><<<grid, kScanWarps * 32, 0, stream>>>(a);
      break;
    default:
      check(cudaErrorInvalidValue, "deltanet_scan: Dk must be 32, 64 or 128");
  }
  check_launch("deltanet_scan");
}

}  // namespace qwick::cuda
