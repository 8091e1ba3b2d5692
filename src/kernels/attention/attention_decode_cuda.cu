// Decode attention (flash-decoding with GQA packing) on the GPU (contract in attention_cuda.h).
//
// Splits on the tensor cores. Block (kv head j, split s), 4 warps; warp w takes the split's 16-key
// tiles w, w + 4, ..., each streamed with cp.async into the warp's own double buffer (K and V rows
// padded by 16 bytes, so ldmatrix is conflict-free) while the previous tile is computed. The G ≤ 8
// query heads of the kv head are the n = 8 side of m16n8k16, so nothing is padded:
//   Sᵀ = K·Qᵀ      16 keys × 8 heads, K from ldmatrix, Qᵀ fragments in registers for the whole split
//   online softmax per head (column): max over the 16 keys = 8 lanes × 2 rows, shuffles
//   Oᵀ += Vᵀ·Pᵀ    head_dim × 8 heads: Vᵀ from ldmatrix.trans, Pᵀ the transposed (movmatrix) S
//                  accumulators, so P never leaves registers
// q and p each enter as two bf16 parts (x = hi + lo, hi = bf16(x), lo = bf16(x − hi)): the products
// then carry about 16 mantissa bits, close to the CPU's f32 arithmetic, for twice the (idle)
// tensor-core work. The 4 warps merge through shared memory at the end and
// write the split's partial (attention_decode.cuh).
// A q8 cache (kv_q8.h) halves the bytes streamed: a stage holds the tile's bytes and scales, and the
// same ldmatrix loads give each lane four codes a register, which a permute and one f16 subtraction
// turn into two exact f16 pairs (q8_f16x2) for the same products in f16, q and p as two f16 parts. A
// K register's codes are 4 consecutive dims of one key (q's fragments are permuted to match); a
// transposed V register's are 2 keys × 2 dims, regrouped per dim (o's dims are permuted, o_dim). A
// key's scale multiplies its scores, a value's scale its p in the products (not the softmax's sum).
// (Converting each tile through a shared-memory f16 copy instead gained 12.9 % over bf16 at 128K, this
// kernel 18.8 %, each against bf16 in its own call.)
//
// Combine: block (query head h, 32 dims); the splits' weights exp(m_s − M) in shared memory, warp w
// sums splits w, w + 8, ... (coalesced rows), the warps' sums meet in shared memory, then the sigmoid
// output gate. With gate_proj the block computes its 32 gate rows first, as gemv would, before it
// waits for the splits: they run beside the splits' blocks instead of in the q|k|v projection ahead
// of them (which then fills the GPU in one wave).
#include "kernels/attention/attention_decode.cuh"
#include "kernels/attention/kv_q8.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/tensor_core.cuh"
#include "kernels/matmul_cuda/gemv_core.cuh"

#include <cuda_fp16.h>

#include <algorithm>

namespace qwick::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kKeys = 16;  // keys per tile (the m side of Sᵀ)
constexpr int kStages = 2;
constexpr int kMaxGroup = 8;  // query heads per kv head (the n side)
constexpr int kMaxSplits = 1024;

template <int HD, bool kQ8>
struct DecodeSmem {
  // A stage: K rows then V rows, each padded by 16 bytes (ldmatrix's 8 rows then fall in different
  // banks); bf16 rows, or q8 bytes followed by the 2·kKeys scales (keys', then values').
  static constexpr int kRowBytes = kQ8 ? HD + 16 : 2 * (HD + 8);
  static constexpr int kStageBytes = 2 * kKeys * kRowBytes + (kQ8 ? 2 * kKeys * 4 : 0);
  // The merge reuses the stages: o [kWarps][kMaxGroup][kMergeLd], then m and l [kWarps][kMaxGroup]. A
  // head's o row is padded by 4 floats, so the 4 heads a publishing store spans fall in different banks.
  static constexpr int kMergeLd = HD + 4;
  // At least 132 KB, bf16's size at head_dim 256: two blocks never share a multiprocessor (the splits
  // give each one block), and the shared-memory step the driver then configures (164 KB) leaves room
  // beside the block for one of the combine's, whose output-gate rows stream while the splits run.
  // (q8's 70 KB let two blocks share one, likely leaving others idle: 454.5 tokens/s at 128K against
  // 468.6 at 120 KB. At 120 KB the 132 KB step left no room: the combine's blocks started
  // as the splits ended, −2.1 % at 4K against bf16, −0.3 % at 132 KB.)
  static constexpr size_t kOneBlockPerSm = 132 * 1024;
  static constexpr size_t kMergeBytes = sizeof(float) * kWarps * kMaxGroup * (kMergeLd + 2);
  static constexpr size_t kBytes =
      std::max({size_t{kWarps} * kStages * kStageBytes, kMergeBytes, kOneBlockPerSm});
};

