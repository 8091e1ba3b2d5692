// Chunked Gated DeltaNet scan (contracts, formulas and workspace in deltanet_chunked_cuda.h).
#include <cfloat>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/tf32_mma.cuh"
#include "kernels/deltanet/deltanet_chunked_cuda.h"

namespace qwick::cuda {
namespace {

constexpr int kL = kDeltaNetChunk;

// Per value head h: T [Hv][chunks][kL][kL] (the chunk's (I+A)⁻¹ with its columns scaled by β),
// P [Hv][chunks][kL][kL], G [Hv][n_pad] (the cumulative log decay within each chunk).
struct Workspace {
  float *T, *P, *G;
  int64_t n_pad;
  int chunks;
};

Workspace carve(float* base, int64_t n, int Hv) {
  Workspace w{};
  w.chunks = static_cast<int>((n + kL - 1) / kL);
  w.n_pad = int64_t{w.chunks} * kL;
  const int64_t rows = int64_t{Hv} * w.n_pad;
  w.T = base;
  w.P = w.T + rows * kL;
  w.G = w.P + rows * kL;
  return w;
}

// ---- deltanet_chunk_prepare -------------------------------------------------------------------

// Both value heads of a key head at once, 8 warps: QKᵀ (warps 0-3) and KKᵀ (warps 4-7), then a
// thread per column of each head's T on warps 0-3. Two blocks an SM, so that one block's loads and
// products run while the other is in its substitution (with one block of 16 warps an SM, 12 of them
// waited for the substitution's 4 for ~40 % of the kernel, and the loads of all SMs came at once).
constexpr int kPrepHeads = 2, kPrepThreads = 256;

template <int DK>
struct PrepSmem {
  // Rows of DK + 4 and kL + 4 floats: ≡ 4 (mod 8) words, as ldmatrix and the float4 reads of eight
  // consecutive rows want.
  static constexpr int kLdK = DK + 4, kLdA = kL + 4;
  // Q (the A operand of QKᵀ) and K split, tf32 hi parts then lo parts (the A operand of KKᵀ and the B
  // operand of both; K arrives raw in the lo parts' place and is split there). Once the products are
  // done, QKᵀ takes Q's place, and KKᵀ and A of each head of the pair that of the split K (and what
  // it lacks for them when DK is 64). Then log decay, β and G of each head.
  static constexpr int kQ = 0, kKb = kL * kLdK, kKbLo = kL * kLdK, kQK = 0, kKK = kKb, kA = kKK + kL * kLdA,
                       kEnd = kKb + 2 * kKbLo, kAEnd = kA + kPrepHeads * kL * kLdA,
                       kg = kEnd > kAEnd ? kEnd : kAEnd, kb = kg + kPrepHeads * kL, kG = kb + kPrepHeads * kL,
                       kFloats = kG + kPrepHeads * kL;
  static_assert(kL * kLdA <= kKb, "QKᵀ fits in Q's place");
};

template <int DK>
__global__ void __launch_bounds__(kPrepThreads, 2) chunk_prepare_kernel(DeltaNetScanArgs a, Workspace ws) {
  wait_and_let_next_start();
  using Sm = PrepSmem<DK>;
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  float *Qs = sm + Sm::kQ, *Kb = sm + Sm::kKb, *Klo = Kb + Sm::kKbLo;
  const int chunk = blockIdx.x, kh = blockIdx.y, tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int64_t t0 = int64_t{chunk} * kL, key_dim = int64_t{a.Hk} * DK;

  for (int e = tid; e < kL * DK / 4; e += kPrepThreads) {
    const int i = e / (DK / 4), d = e % (DK / 4) * 4;
    const bool valid = t0 + i < a.n;
    const float* row = a.qkv + (valid ? t0 + i : 0) * a.ld + int64_t{kh} * DK + d;
    cp_async16(Qs + i * Sm::kLdK + d, row, valid);
    cp_async16(Klo + i * Sm::kLdK + d, row + key_dim, valid);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  for (int e = tid; e < kL * DK / 4; e += kPrepThreads) {  // K split in place
    float* k = Klo + e / (DK / 4) * Sm::kLdK + e % (DK / 4) * 4;
    const float4 v = *reinterpret_cast<const float4*>(k);
    const float kv[4] = {v.x, v.y, v.z, v.w};
    uint32_t hi[4], lo[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) split_tf32<true>(kv[j], hi[j], lo[j]);
    *reinterpret_cast<uint4*>(k - Sm::kKbLo) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    *reinterpret_cast<uint4*>(k) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  }
  __syncthreads();

  // QKᵀ (warps 0-3) and KKᵀ (warps 4-7) on split tf32, shared by the value heads of this key head:
  // a warp's 16 rows from m0, all 64 columns, in the m16n8 accumulator layout, then stored.
  {
    const int g = lane >> 2, t = lane & 3, m0 = (warp & 3) * 16;
    const bool kk_warp = warp >= 4;
    float prod[1][8][4] = {};
    if (kk_warp)
      warp_mma<1, 8, true>(prod, SplitRowMajorA{Kb + m0 * Sm::kLdK, Sm::kLdK, Sm::kKbLo}, Kb, Sm::kLdK,
                           Sm::kKbLo, DK);
    else
      warp_mma<1, 8, true>(prod, RowMajorA{Qs + m0 * Sm::kLdK, Sm::kLdK}, Kb, Sm::kLdK, Sm::kKbLo, DK);
    __syncthreads();  // every warp is done with Q and the split K
    float* out = sm + (kk_warp ? Sm::kKK : Sm::kQK);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        out[(m0 + g + 8 * (e >> 1)) * Sm::kLdA + nt * 8 + 2 * t + (e & 1)] = prod[0][nt][e];
  }

  const float *QK = sm + Sm::kQK, *KK = sm + Sm::kKK;
  const int ratio = a.Hv / a.Hk;
  for (int vh0 = 0; vh0 < ratio; vh0 += kPrepHeads) {
    // A thread per (head of the pair, row) for the gates.
    const int gh = tid / kL, gi = tid % kL;
    const bool gate_thread = tid < kPrepHeads * kL && vh0 + gh < ratio;
    if (gate_thread) {
      const int64_t t = t0 + gi;
      const int h = kh * ratio + vh0 + gh;
      const bool valid = t < a.n;
      // log of the decay the token scan multiplies by; FLT_MIN keeps an underflowed decay finite.
      sm[Sm::kg + gh * kL + gi] = valid ? logf(fmaxf(a.decay[t * a.Hv + h], FLT_MIN)) : 0.0f;
      sm[Sm::kb + gh * kL + gi] = valid ? a.beta[t * a.Hv + h] : 0.0f;
    }
    __syncthreads();
    if (tid < kPrepHeads && vh0 + tid < ratio) {  // G: a thread per head
      float acc = 0.0f;
      for (int i = 0; i < kL; ++i) acc += sm[Sm::kg + tid * kL + i], sm[Sm::kG + tid * kL + i] = acc;
    }
    __syncthreads();
    // P and A of both heads, an element a thread (P's rows coalesced).
    for (int e = tid; e < kPrepHeads * kL * kL; e += kPrepThreads) {
      const int ph = e / (kL * kL), i = e / kL % kL, j = e % kL;
      if (vh0 + ph >= ratio) break;
      const float *Gp = sm + Sm::kG + ph * kL, *bp = sm + Sm::kb + ph * kL;
      const float dij = j <= i ? expf(Gp[i] - Gp[j]) : 0.0f;
      ws.P[(int64_t{kh * ratio + vh0 + ph} * ws.chunks + chunk) * kL * kL + i * kL + j] =
          QK[i * Sm::kLdA + j] * dij;
      sm[Sm::kA + (ph * kL + i) * Sm::kLdA + j] = j < i ? bp[i] * KK[i * Sm::kLdA + j] * dij : 0.0f;
    }
    if (gate_thread) ws.G[int64_t{kh * ratio + vh0 + gh} * ws.n_pad + t0 + gi] = sm[Sm::kG + gh * kL + gi];
    __syncthreads();

    // Column c of T = (I+A)⁻¹ by forward substitution, x_i = δ_ic − Σ_{j<i} A_ij x_j, a thread per
    // column; the column stays in registers (fully unrolled), A is read as broadcast float4s, and each
    // row's sum runs in four chains (the dependent FMAs are the kernel's critical path). Rows above c
    // are zero, so a warp starts at its first column's row: columns 0-31 are the long warp. Warps 0-1
    // take head 0, warps 2-3 head 1, so the two long warps have a scheduler each (warp w issues on
    // scheduler w % 4). Stored times β_c, the factor U = T (βV) and W = T (βK ⊙ e^G) both carry.
    static_assert(kPrepHeads == 2 && kL == 64, "a warp per 32 columns, 2 per head, on warps 0-3");
    const int sh = warp >> 1, c = (warp & 1) * 32 + lane;
    if (warp < 2 * kPrepHeads && vh0 + sh < ratio) {
      const float* As = sm + Sm::kA + sh * kL * Sm::kLdA;
      float* out = ws.T + (int64_t{kh * ratio + vh0 + sh} * ws.chunks + chunk) * kL * kL + c;
      const float beta_c = sm[Sm::kb + sh * kL + c];
      auto solve = [&](auto first_row) {
        constexpr int i0 = decltype(first_row)::value;
        for (int i = 0; i < i0; ++i) out[i * kL] = 0.0f;
        float x[kL];
#pragma unroll
        for (int i = i0; i < kL; ++i) {
          float acc[4] = {i == c ? 1.0f : 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int j = i0; j < i; j += 4) {
            const float4 aij = *reinterpret_cast<const float4*>(As + i * Sm::kLdA + j);
            acc[0] = fmaf(-aij.x, x[j], acc[0]);
            if (j + 1 < i) acc[1] = fmaf(-aij.y, x[j + 1], acc[1]);
            if (j + 2 < i) acc[2] = fmaf(-aij.z, x[j + 2], acc[2]);
            if (j + 3 < i) acc[3] = fmaf(-aij.w, x[j + 3], acc[3]);
          }
          x[i] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
          out[i * kL] = x[i] * beta_c;
        }
      };
      if (warp & 1)
        solve(std::integral_constant<int, 32>{});
      else
        solve(std::integral_constant<int, 0>{});
    }
    __syncthreads();  // A, log decay, β and G are the next pair's
  }
}

// ---- deltanet_chunk_scan ----------------------------------------------------------------------

// With W = T (βK ⊙ e^G) and U = T (βV) (T = (I+A)⁻¹, β folded into its columns by the prepare),
// V' = U − W S = T (V − e^G ⊙ (K S)): the scan needs K S, which costs what W S did, and one
// product with T, and no W or U goes through memory. Per chunk:
//   1. warps 0-7: Y = V − e^G ⊙ (K S); warps 8-15: e^G ⊙ (Q S), kept in registers;
//   2. warps 0-7: V' = T Y;
//   3. warps 8-15: O = e^G ⊙ (Q S) + P V'; every warp: S = e^{G_L} S + Kᵀ (e^{G_L − G} ⊙ V').
// Each warp works on 16 chunk rows × 16 of the block's 32 state columns (and in step 3 on 16 state
// rows × 16 columns). With SPLIT the products the state depends on (K S, T Y and the update) run on
// split tf32; Q·S and P·V' only make the output and are plain: their ~3e-4 relative error is below
// the bf16 rounding the output gets at the next matrix product, and it does not carry from chunk to
// chunk (split, they cost the scan 2 %; full-model error against the CPU is the same either way).
constexpr int kScanWarps = 16, kCols = 32;  // state columns (value dims) per block

template <int DK>
struct ScanSmem {
  // Row-major tiles (Q, K, T, P: the A operands, read by ldmatrix) have rows of ≡ 4 (mod 8) words, so
  // the eight 16-byte rows of a tile fall on distinct banks, except K: it is also read transposed,
  // element by element at (lane % 4, group), which wants a stride ≡ 8 (mod 32). The B operands (S, Y,
  // V', Vd) are stored n-major, a row per state column, for ldmatrix; Y, Vd and S, the B operands of
  // split products, are stored already split (tf32 hi bits, then at kLo further the lo bits):
  // converting them at each read cost every warp the same instructions. V' is read by the plain
  // output product only (its hi bits). The value rows V are read element by element, [row][column].
  // K and G are double-buffered (both are read until the end of a chunk and from the start of the
  // next); Q and V are read only in step 1 and T only in step 2, so the next chunk's stream in
  // behind them.
  static constexpr int kLdQ = DK + 4, kLdK = DK + 8, kLdT = kL + 4, kLdVin = kCols + 8, kLdS = DK + 4,
                       kLdV = kL + 4;
  static constexpr int kQ = 0, kK = kQ + kL * kLdQ, kT = kK + 2 * kL * kLdK, kP = kT + kL * kLdT,
                       kVin = kP + kL * kLdT, kG = kVin + kL * kLdVin, kV = kG + 2 * kL,
                       kY = kV + kCols * kLdV, kVd = kY + kCols * kLdV, kS = kVd + kCols * kLdV,
                       kLo = kS + kCols * kLdS - kY, kFloats = kY + 2 * kLo;
};

template <int DK, bool SPLIT>
__global__ void __launch_bounds__(kScanWarps * 32, 1) chunk_scan_kernel(DeltaNetScanArgs a, Workspace ws) {
  wait_and_let_next_start();
  using Sm = ScanSmem<DK>;
  static_assert(DK / 16 * 2 <= kScanWarps, "a warp per 16 state rows and 16 columns");
  constexpr int kThreads = kScanWarps * 32, kHalf = kCols / 2;
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  float *Qs = sm + Sm::kQ, *Ts = sm + Sm::kT, *Ps = sm + Sm::kP, *Vin = sm + Sm::kVin, *Vs = sm + Sm::kV,
        *Ys = sm + Sm::kY, *Vd = sm + Sm::kVd, *Ss = sm + Sm::kS;
  const int h = blockIdx.x, kh = h / (a.Hv / a.Hk), j0 = blockIdx.y * kCols;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int64_t key_dim = int64_t{a.Hk} * DK;
  const bool q_warp = warp >= kScanWarps / 2;                                // Q·S and the output, else V'
  const int m0 = (warp % (kScanWarps / 2)) / 2 * 16, n0 = warp % 2 * kHalf;  // this warp's rows, columns
  const bool s_warp = warp / 2 < DK / 16;  // owns state rows d0 .. d0 + 15, columns n0 .. n0 + 15
  const int d0 = warp / 2 * 16;
  float* state = a.state + (int64_t{h} * a.Dv + j0) * DK;  // [kCols][DK]: row n is the spec's column j0 + n
  auto k_tile = [&](int c) { return sm + Sm::kK + (c & 1) * kL * Sm::kLdK; };
  auto g_row = [&](int c) { return sm + Sm::kG + (c & 1) * kL; };

  // Accumulator element e of this warp's state tile nt: state row (k dim) and column (value dim).
  auto state_row = [&](int e) { return d0 + g + 8 * (e >> 1); };
  auto state_col = [&](int nt, int e) { return n0 + nt * 8 + 2 * t + (e & 1); };
  float s_acc[1][2][4];
  if (s_warp)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s_acc[0][nt][e] = state[state_col(nt, e) * DK + state_row(e)];
        store_split<SPLIT>(Ss + state_col(nt, e) * Sm::kLdS + state_row(e), Sm::kLo, s_acc[0][nt][e]);
      }

  // Three groups of copies a chunk, each waited for where it is first read (the wait<1>/<2> below
  // count the groups issued after it): Q, K, V, G are issued during the chunk before, once its step 1
  // is done; T once its step 2 is done; P at the start of the chunk itself.
  auto load_qkvg = [&](int c) {
    const int64_t t0 = int64_t{c} * kL;
    float* Ks = k_tile(c);
    for (int e = tid; e < kL * DK / 4; e += kThreads) {
      const int i = e / (DK / 4), d = e % (DK / 4) * 4;
      const bool valid = t0 + i < a.n;
      const float* row = a.qkv + (valid ? t0 + i : 0) * a.ld + int64_t{kh} * DK + d;
      cp_async16(Qs + i * Sm::kLdQ + d, row, valid);
      cp_async16(Ks + i * Sm::kLdK + d, row + key_dim, valid);
    }
    for (int e = tid; e < kL * kCols / 4; e += kThreads) {
      const int i = e / (kCols / 4), n = e % (kCols / 4) * 4;
      const bool valid = t0 + i < a.n;
      cp_async16(Vin + i * Sm::kLdVin + n,
                 a.qkv + (valid ? t0 + i : 0) * a.ld + 2 * key_dim + int64_t{h} * a.Dv + j0 + n, valid);
    }
    if (tid < kL / 4) cp_async16(g_row(c) + 4 * tid, ws.G + int64_t{h} * ws.n_pad + t0 + 4 * tid, true);
  };
  // T or P of chunk c into a [kL][kLdT] tile.
  auto load_square = [&](float* dst, const float* src, int c) {
    src += (int64_t{h} * ws.chunks + c) * kL * kL;
    for (int e = tid; e < kL * kL / 4; e += kThreads)
      cp_async16(dst + e / (kL / 4) * Sm::kLdT + e % (kL / 4) * 4, src + e * 4, true);
  };

  load_qkvg(0);
  cp_async_commit();
  load_square(Ts, ws.T, 0);
  cp_async_commit();
  for (int c = 0; c < ws.chunks; ++c) {
    const int64_t t0 = int64_t{c} * kL;
    const float *Ks = k_tile(c), *Gs = g_row(c);
    load_square(Ps, ws.P, c);
    cp_async_commit();
    cp_async_wait<2>();  // Q, K, V, G
    __syncthreads();

    // Step 1: K S or Q S for this warp's 16 rows and 16 columns.
    float acc[1][2][4] = {};
    if (q_warp)
      warp_mma<1, 2, false>(acc, RowMajorA{Qs + m0 * Sm::kLdQ, Sm::kLdQ}, Ss + n0 * Sm::kLdS, Sm::kLdS,
                            Sm::kLo, DK);
    else
      warp_mma<1, 2, SPLIT>(acc, RowMajorA{Ks + m0 * Sm::kLdK, Sm::kLdK}, Ss + n0 * Sm::kLdS, Sm::kLdS,
                            Sm::kLo, DK);
    const float GL = Gs[kL - 1];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = m0 + g + 8 * half;
      const float eg = expf(Gs[r]);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = acc[0][nt][2 * half + e];
          v *= eg;
          if (!q_warp) {
            const int n = n0 + nt * 8 + 2 * t + e;
            store_split<SPLIT>(Ys + n * Sm::kLdV + r, Sm::kLo, Vin[r * Sm::kLdVin + n] - v);
          }
        }
    }
    cp_async_wait<1>();  // T
    __syncthreads();
    if (c + 1 < ws.chunks) load_qkvg(c + 1);
    cp_async_commit();  // (an empty group past the last chunk keeps the count)

