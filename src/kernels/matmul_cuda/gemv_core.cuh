// The inner loop shared by every decode matrix-vector kernel (gemv_cuda.cu, moe/moe_decode_cuda.cu):
// a group of `sub` lanes computes the dot products of R weight rows with one input vector that the
// block has staged in shared memory.
//
// Lane j of a group reads chunks j, j + sub, ... of each row (16 bytes per load, coalesced across the
// group), all R·U loads of an iteration issued before the first is used, weights streamed past L1.
// The first iteration's weights are requested before the input is staged: they never depend on the
// previous kernel, so their latency overlaps the wait for it and the staging.
//
// Staging: the block reads the input once with coalesced loads and writes it, transformed, into
// shared memory, chunk c of E floats at c·(E + 4): the padding puts the eight lanes of each 16-byte
// access phase on distinct banks, so a lane's chunk reads are conflict-free. (Each lane reading its
// own chunk straight from global memory would touch 32 cache lines per instruction.) The transforms
// fuse the op that produced the input:
//   stage_plain       x as stored
//   stage_norm        RMSNorm: x·w, returning rsqrt(mean(x²) + eps) to scale the finished dots (a
//                     scalar, so it moves out of the sum)
//   stage_gated_norm  per head of D values: w·(x·rsqrt(mean_head(x²) + eps))·silu(z), a warp per head
// For affine formats the dot uses Σ_i (q_i·s + b)·x_i = s·Σ q_i·x_i + b·Σ x_i.
//
// The staged form (Act): f32 as above, or int16 for 4-bit weights (stage_i16_quad, written by the
// staging's own pass, dp2a dots): per chunk of 32 values q = rint(x·32767/max|x|), each value within
// about max|x|/65534 of its own.
#pragma once

#include "kernels/matmul_cuda/dequant.cuh"