// x as a bf16 (kF16: f16) pair (hi, lo) with x ≈ hi + lo, two values to a word each.
template <bool kF16>
__device__ __forceinline__ void split_x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  if constexpr (kF16) {
    const __half2 h = __floats2half2_rn(x0, x1);
    const float2 back = __half22float2(h);
    const __half2 l = __floats2half2_rn(x0 - back.x, x1 - back.y);
    hi = *reinterpret_cast<const uint32_t*>(&h), lo = *reinterpret_cast<const uint32_t*>(&l);
  } else {
    hi = pack_bf16x2(x0, x1);
    lo = pack_bf16x2(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));
  }
}
template <bool kF16>
__device__ __forceinline__ void mma_x(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kF16)
    mma_f16(d, a[0], a[1], a[2], a[3], b0, b1);
  else
    mma_bf16(d, a[0], a[1], a[2], a[3], b0, b1);
}

// Two of w's four q8 codes u (the bytes `select` picks: 0 and 1, 2 and 3, 0 and 2, or 1 and 3) as the
// f16 pair of their values u − 128: the permute makes each the f16 1024 + u (0x64 over the byte: unit
// steps), and the subtraction of 1152 is exact.
constexpr uint32_t kBytes01 = 0x4140, kBytes23 = 0x4342, kBytes02 = 0x4240, kBytes13 = 0x4341;
static_assert(kKvQ8Offset == 128, "q8_f16x2 subtracts 1024 + 128");
__device__ __forceinline__ uint32_t q8_f16x2(uint32_t w, uint32_t select) {
  const uint32_t biased = __byte_perm(w, 0x64646464u, select);
  uint32_t out;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(out) : "r"(biased), "r"(0x64806480u));
  return out;
}

// The power of two 2^k with x·2^k in [1, 2) (x > 0 finite; 2^127 for 0): scaling by it is exact, and
// brings values whose largest is x into f16's normal range.
__device__ __forceinline__ float pow2_normalizer(float x) {
  return __int_as_float((254 - ((__float_as_int(x) >> 23) & 0xff)) << 23);
}