    // Step 2: V' = T Y (T is lower triangular: columns past this warp's last row add nothing).
    if (!q_warp) {
      float vp[1][2][4] = {};
      warp_mma<1, 2, SPLIT>(vp, RowMajorA{Ts + m0 * Sm::kLdT, Sm::kLdT}, Ys + n0 * Sm::kLdV, Sm::kLdV,
                            Sm::kLo, m0 + 16);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = m0 + g + 8 * half;
        const float el = expf(GL - Gs[r]);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int n = n0 + nt * 8 + 2 * t + e;
            const float v = vp[0][nt][2 * half + e];
            store_split<false>(Vs + n * Sm::kLdV + r, Sm::kLo, v);
            store_split<SPLIT>(Vd + n * Sm::kLdV + r, Sm::kLo, v * el);
          }
      }
    }
    cp_async_wait<1>();  // P
    __syncthreads();
    if (c + 1 < ws.chunks) load_square(Ts, ws.T, c + 1);
    cp_async_commit();

    // Step 3.
    if (q_warp) {
      // O = e^{G} ⊙ Q S + P V' (P is lower triangular too).
      warp_mma<1, 2, false>(acc, RowMajorA{Ps + m0 * Sm::kLdT, Sm::kLdT}, Vs + n0 * Sm::kLdV, Sm::kLdV,
                            Sm::kLo, m0 + 16);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = t0 + m0 + g + 8 * half;
        if (row >= a.n) continue;
        float* o = a.out + row * a.ld_out + int64_t{h} * a.Dv + j0 + n0 + 2 * t;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
          *reinterpret_cast<float2*>(o + nt * 8) =
              make_float2(acc[0][nt][2 * half], acc[0][nt][2 * half + 1]);
      }
    }

    // S = e^{G_L} S + Kᵀ (e^{G_L − G} ⊙ V'): Kᵀ's element (d, i) is Ks[i][d]. Ss was last read by the
    // products of step 1.
    if (s_warp) {
      const float eL = expf(GL);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s_acc[0][nt][e] *= eL;
      warp_mma<1, 2, SPLIT>(s_acc, StridedA{Ks + d0, 1, Sm::kLdK}, Vd + n0 * Sm::kLdV, Sm::kLdV, Sm::kLo, kL);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          store_split<SPLIT>(Ss + state_col(nt, e) * Sm::kLdS + state_row(e), Sm::kLo, s_acc[0][nt][e]);
    }
    __syncthreads();  // Ss, Vs, Vd and Ps are the next chunk's
  }
  cp_async_wait<0>();  // (only empty groups are left)

  if (s_warp)  // the exact state, from the registers (Ss holds it split)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) state[state_col(nt, e) * DK + state_row(e)] = s_acc[0][nt][e];
}