namespace qwick::cuda {

// A 16-byte load of data no kernel writes during the step, not kept in L1.
__device__ __forceinline__ uint4 load_weights(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// One weight row: its bytes and (affine) its groups' scales and biases; data null: no such row.
struct WeightRow {
  const uint8_t* data = nullptr;
  const uint16_t* scales = nullptr;
  const uint16_t* biases = nullptr;
};
__device__ __forceinline__ WeightRow weight_row(const DeviceMatrix& m, int64_t groups, int64_t row) {
  WeightRow r;
  if (row < 0 || row >= m.rows) return r;
  r.data = m.data + row * m.row_bytes;
  if (m.group_size > 0) {
    r.scales = m.scales + row * groups;
    r.biases = m.biases + row * groups;
  }
  return r;
}
// rows[0, R) = rows row0 .. row0 + R - 1 of m; `groups` is row_groups(m), which the caller computes
// once per matrix (per row, it was computed again under each row's bounds check).
template <int R>
__device__ __forceinline__ void weight_rows(const DeviceMatrix& m, int64_t groups, int64_t row0,
                                            WeightRow* rows) {
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = weight_row(m, groups, row0 + r);
}

// A warp's lanes in groups of `sub` lanes (a power of two, gemv_group_lanes): a lane's group, its index
// in the group and the groups per warp, as shifts. (Divisions by a runtime sub cost ~20 instructions
// each, ahead of the first weight load.)
struct LaneGroups {
  int shift;  // log2(sub)
  __device__ __forceinline__ int group(int lane) const { return lane >> shift; }
  __device__ __forceinline__ int index(int lane) const { return lane & ((1 << shift) - 1); }
  __device__ __forceinline__ int per_warp() const { return 32 >> shift; }
};
__device__ __forceinline__ LaneGroups lane_groups(int sub) {
  return LaneGroups{__ffs(sub) - 1};
}

// The form of the staged input dot_rows reads (see the top of this file).
enum class Act { kF32, kI16 };

// ---- staging -------------------------------------------------------------------------------------
// Floats of shared memory for a staged input of n values (f32; the int16 form takes less).
template <int E>
constexpr int64_t staged_floats(int64_t n) {
  return (n + E - 1) / E * (E + 4);
}
template <int E>
__device__ __forceinline__ int64_t staged_at(int64_t i) {
  return i / E * (E + 4) + i % E;
}

// The n floats at p requested into this SM's L1 by the block, a 128-byte line a thread: constants that a
// staging reads after its wait (RMSNorm's weights), whose round trip (from DRAM: the step's weights
// stream through L2 in between) then overlaps the wait instead of following it.
__device__ __forceinline__ void prefetch_to_l1(const float* p, int64_t n) {
  for (int64_t i = 32 * static_cast<int64_t>(threadIdx.x); i < n; i += 32 * static_cast<int64_t>(blockDim.x))
    prefetch_l1(p + i);
}

// Four inputs; kL2: from L2, past this SM's L1 (data another block of the running kernel wrote, or
// that a kernel which has not been waited for may have left stale in L1).
template <bool kL2>
__device__ __forceinline__ float4 load_input4(const float* p) {
  if constexpr (kL2)
    return __ldcg(reinterpret_cast<const float4*>(p));
  else
    return *reinterpret_cast<const float4*>(p);
}

// int16 activations for 4-bit weights. Chunk c (32 values) becomes kI16ChunkBytes at s + c·kI16ChunkBytes:
// for each word k of a row chunk's codes (values 8k .. 8k + 7) 16 bytes of int16 pairs, (x0, x2) (x1, x3)
// (x4, x6) (x5, x7) of those 8, the partners of the low nibbles' bytes 0-1, the high nibbles' bytes 0-1,
// then bytes 2-3 of each (dp2a.lo / .hi); then d = max|x| / kI16Max and the chunk's exact Σx as floats.
// The 80-byte stride keeps a lane's 16-byte reads conflict-free. A chunk's dot of 32 codes is at most
// 32·15·32767 < 2^24 in magnitude, so its int32 sum converts to f32 exactly.
inline constexpr int kI16ChunkBytes = 80;
inline constexpr float kI16Max = 32767.0f;
// rint(v·inv) for |v·inv| < 2^22, in one FMA (the exact product, rounded once) and an add: the
// conversion instruction runs at a quarter of the FMA's rate.
__device__ __forceinline__ int round_scaled(float v, float inv) {
  return __float_as_int(fmaf(v, inv, 12582912.0f)) - 0x4B400000;
}
// Two int16 (a low, b high) in a word.
__device__ __forceinline__ uint32_t i16_pair(int a, int b) {
  return __byte_perm(static_cast<uint32_t>(a), static_cast<uint32_t>(b), 0x5410);
}
// kI16Max / amax, the factor that scales a chunk onto the int16 range (0 for a chunk of zeros). An
// approximate reciprocal: q need only be near x / d, which the dot's d then undoes; an exact division
// is some ten dependent instructions on the staging's path.
__device__ __forceinline__ float i16_factor(float amax) {
  return amax > 0.0f ? __fdividef(kI16Max, amax) : 0.0f;
}
// Four consecutive values of a chunk (a word's first or second half) as the layout above has them:
// (x0, x2), (x1, x3).
__device__ __forceinline__ uint2 i16_quad(float x0, float x1, float x2, float x3, float inv) {
  return make_uint2(i16_pair(round_scaled(x0, inv), round_scaled(x2, inv)),
                    i16_pair(round_scaled(x1, inv), round_scaled(x3, inv)));
}
// Values i .. i + 3 (v; i a multiple of 4) of the input into the int16 form at s. The chunk's 8 quads
// must be held by the 8 lanes 8g .. 8g + 7 of one warp, quad j by lane 8g + j, all calling together.
__device__ __forceinline__ void stage_i16_quad(uint8_t* s, int64_t i, float4 v) {
  const unsigned lanes = 0xffu << (threadIdx.x & 24);
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
  float sum = (v.x + v.y) + (v.z + v.w);
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(lanes, amax, o));
    sum += __shfl_xor_sync(lanes, sum, o);
  }
  const float inv = i16_factor(amax);
  uint8_t* chunk = s + i / 32 * kI16ChunkBytes;
  const int quad = static_cast<int>(i / 4) & 7;  // word quad / 2, its first or second half
  reinterpret_cast<uint2*>(chunk)[quad] = i16_quad(v.x, v.y, v.z, v.w, inv);
  if (quad == 0) reinterpret_cast<float2*>(chunk + 64)[0] = make_float2(amax / kI16Max, sum);
}
// A whole chunk held by one lane into the int16 form's four words (stage_i16_quad's layout); returns d.
__device__ __forceinline__ float quantize_chunk_i16(const float (&x)[32], uint4 (&q)[4]) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(x[i]));
  const float inv = i16_factor(amax);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float* v = x + 8 * k;
    const uint2 lo = i16_quad(v[0], v[1], v[2], v[3], inv), hi = i16_quad(v[4], v[5], v[6], v[7], inv);
    q[k] = make_uint4(lo.x, lo.y, hi.x, hi.y);
  }
  return amax / kI16Max;
}