template <int HD, bool kQ8>
__global__ void __launch_bounds__(kWarps * 32) decode_mma_kernel(AttentionDecodeArgs a) {
  using L = DecodeSmem<HD, kQ8>;
  constexpr int kRowBytes = L::kRowBytes, kChunks = HD * (kQ8 ? 1 : 2) / 16;  // 16-byte chunks per row
  extern __shared__ uint4 smem4[];
  const int kvh = blockIdx.x, split = blockIdx.y, G = a.n_heads / a.n_kv_heads;
  let_next_kernel_start();
  // The position counter moves only at the end of a step (the sampler; the step's first kernel is a
  // plain launch), and every cache row but the newest is from earlier steps: a warp's first tile is
  // requested before waiting for attention_prep when it does not hold the newest row.
  const auto [begin, end] = split_range(a, split);
  const int64_t newest = static_cast<int64_t>(*a.d_pos);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  uint8_t* const stages = reinterpret_cast<uint8_t*>(smem4) + warp * kStages * L::kStageBytes;
  const int64_t head_row = static_cast<int64_t>(kvh) * a.capacity;
  const int64_t row_bytes = HD * (kQ8 ? 1 : 2);
  const uint8_t* kc = static_cast<const uint8_t*>(a.k_cache) + head_row * row_bytes;
  const uint8_t* vc = static_cast<const uint8_t*>(a.v_cache) + head_row * row_bytes;
  // Keys [key0, key0 + 16) into stage b, zero past the range (never-written cache rows may hold NaN).
  auto issue = [&](int64_t key0, int b) {
    uint8_t* st = stages + b * L::kStageBytes;
    for (int i = lane; i < kKeys * kChunks; i += 32) {
      const int r = i / kChunks, c = i % kChunks;
      const int64_t p = key0 + r;
      const bool valid = p < end;
      cp_async16(st + r * kRowBytes + c * 16, kc + (valid ? p : 0) * row_bytes + c * 16, valid);
      cp_async16(st + (kKeys + r) * kRowBytes + c * 16, vc + (valid ? p : 0) * row_bytes + c * 16, valid);
    }
    if constexpr (kQ8) {
      static_assert(kKeys * 2 == 32, "a lane per scale of a tile");
      const int64_t p = key0 + (lane % kKeys);  // lanes 0-15 the keys' scales, 16-31 the values'
      const bool valid = p < end;
      cp_async4(reinterpret_cast<float*>(st + 2 * kKeys * kRowBytes) + lane,
                (lane < kKeys ? a.k_scale : a.v_scale) + head_row + (valid ? p : 0), valid);
    }
    cp_async_commit();
  };
  constexpr int64_t kStride = kWarps * kKeys;
  const int64_t first = begin + warp * kKeys;
  const bool early = first < end && first + kKeys <= newest;
  if (early) issue(first, 0);
  wait_for_previous_kernel();  // q and the newest cache row come from attention_prep
  if (first < end && !early) issue(first, 0);

  // Qᵀ fragments, scaled: b0 = q[head g][kk + 2t, +1], b1 = q[head g][kk + 2t + 8, +9]; q8: the K
  // fragments hold dims kk + 4t .. + 3 (four codes of a row in one register), so b0 = q[kk + 4t, +1],
  // b1 = q[kk + 4t + 2, +3], and q is scaled into f16's normal range by q_norm (the scores back by its
  // inverse).
  float qv[HD / 16][2][2];
  const float* q = a.q + static_cast<int64_t>(kvh * G + g) * HD;
  float qmax = 0.0f;
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float2 v = make_float2(0.0f, 0.0f);
      if (g < G) v = *reinterpret_cast<const float2*>(q + ks * 16 + (kQ8 ? 4 * t + 2 * j : 8 * j + 2 * t));
      qv[ks][j][0] = v.x * a.scale, qv[ks][j][1] = v.y * a.scale;
      qmax = fmaxf(qmax, fmaxf(fabsf(qv[ks][j][0]), fabsf(qv[ks][j][1])));
    }
  const float q_norm = kQ8 ? pow2_normalizer(warp_max(qmax)) : 1.0f, q_unnorm = 1.0f / q_norm;
  uint32_t qh[HD / 16][2], ql[HD / 16][2];
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      split_x2<kQ8>(qv[ks][j][0] * q_norm, qv[ks][j][1] * q_norm, qh[ks][j], ql[ks][j]);

  // Oᵀ: dims × heads 2t, 2t + 1 (o_dim). q8: each value's p also carries the values' scale, times
  // v_norm, a power of two from the largest value scale seen so far (so p·scale·v_norm ≤ 2 fits f16,
  // and never grows: o is rescaled by the ratio, exactly, and divided by the last v_norm at the end).
  float o[HD / 16][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // heads 2t + e; l summed over g at the end
  float vmax = 0.0f, v_norm = pow2_normalizer(0.0f);
  // ldmatrix row addresses: lanes 8i .. 8i + 7 give the rows of matrix i (bytes into the stage).
  const int krow = (lane & 7) + ((lane >> 3) & 1) * 8, kcol = (lane >> 4) * 16;  // K: a0 a1 a2 a3
  const int vrow = (lane & 7) + ((lane >> 4) & 1) * 8, vcol = ((lane >> 3) & 1) * 16;
  int b = 0;
  for (int64_t key0 = first; key0 < end; key0 += kStride, b ^= 1) {
    if (key0 + kStride < end)
      issue(key0 + kStride, b ^ 1);
    else
      cp_async_commit();  // one group per tile either way
    cp_async_wait<1>();
    __syncwarp();
    const uint8_t* ks = stages + b * L::kStageBytes;
    const uint8_t* vs = ks + kKeys * kRowBytes;

    float s[4] = {};
    if constexpr (kQ8) {
      // Per 32 dims one ldmatrix: k4[0] key g, dims 4t .. + 3; k4[1] key g + 8; k4[2], k4[3] the same
      // 16 dims on; each register two A pairs (its dims 0, 1 and 2, 3).
#pragma unroll
      for (int c = 0; c < HD / 32; ++c) {
        uint32_t k4[4];
        ldmatrix_x4(k4, reinterpret_cast<const uint16_t*>(ks + krow * kRowBytes + c * 32 + kcol));
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t af[4] = {q8_f16x2(k4[2 * h], kBytes01), q8_f16x2(k4[2 * h + 1], kBytes01),
                                  q8_f16x2(k4[2 * h], kBytes23), q8_f16x2(k4[2 * h + 1], kBytes23)};
          mma_x<true>(s, af, qh[2 * c + h][0], qh[2 * c + h][1]);
          mma_x<true>(s, af, ql[2 * c + h][0], ql[2 * c + h][1]);
        }
      }
      const float* scales = reinterpret_cast<const float*>(ks + 2 * kKeys * kRowBytes);
      const float k0 = scales[g] * q_unnorm, k1 = scales[g + 8] * q_unnorm;
      s[0] *= k0, s[1] *= k0, s[2] *= k1, s[3] *= k1;
    } else {
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        uint32_t k4[4];
        ldmatrix_x4(k4, reinterpret_cast<const uint16_t*>(ks + krow * kRowBytes + kk * 32 + kcol));
        mma_x<false>(s, k4, qh[kk][0], qh[kk][1]);
        mma_x<false>(s, k4, ql[kk][0], ql[kk][1]);
      }
    }
    // s[e] = key g, s[2 + e] = key g + 8, both for head 2t + e. The tile's first key is in range,
    // so every column's max is finite.
    if (key0 + g >= end) s[0] = s[1] = -INFINITY;
    if (key0 + g + 8 >= end) s[2] = s[3] = -INFINITY;
    float c[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float mx = fmaxf(s[e], s[2 + e]);
#pragma unroll
      for (int off = 4; off < 32; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, off));
      const float m_new = fmaxf(m[e], mx);
      c[e] = expf(m[e] - m_new);
      s[e] = expf(s[e] - m_new), s[2 + e] = expf(s[2 + e] - m_new);
      l[e] = l[e] * c[e] + s[e] + s[2 + e];
      m[e] = m_new;
    }
    float w0 = 1.0f, w1 = 1.0f;  // keys g, g + 8: what their p carries into the products
    if constexpr (kQ8) {
      const float* scales = reinterpret_cast<const float*>(ks + 2 * kKeys * kRowBytes) + kKeys;
      float tile_max = fmaxf(scales[g], scales[g + 8]);
#pragma unroll
      for (int off = 4; off < 32; off <<= 1)
        tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, off));
      if (tile_max > vmax) {  // (uniform over the warp)
        vmax = tile_max;
        const float norm = pow2_normalizer(vmax), ratio = norm / v_norm;
        c[0] *= ratio, c[1] *= ratio;
        v_norm = norm;
      }
      w0 = scales[g] * v_norm, w1 = scales[g + 8] * v_norm;
    }