template <int DK, bool SPLIT>
void launch(const DeltaNetScanArgs& a, const Workspace& ws, cudaStream_t stream) {
  constexpr size_t prep_bytes = sizeof(float) * PrepSmem<DK>::kFloats,
                   scan_bytes = sizeof(float) * ScanSmem<DK>::kFloats;
  static const bool configured = [] {  // above the 48 KB default: once per instantiation
    check(cudaFuncSetAttribute(chunk_prepare_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(prep_bytes)),
          "deltanet_chunked_scan: shared memory");
    check(cudaFuncSetAttribute(chunk_prepare_kernel<DK>, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared),  // room for two blocks an SM
          "deltanet_chunked_scan: shared memory carveout");
    check(cudaFuncSetAttribute(chunk_scan_kernel<DK, SPLIT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(scan_bytes)),
          "deltanet_chunked_scan: shared memory");
    return true;
  }();
  (void)configured;
  launch_kernel(chunk_prepare_kernel<DK>, dim3(static_cast<unsigned>(ws.chunks), static_cast<unsigned>(a.Hk)),
                dim3(kPrepThreads), prep_bytes, stream, a.overlap, "deltanet_chunk_prepare", a, ws);
  launch_kernel(chunk_scan_kernel<DK, SPLIT>,
                dim3(static_cast<unsigned>(a.Hv), static_cast<unsigned>(a.Dv / kCols)), dim3(kScanWarps * 32),
                scan_bytes, stream, a.overlap, "deltanet_chunk_scan", a, ws);
}

bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace

bool deltanet_chunked_supported(const DeltaNetScanArgs& a) {
  return (a.Dk == 64 || a.Dk == 128) && a.Dv % kCols == 0 && a.Hk > 0 && a.Hv % a.Hk == 0 && a.ld % 4 == 0 &&
         a.ld_out % 2 == 0 && aligned(a.qkv, 16) && aligned(a.out, 8);
}

int64_t deltanet_chunked_workspace_floats(int64_t n, int Hv) {
  const int64_t n_pad = (n + kL - 1) / kL * kL;
  return int64_t{Hv} * n_pad * (2 * kL + 1);
}

void deltanet_chunked_scan(const DeltaNetScanArgs& a, float* workspace, cudaStream_t stream,
                           bool split_tf32) {
  if (a.n == 0) return;
  if (!deltanet_chunked_supported(a) || !aligned(workspace, 16))
    check(cudaErrorInvalidValue, "deltanet_chunked_scan: unsupported shape or alignment");
  const Workspace ws = carve(workspace, a.n, a.Hv);
  if (a.Dk == 128)
    split_tf32 ? launch<128, true>(a, ws, stream) : launch<128, false>(a, ws, stream);
  else
    split_tf32 ? launch<64, true>(a, ws, stream) : launch<64, false>(a, ws, stream);
}

}  // namespace qwick::cuda