// Values i .. i + 3 of a staged input: as f32 at staged_at, or (kI16, 4-bit chunks only) the int16 form.
template <int E, Act A>
__device__ __forceinline__ void store_staged(float* s, int64_t i, float4 v) {
  if constexpr (A == Act::kI16) {
    static_assert(E == 32, "int16 activations pair with 4-bit weights");
    stage_i16_quad(reinterpret_cast<uint8_t*>(s), i, v);
  } else {
    *reinterpret_cast<float4*>(s + staged_at<E>(i)) = v;
  }
}

// Each stage_* is run by threads [tid, nthreads) of the caller's choice (a block or a warp), n a
// multiple of 4; the caller synchronises those threads before reading `s`. Each reads a batch of its
// inputs into registers before storing any: a store to `s` between two loads would order them (the
// compiler cannot rule out aliasing), making each batch element a round trip to L2 of its own. (A
// kernel short of registers passes a smaller batch.)
//
// A: the staged form (Act::kI16: n a multiple of 32 and nthreads of 8; kF32 stages f32).
template <int E, int kBatch = 4, bool kL2 = false, Act A = Act::kF32>
__device__ __forceinline__ void stage_plain(const float* x, int64_t n, float* s, int tid, int nthreads) {
  const int64_t stride = 4 * static_cast<int64_t>(nthreads);
  for (int64_t i0 = 4 * tid; i0 < n; i0 += kBatch * stride) {
    float4 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (i0 + b * stride < n) v[b] = load_input4<kL2>(x + i0 + b * stride);
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (i0 + b * stride < n) store_staged<E, A>(s, i0 + b * stride, v[b]);
  }
}

// The whole block; returns the RMSNorm factor (to every thread). scratch: 32 floats of shared memory.
// kBatch 2: the 2048 inputs of the real model in one batch at 256 threads. kL2 as load_input4's (x
// only: the norm's weights are constants).
template <int E, int kBatch = 2, bool kL2 = false, Act A = Act::kF32>
__device__ __forceinline__ float stage_norm(const float* x, const float* w, float eps, int64_t n, float* s,
                                            float* scratch) {
  const int64_t stride = 4 * static_cast<int64_t>(blockDim.x);
  float sumsq = 0.0f;
  for (int64_t i0 = 4 * threadIdx.x; i0 < n; i0 += kBatch * stride) {
    float4 v[kBatch], g[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (i0 + b * stride < n)
        v[b] = load_input4<kL2>(x + i0 + b * stride),
        g[b] = *reinterpret_cast<const float4*>(w + i0 + b * stride);
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (i0 + b * stride >= n) continue;
      sumsq += v[b].x * v[b].x + v[b].y * v[b].y + v[b].z * v[b].z + v[b].w * v[b].w;
      store_staged<E, A>(s, i0 + b * stride,
                         make_float4(v[b].x * g[b].x, v[b].y * g[b].y, v[b].z * g[b].z, v[b].w * g[b].w));
    }
  }
  return rsqrtf(block_sum(sumsq, scratch) / static_cast<float>(n) + eps);
}

// The whole block, a warp per head of D values (gemv_gated_norm_fits), lane l holding values 4l..4l+3
// of each, four heads a round of 16-byte loads: the model's 32 heads of 128 in one round at 8 warps.
// (Scalar loads two heads a round took two rounds of L2 reads queued behind the weights in flight,
// ~4.3 µs of the DeltaNet output projection's 8.7.) Act::kI16: D a
// multiple of 32, so each chunk lies in one head.
template <int E, Act A = Act::kF32>
__device__ __forceinline__ void stage_gated_norm(const float* x, const float* z, const float* w, float eps,
                                                 int D, int64_t n, float* s) {
  constexpr int kBatch = 4;
  static_assert(kGemvGatedNormMaxHead == 4 * 32, "a lane holds one float4 of a head");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5, at = 4 * lane;
  const bool mine = at < D;
  const int64_t stride = static_cast<int64_t>(warps) * D;  // between a warp's heads
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const float4 g = mine ? *reinterpret_cast<const float4*>(w + at) : zero;
  for (int64_t h0 = static_cast<int64_t>(warp) * D; h0 < n; h0 += kBatch * stride) {
    float4 xv[kBatch], zv[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const bool in = mine && h0 + b * stride < n;
      xv[b] = in ? *reinterpret_cast<const float4*>(x + h0 + b * stride + at) : zero;
      zv[b] = in ? *reinterpret_cast<const float4*>(z + h0 + b * stride + at) : zero;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t h = h0 + b * stride;
      if (h >= n) break;  // uniform over the warp
      const float4 v = xv[b], u = zv[b];
      const float ss = v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(D) + eps);
      if (mine)
        store_staged<E, A>(s, h + at,
                           make_float4(g.x * (v.x * inv) * siluf_(u.x), g.y * (v.y * inv) * siluf_(u.y),
                                       g.z * (v.z * inv) * siluf_(u.z), g.w * (v.w * inv) * siluf_(u.w)));
    }
  }
}