#pragma unroll
    for (int mt = 0; mt < HD / 16; ++mt)
      o[mt][0] *= c[0], o[mt][1] *= c[1], o[mt][2] *= c[0], o[mt][3] *= c[1];
    // Pᵀ as B fragments: (keys g | g + 8) × heads (2t, 2t + 1), transposed to heads g × keys (2t, 2t + 1).
    uint32_t ph[2], pl[2];
    split_x2<kQ8>(s[0] * w0, s[1] * w0, ph[0], pl[0]);
    split_x2<kQ8>(s[2] * w1, s[3] * w1, ph[1], pl[1]);
#pragma unroll
    for (int i = 0; i < 2; ++i) ph[i] = movmatrix_trans(ph[i]), pl[i] = movmatrix_trans(pl[i]);
    if constexpr (kQ8) {
      // Per 32 dims one transposing ldmatrix: v4[i] holds keys 2t, 2t + 1 (+ 8 for i ≥ 2) at dims
      // 2g, 2g + 1 (+ 16 for odd i), a byte each; its bytes 0, 2 are the A pair of dim 2g, bytes 1, 3
      // that of dim 2g + 1: o[2c] takes the even dims, o[2c + 1] the odd ones (o_dim).
#pragma unroll
      for (int c = 0; c < HD / 32; ++c) {
        uint32_t v4[4];
        ldmatrix_x4_trans(v4, reinterpret_cast<const uint16_t*>(vs + vrow * kRowBytes + c * 32 + vcol));
#pragma unroll
        for (int odd = 0; odd < 2; ++odd) {
          const uint32_t sel = odd ? kBytes13 : kBytes02;
          const uint32_t af[4] = {q8_f16x2(v4[0], sel), q8_f16x2(v4[1], sel), q8_f16x2(v4[2], sel),
                                  q8_f16x2(v4[3], sel)};
          mma_x<true>(o[2 * c + odd], af, ph[0], ph[1]);
          mma_x<true>(o[2 * c + odd], af, pl[0], pl[1]);
        }
      }
    } else {
#pragma unroll
      for (int mt = 0; mt < HD / 16; ++mt) {
        uint32_t v4[4];
        ldmatrix_x4_trans(v4, reinterpret_cast<const uint16_t*>(vs + vrow * kRowBytes + mt * 32 + vcol));
        mma_x<false>(o[mt], v4, ph[0], ph[1]);
        mma_x<false>(o[mt], v4, pl[0], pl[1]);
      }
    }
    __syncwarp();  // every lane is done with stage b before it is refilled
  }
  cp_async_wait<0>();
  if constexpr (kQ8) {
    const float v_unnorm = 1.0f / v_norm;  // (exact: a power of two)
#pragma unroll
    for (int mt = 0; mt < HD / 16; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[mt][i] *= v_unnorm;
  }
  // Row r (g or g + 8) of o[mt]'s accumulators: dim mt·16 + r; q8: 32·(mt / 2) + 16·(r ≥ 8) + 2·(r % 8) + mt
  // % 2.
  auto o_dim = [](int mt, int r) {
    return kQ8 ? 32 * (mt / 2) + 16 * (r / 8) + 2 * (r % 8) + mt % 2 : mt * 16 + r;
  };

  // Merge the warps: each publishes (o, m, l) per head, then every thread weighs its elements.
#pragma unroll
  for (int e = 0; e < 2; ++e)
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) l[e] += __shfl_xor_sync(kFullMask, l[e], off);
  __syncthreads();  // all tiles consumed: the buffers become the merge scratch
  constexpr int kOs = L::kMergeLd;
  float* os = reinterpret_cast<float*>(smem4);  // [kWarps][kMaxGroup][kOs]
  float* ms = os + kWarps * kMaxGroup * kOs;    // [kWarps][kMaxGroup]
  float* ls = ms + kWarps * kMaxGroup;
  float* ow = os + warp * kMaxGroup * kOs;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int h = 2 * t + e;
#pragma unroll
    for (int mt = 0; mt < HD / 16; ++mt) {
      ow[h * kOs + o_dim(mt, g)] = o[mt][e];
      ow[h * kOs + o_dim(mt, g + 8)] = o[mt][2 + e];
    }
    if (g == 0) ms[warp * kMaxGroup + h] = m[e], ls[warp * kMaxGroup + h] = l[e];
  }
  __syncthreads();
  // Each warp's weight exp(m_w - M) per head in every thread's registers (0 for a warp without keys,
  // whose o and l are 0), so the element loop below is loads and multiply-adds alone (weighing each
  // element with shared-memory reads and a branch per warp took ~5 µs, the kernel's longest phase).
  float cw[kWarps][kMaxGroup], M[kMaxGroup];
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    M[h] = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M[h] = h < G ? fmaxf(M[h], ms[w * kMaxGroup + h]) : M[h];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = h < G ? ms[w * kMaxGroup + h] : -INFINITY;
      cw[w][h] = mw == -INFINITY ? 0.0f : expf(mw - M[h]);
    }
  }
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    if (h >= G) break;
    float* out = partial_row(a, kvh * G + h, split);
#pragma unroll
    for (int d = threadIdx.x; d < HD; d += kWarps * 32) {
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += cw[w][h] * os[(w * kMaxGroup + h) * kOs + d];
      out[d] = v;
    }
    if (threadIdx.x == 0) {
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += cw[w][h] * ls[w * kMaxGroup + h];
      out[HD] = M[h], out[HD + 1] = v;
    }
  }
}