// The group of a chunk's codes: a shift for the power-of-two groups of real checkpoints, a 32-bit
// division otherwise. (The 64-bit division this replaces ran per chunk and row and cost about as many
// instructions as the dot product itself.)
struct ChunkGroup {
  int per = 1, shift = 0;  // chunks per group; shift < 0: not a power of two
  __device__ __forceinline__ ChunkGroup(int group_size, int elems) {
    per = group_size > elems ? group_size / elems : 1;
    shift = (per & (per - 1)) == 0 ? __ffs(per) - 1 : -1;
  }
  __device__ __forceinline__ int of(int chunk) const { return shift >= 0 ? chunk >> shift : chunk / per; }
};

// ---- the dot products ----------------------------------------------------------------------------
// Σ_i code_i·x_i over one chunk (affine formats), or Σ_i w_i·x_i (bf16). 4-bit codes go to f32
// without a conversion instruction: a byte permute places code q in the mantissa of 2.0, giving
// v = 2 + q/64 exactly, so Σ q·x = 64·Σ v·x − 128·Σ x (two lop3, one shift and eight permutes per
// 8 codes instead of eight int→float conversions at a quarter of the FMA rate).
template <WeightFormat F>
__device__ __forceinline__ float chunk_code_dot(const uint4& w, const float (&x)[ChunkTraits<F>::kElems],
                                                float xsum) {
  constexpr int E = ChunkTraits<F>::kElems;
  if constexpr (F == WeightFormat::kAffine4) {
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t lo = words[k] & 0x0f0f0f0fu, hi = (words[k] >> 4) & 0x0f0f0f0fu;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t sel = 0x7044u | (static_cast<uint32_t>(j) << 8);
        s0 += __uint_as_float(__byte_perm(lo, 0x40000000u, sel)) * x[8 * k + 2 * j];
        s1 += __uint_as_float(__byte_perm(hi, 0x40000000u, sel)) * x[8 * k + 2 * j + 1];
      }
    }
    return 64.0f * (s0 + s1) - 128.0f * xsum;
  } else {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < E; ++i) s += chunk_value<F>(w, i, 1.0f, 0.0f) * x[i];
    return s;
  }
}

// Σ_i code_i·xq_i over one chunk of 4-bit codes against its int16 form (quantize_chunk_i16's words):
// sixteen dp2a, exact in int32 (below 2^24, so its conversion to f32 is exact too).
__device__ __forceinline__ int chunk_code_dot_i16(const uint4& w, const uint4 (&xq)[4]) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  int lo_dot = 0, hi_dot = 0;  // two chains: the low and the high nibbles
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int lo = static_cast<int>(words[k] & 0x0f0f0f0fu),
              hi = static_cast<int>((words[k] >> 4) & 0x0f0f0f0fu);
    lo_dot = __dp2a_lo(static_cast<int>(xq[k].x), lo, lo_dot);
    hi_dot = __dp2a_lo(static_cast<int>(xq[k].y), hi, hi_dot);
    lo_dot = __dp2a_hi(static_cast<int>(xq[k].z), lo, lo_dot);
    hi_dot = __dp2a_hi(static_cast<int>(xq[k].w), hi, hi_dot);
  }
  return lo_dot + hi_dot;
}