constexpr int kCombineWarps = 8, kCombineDims = 32;
constexpr int kGateRowsMaxSmem = 48 * 1024;  // the staged gate input (no opt-in needed)

// Rows row0 .. row0 + kCombineDims - 1 of the output gate, sigmoid(gate_proj · x'), into `out`: a
// group of `sub` lanes (gemv_group_lanes) four consecutive rows with gemv's dot_rows, the input staged
// from L2 (the combine has not waited for any kernel; see AttentionDecodeArgs::gate_proj).
template <WeightFormat F>
__device__ __forceinline__ void gate_rows(const AttentionDecodeArgs& a, int sub, int64_t row0, float* xs,
                                          float* out) {
  constexpr int E = ChunkTraits<F>::kElems, kRows = 4, kUnroll = 2;
  const DeviceMatrix& m = a.gate_proj;
  const LaneGroups lanes = lane_groups(sub);
  const int lane = threadIdx.x & 31, lane_g = lanes.index(lane);
  const int first = ((threadIdx.x >> 5) * lanes.per_warp() + lanes.group(lane)) * kRows;
  const int64_t groups = row_groups(m);
  WeightRow rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    rows[r] = first + r < kCombineDims ? weight_row(m, groups, row0 + first + r) : WeightRow{};
  float factor = 1.0f, acc[kRows];
  dot_rows<F, kRows, kUnroll>(
      rows, m.cols / E, m.group_size, sub, lane_g, xs, true,
      [&] {
        if (a.gate_norm)
          factor =
              stage_norm<E, 1, true>(a.gate_x, a.gate_norm, a.eps, m.cols, xs, xs + staged_floats<E>(m.cols));
        else
          stage_plain<E, 1, true>(a.gate_x, m.cols, xs, threadIdx.x, blockDim.x);
        __syncthreads();
      },
      acc);
  if (lane_g != 0) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    if (first + r < kCombineDims) out[first + r] = sigmoidf_(factor * acc[r]);
}

// kGateRows: the gate from gate_proj (gate_rows, before the wait), F its format; else from a.gate.
template <WeightFormat F, bool kGateRows>
__global__ void __launch_bounds__(kCombineWarps * 32, 2) combine_kernel(AttentionDecodeArgs a, int sub) {
  __shared__ float coef[kMaxSplits], scratch[32], sums[kCombineWarps][kCombineDims], gate[kCombineDims];
  extern __shared__ uint4 smem4[];  // kGateRows: the staged gate input
  const int h = blockIdx.x, hd = a.head_dim, d = blockIdx.y * kCombineDims + (threadIdx.x & 31);
  const int warp = threadIdx.x >> 5;
  let_next_kernel_start();
  if constexpr (kGateRows)
    gate_rows<F>(a, sub, int64_t{h} * hd + blockIdx.y * kCombineDims, reinterpret_cast<float*>(smem4), gate);
  wait_for_previous_kernel();  // the partials
  float mx = -INFINITY;
  for (int s = threadIdx.x; s < a.splits; s += blockDim.x) mx = fmaxf(mx, partial_row(a, h, s)[hd]);
  const float M = block_max(mx, scratch);
  float den = 0.0f;
  for (int s = threadIdx.x; s < a.splits; s += blockDim.x) {
    const float* p = partial_row(a, h, s);
    const float c = p[hd] == -INFINITY ? 0.0f : expf(p[hd] - M);  // an empty range adds nothing
    coef[s] = c;
    den += c * p[hd + 1];
  }
  den = block_sum(den, scratch);  // (its barriers also publish coef and the gate rows)
  float num = 0.0f;
#pragma unroll 4
  for (int s = warp; s < a.splits; s += kCombineWarps) num += partial_row(a, h, s)[d] * coef[s];
  sums[warp][threadIdx.x & 31] = num;
  __syncthreads();
  if (warp != 0) return;
  num = 0.0f;
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) num += sums[w][threadIdx.x];
  float out = num / den;
  if constexpr (kGateRows)
    out *= gate[threadIdx.x];
  else if (a.gate)
    out *= sigmoidf_(a.gate[h * a.gate_stride + d]);
  a.out[static_cast<int64_t>(h) * hd + d] = out;
}

template <WeightFormat F>
size_t gate_rows_smem(const DeviceMatrix& m) {
  return sizeof(float) * static_cast<size_t>(staged_floats<ChunkTraits<F>::kElems>(m.cols) + 32);
}

void launch_combine(const AttentionDecodeArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.n_heads), static_cast<unsigned>(a.head_dim / kCombineDims)),
      block(kCombineWarps * 32);
  if (a.gate_proj.rows == 0)
    return launch_kernel(combine_kernel<WeightFormat::kBF16, false>, grid, block, 0, stream, a.overlap,
                         "attention_decode_combine", a, 0);
  if (!attention_gate_rows_fit(a.gate_proj) || a.gate_proj.rows != int64_t{a.n_heads} * a.head_dim ||
      !aligned16(a.gate_x) || (a.gate_norm && !aligned16(a.gate_norm)))
    check(cudaErrorInvalidValue,
          "attention_decode: the gate rows need n_heads · head_dim rows of a 4/8-bit or bf16 matrix whose "
          "staged input fits 48 KB, its input (and norm) 16-byte aligned");
  with_device_format(a.gate_proj.format, "attention_decode: gate rows format", [&](auto f) {
    constexpr WeightFormat F = decltype(f)::value;
    const int sub = gemv_group_lanes(a.gate_proj.cols / ChunkTraits<F>::kElems);
    launch_kernel(combine_kernel<F, true>, grid, block, gate_rows_smem<F>(a.gate_proj), stream, a.overlap,
                  "attention_decode_combine", a, sub);
  });
}

template <int HD, bool kQ8>
void launch_mma_kernel(const AttentionDecodeArgs& a, cudaStream_t stream) {
  static bool configured = false;
  if (!configured) {
    check(cudaFuncSetAttribute(decode_mma_kernel<HD, kQ8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(DecodeSmem<HD, kQ8>::kBytes)),
          "attention_decode: shared memory limit");
    configured = true;
  }
  const dim3 grid(static_cast<unsigned>(a.n_kv_heads), static_cast<unsigned>(a.splits));
  launch_kernel(decode_mma_kernel<HD, kQ8>, grid, dim3(kWarps * 32), DecodeSmem<HD, kQ8>::kBytes, stream,
                a.overlap, "attention_decode", a);
}
template <int HD>
void launch_mma(const AttentionDecodeArgs& a, cudaStream_t stream) {
  if (a.k_scale)
    launch_mma_kernel<HD, true>(a, stream);
  else
    launch_mma_kernel<HD, false>(a, stream);
}

}  // namespace

bool attention_gate_rows_fit(const DeviceMatrix& m) {
  if (m.format != WeightFormat::kAffine4 && m.format != WeightFormat::kAffine8 &&
      m.format != WeightFormat::kBF16)
    return false;
  bool fits = false;
  with_device_format(m.format, "attention_decode: gate rows format", [&](auto f) {
    fits = m.cols % 64 == 0 && gate_rows_smem<decltype(f)::value>(m) <= kGateRowsMaxSmem;
  });
  return fits;
}

int attention_decode_splits(int n_kv_heads) {
  return std::max(1, std::min(kMaxSplits, multiprocessor_count() / std::max(1, n_kv_heads)));
}

void attention_decode(const AttentionDecodeArgs& a, cudaStream_t stream) {
  if (a.n_heads % a.n_kv_heads != 0 || a.n_heads / a.n_kv_heads > kMaxGroup)
    check(cudaErrorInvalidValue, "attention_decode: at most 8 query heads per kv head");
  if (a.splits < 1 || a.splits > kMaxSplits) check(cudaErrorInvalidValue, "attention_decode: 1..1024 splits");
  if (a.head_dim != 32 && a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256)
    check(cudaErrorInvalidValue, "attention_decode: head_dim must be 32, 64, 128 or 256");
  if (a.head_dim == 32)
    launch_mma<32>(a, stream);
  else if (a.head_dim == 64)
    launch_mma<64>(a, stream);
  else if (a.head_dim == 128)
    launch_mma<128>(a, stream);
  else
    launch_mma<256>(a, stream);
  launch_combine(a, stream);
}

}  // namespace qwick::cuda