// acc[r] = row r · input (staged in shared memory at `xin`) over `chunks` chunks, complete in every lane of
// the group (lane_g: index within the group of `sub` lanes, a power of two). Every lane of the block must
// call this with the same chunks and sub. `stage` runs once, right after the first weights were
// requested, when `first`: it waits for the previous kernel, stages the input and synchronises.
//
// A, the input's staged form: with Act::kI16 (4-bit weights only) `xin` is the int16 form
// (stage_i16_quad), sixteen dp2a a chunk, and Σ (q_i·s + b)·x_i ≈ s·d·Σ q_i·xq_i + b·Σ x_i. (The f32 dot
// spends a byte permute and an FMA a weight, both on pipes of half or full rate; a dp2a does two weights.)
template <WeightFormat F, int R, int U, Act A = Act::kF32, class Stage>
__device__ __forceinline__ void dot_rows(const WeightRow (&rows)[R], int64_t chunks, int group_size, int sub,
                                         int lane_g, const void* xin, bool first, Stage&& stage,
                                         float (&acc)[R]) {
  constexpr int E = ChunkTraits<F>::kElems;
  static_assert(A == Act::kF32 || F == WeightFormat::kAffine4, "int16 activations pair with 4-bit weights");
  const float* xs = static_cast<const float*>(xin);
  constexpr bool kAffine = F != WeightFormat::kBF16;
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  static_assert((U & (U - 1)) == 0, "chunks in flight: a power of two");
  // Chunk indices in 32 bits (rows are far below 2^31 chunks); sub and U are powers of two.
  const int n_chunks = static_cast<int>(chunks), step = sub * U;
  const int iters = (n_chunks + step - 1) >> (__ffs(step) - 1);
  const ChunkGroup group(group_size, E);
  for (int it = 0; it < iters; ++it) {
    // Every load of the iteration first: weights, and (affine) their groups' scales and biases.
    uint4 w[U][R];
    uint16_t sc[U][R], bi[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = it * step + u * sub + lane_g;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const bool load = c < n_chunks && rows[r].data;
        w[u][r] = load ? load_weights(rows[r].data + c * 16) : make_uint4(0, 0, 0, 0);
        if constexpr (kAffine) {
          const int g = group.of(c);
          sc[u][r] = load ? __ldg(rows[r].scales + g) : uint16_t{0};
          bi[u][r] = load ? __ldg(rows[r].biases + g) : uint16_t{0};
        }
      }
    }
    if (it == 0 && first) {
      // The later rounds' weights requested into L1 as well (no kernel writes them): those rounds then
      // find their chunks there after the wait instead of going to DRAM one after the other, and the
      // launch ends with no weight loads left in flight (the 4096-column output projections take two
      // rounds). Not with four rows a group: those instances sit at 128 registers and the addresses
      // spilled, and the model's four-row stacks have 2048 columns, one round.
      if constexpr (R <= 2) {
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (rows[r].data)
            for (int c = step + lane_g; c < n_chunks; c += sub) prefetch_l1(rows[r].data + c * 16);
      }
      stage();
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = it * step + u * sub + lane_g;
      if (c >= n_chunks) continue;
      if constexpr (A == Act::kI16) {
        const uint4* chunk =
            reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(xin) + c * kI16ChunkBytes);
        const uint4 xw[4] = {chunk[0], chunk[1], chunk[2], chunk[3]};
        const float2 dsum = *reinterpret_cast<const float2*>(chunk + 4);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (!rows[r].data) continue;
          const float dot = dsum.x * static_cast<float>(chunk_code_dot_i16(w[u][r], xw));
          acc[r] += bf16_to_f32(sc[u][r]) * dot + bf16_to_f32(bi[u][r]) * dsum.y;
        }
        continue;
      }
      float xv[E];
      const float4* xp = reinterpret_cast<const float4*>(xs + c * (E + 4));
#pragma unroll
      for (int j = 0; j < E / 4; ++j) {
        const float4 q = xp[j];
        xv[4 * j] = q.x, xv[4 * j + 1] = q.y, xv[4 * j + 2] = q.z, xv[4 * j + 3] = q.w;
      }
      float xsum = 0.0f;
      if constexpr (kAffine) {
#pragma unroll
        for (int i = 0; i < E; ++i) xsum += xv[i];
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (!rows[r].data) continue;
        const float dot = chunk_code_dot<F>(w[u][r], xv, xsum);
        if constexpr (kAffine)
          acc[r] += bf16_to_f32(sc[u][r]) * dot + bf16_to_f32(bi[u][r]) * xsum;
        else
          acc[r] += dot;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float v = acc[r];
    for (int o = sub / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
    acc[r] = v;
  }
}

// Lanes per row for `chunks` chunks: the whole warp from 32 chunks up, else the largest power of two
// not above the chunk count (the rest of the warp takes further rows).
inline int gemv_group_lanes(int64_t chunks) {
  int sub = 32;
  while (sub > 1 && sub > chunks) sub >>= 1;
  return sub;
}

}  // namespace qwick::cuda
