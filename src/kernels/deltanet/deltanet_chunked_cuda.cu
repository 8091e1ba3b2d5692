// Chunked Gated DeltaNet scan (contracts, formulas and workspace in deltanet_chunked_cuda.h).
#include <cfloat>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_launch.h"
#include "kernels/deltanet/deltanet_chunked_cuda.h"
#include "kernels/tf32_mma.cuh"

namespace qwick::cuda {
namespace {

constexpr int kL = kDeltaNetChunk;

// Per value head h, n_pad = chunks · kL rows: W [Hv][n_pad][Dk], U [Hv][n_pad][Dv],
// P [Hv][chunks][kL][kL], G [Hv][n_pad] (the cumulative log decay within each chunk).
struct Workspace {
  float *W, *U, *P, *G;
  int64_t n_pad;
  int chunks;
};

Workspace carve(float* base, int64_t n, int Hv, int Dk, int Dv) {
  Workspace w{};
  w.chunks = static_cast<int>((n + kL - 1) / kL);
  w.n_pad = int64_t{w.chunks} * kL;
  const int64_t rows = int64_t{Hv} * w.n_pad;
  w.W = base;
  w.U = w.W + rows * Dk;
  w.P = w.U + rows * Dv;
  w.G = w.P + rows * kL;
  return w;
}

// ---- deltanet_chunk_prepare -------------------------------------------------------------------

// Two value heads of the key head at once, 256 threads each (a thread per column of [W | U] in the
// substitution): 16 warps, four per scheduler. (One head at a time with 256 threads ran two warps per
// scheduler and waited on the substitution's dependent FMAs.)
constexpr int kPrepHeads = 2, kHeadThreads = 256, kPrepThreads = kPrepHeads * kHeadThreads;
constexpr int kMaxDv = 256;  // the prepare kernel stages a chunk's value rows, Dv + 4 floats each

template <int DK>
struct PrepSmem {
  // Rows of DK + 4 and kL + 4 floats: ≡ 4 (mod 8) words, as ldmatrix and the float4 reads of eight
  // consecutive rows want.
  static constexpr int kLdK = DK + 4, kLdA = kL + 4;
  // K; A of each head; log decay, β and G of each head; then Q and K split (the B operand of QKᵀ and
  // KKᵀ: tf32 hi parts, then lo parts), whose place the value rows of both heads take once the
  // products are in registers.
  static constexpr int kK = 0, kA = kK + kL * kLdK, kg = kA + kPrepHeads * kL * kLdA,
                       kb = kg + kPrepHeads * kL, kG = kb + kPrepHeads * kL, kQ = kG + kPrepHeads * kL,
                       kKb = kQ + kL * kLdK, kKbLo = kL * kLdK;
  static size_t bytes(int Dv) {
    const size_t products = 3 * size_t{kL} * kLdK, values = size_t{kPrepHeads} * kL * (Dv + 4);
    return sizeof(float) * (kQ + (products > values ? products : values));
  }
};

template <int DK>
__global__ void __launch_bounds__(kPrepThreads) chunk_prepare_kernel(DeltaNetScanArgs a, Workspace ws) {
  using Sm = PrepSmem<DK>;
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  const int ld_v = a.Dv + 4;
  float *Ks = sm + Sm::kK, *Qs = sm + Sm::kQ, *Kb = sm + Sm::kKb;
  const int chunk = blockIdx.x, kh = blockIdx.y, tid = threadIdx.x;
  const int64_t t0 = int64_t{chunk} * kL, key_dim = int64_t{a.Hk} * DK;

  for (int e = tid; e < kL * DK / 4; e += kPrepThreads) {
    const int i = e / (DK / 4), d = e % (DK / 4) * 4;
    float4 q = make_float4(0.0f, 0.0f, 0.0f, 0.0f), k = q;
    if (t0 + i < a.n) {
      const float* row = a.qkv + (t0 + i) * a.ld + int64_t{kh} * DK + d;
      q = *reinterpret_cast<const float4*>(row);
      k = *reinterpret_cast<const float4*>(row + key_dim);
    }
    *reinterpret_cast<float4*>(Qs + i * Sm::kLdK + d) = q;
    *reinterpret_cast<float4*>(Ks + i * Sm::kLdK + d) = k;
    const float kv[4] = {k.x, k.y, k.z, k.w};
    uint32_t hi[4], lo[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) split_tf32<true>(kv[j], hi[j], lo[j]);
    *reinterpret_cast<uint4*>(Kb + i * Sm::kLdK + d) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    *reinterpret_cast<uint4*>(Kb + Sm::kKbLo + i * Sm::kLdK + d) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  }
  __syncthreads();

  // QKᵀ (warps 0-7) and KKᵀ (warps 8-15) on split tf32, shared by the value heads of this key head,
  // kept in registers: a warp's 16 rows from m0 and 32 columns from n0, in the m16n8 accumulator
  // layout. (On the CUDA cores these were half the kernel's FMAs.)
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const bool kk_warp = warp >= 8;
  const int m0 = (warp & 3) * 16, n0 = (warp >> 2 & 1) * 32;
  float prod[1][4][4] = {};
  warp_mma<1, 4, true>(prod, RowMajorA{(kk_warp ? Ks : Qs) + m0 * Sm::kLdK, Sm::kLdK}, Kb + n0 * Sm::kLdK,
                       Sm::kLdK, Sm::kKbLo, DK);
  __syncthreads();  // every warp is done with Q and the split K: their place takes value rows

  // This thread's head of the pair and its index among the head's threads.
  const int lh = tid / kHeadThreads, ht = tid % kHeadThreads;
  float *As = sm + Sm::kA + lh * kL * Sm::kLdA, *gs = sm + Sm::kg + lh * kL, *bs = sm + Sm::kb + lh * kL,
        *Gs = sm + Sm::kG + lh * kL, *Vs = Qs + lh * kL * ld_v;
  const int ratio = a.Hv / a.Hk;
  for (int vh0 = 0; vh0 < ratio; vh0 += kPrepHeads) {
    const int h = kh * ratio + vh0 + lh;
    const bool head = vh0 + lh < ratio;  // uniform over each half of the block
    if (head && ht < kL) {
      const int64_t t = t0 + ht;
      const bool valid = t < a.n;
      // log of the decay the token scan multiplies by; FLT_MIN keeps an underflowed decay finite.
      gs[ht] = valid ? logf(fmaxf(a.decay[t * a.Hv + h], FLT_MIN)) : 0.0f;
      bs[ht] = valid ? a.beta[t * a.Hv + h] : 0.0f;
    }
    // The value rows, staged so the substitution below reads them from shared memory (read from
    // global memory inside its sequential loop, each row's load was a full round trip).
    for (int e = ht; head && e < kL * a.Dv / 4; e += kHeadThreads) {
      const int i = e / (a.Dv / 4), d = e % (a.Dv / 4) * 4;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (t0 + i < a.n)
        v = *reinterpret_cast<const float4*>(a.qkv + (t0 + i) * a.ld + 2 * key_dim + int64_t{h} * a.Dv + d);
      *reinterpret_cast<float4*>(Vs + i * ld_v + d) = v;
    }
    __syncthreads();
    if (head && ht == 0) {
      float acc = 0.0f;
      for (int i = 0; i < kL; ++i) acc += gs[i], Gs[i] = acc;
    }
    __syncthreads();
    // P (from QKᵀ) and A (from KKᵀ) of both heads, from the registers.
    for (int ph = 0; ph < kPrepHeads && vh0 + ph < ratio; ++ph) {
      const int hp = kh * ratio + vh0 + ph;
      const float *Gp = sm + Sm::kG + ph * kL, *bp = sm + Sm::kb + ph * kL;
      float* Ap = sm + Sm::kA + ph * kL * Sm::kLdA;
      float* P = ws.P + (int64_t{hp} * ws.chunks + chunk) * kL * kL;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = m0 + g + 8 * (e >> 1), j = n0 + nt * 8 + 2 * t + (e & 1);
          const float dij = j <= i ? expf(Gp[i] - Gp[j]) : 0.0f;
          if (kk_warp)
            Ap[i * Sm::kLdA + j] = j < i ? bp[i] * prod[0][nt][e] * dij : 0.0f;
          else
            P[i * kL + j] = prod[0][nt][e] * dij;
        }
    }
    const int64_t head_row = int64_t{h} * ws.n_pad + t0;
    if (head && ht < kL) ws.G[head_row + ht] = Gs[ht];
    __syncthreads();

    // Forward substitution x_i = r_i − Σ_{j<i} A_ij x_j, a thread per column of [W | U]; the
    // column stays in registers (fully unrolled), A is read as broadcast float4s.
    for (int c = ht; head && c < DK + a.Dv; c += kHeadThreads) {
      const bool is_w = c < DK;
      float* out = is_w ? ws.W + head_row * DK + c : ws.U + head_row * a.Dv + (c - DK);
      const int64_t ld_out = is_w ? DK : a.Dv;
      float x[kL];
#pragma unroll
      for (int i = 0; i < kL; ++i) {
        float r;
        if (is_w)
          r = bs[i] * expf(Gs[i]) * Ks[i * Sm::kLdK + c];
        else
          r = bs[i] * Vs[i * ld_v + c - DK];
        float acc0 = r, acc1 = 0.0f;  // two chains: half the dependent latency
#pragma unroll
        for (int j = 0; j < i; j += 4) {
          const float4 aij = *reinterpret_cast<const float4*>(As + i * Sm::kLdA + j);
          acc0 = fmaf(-aij.x, x[j], acc0);
          if (j + 1 < i) acc1 = fmaf(-aij.y, x[j + 1], acc1);
          if (j + 2 < i) acc0 = fmaf(-aij.z, x[j + 2], acc0);
          if (j + 3 < i) acc1 = fmaf(-aij.w, x[j + 3], acc1);
        }
        x[i] = acc0 + acc1;
        out[i * ld_out] = x[i];
      }
    }
    __syncthreads();  // As, gs, bs, Gs and the value rows are the next pair's
  }
}

// ---- deltanet_chunk_scan ----------------------------------------------------------------------

// 16 warps, each on one 16-row tile of the chunk and half of the block's 32 state columns: warps 0-7
// compute V' = U − W·S, warps 8-15 Q·S for the same rows (and then P·V' and the output); the state
// update S = e^{G_L} S + Kᵀ(...) gives every warp 16 state rows × 16 columns. With SPLIT every product
// but P·V' runs on split tf32. P·V' is plain: it lies on the critical path (the warps that compute it
// also update the state), its ~3e-4 relative error is below the bf16 rounding the output gets at the
// next matrix product, and it does not carry from chunk to chunk.
constexpr int kScanWarps = 16, kCols = 32;  // state columns (value dims) per block

template <int DK>
struct ScanSmem {
  // Row-major tiles (Q, W, P: the A operands, read by ldmatrix) have rows of ≡ 4 (mod 8) words, so
  // the eight 16-byte rows of a tile fall on distinct banks; K is read transposed, element by element
  // at (lane % 4, group): stride ≡ 8 (mod 32). The B operands (S, V', Vd) are stored n-major, a row
  // per state column, for ldmatrix; Vd and S, the B operands of the recurrence, are stored already
  // split (tf32 hi bits, then at kLo further the lo bits): converting them at each read cost every warp
  // the same instructions. V' is read by the plain output product only (its hi bits). U is read
  // element by element, [row][column].
  static constexpr int kLdQ = DK + 4, kLdK = DK + 8, kLdP = kL + 4, kLdU = kCols + 8, kLdS = DK + 4,
                       kLdV = kL + 4;
  static constexpr int kQ = 0, kW = kQ + kL * kLdQ, kK = kW + kL * kLdQ, kP = kK + kL * kLdK,
                       kU = kP + kL * kLdP, kV = kU + kL * kLdU, kVd = kV + kCols * kLdV,
                       kS = kVd + kCols * kLdV, kG = kS + kCols * kLdS, kLo = kG + kL - kVd,
                       kFloats = kVd + 2 * kLo;
};

template <int DK, bool SPLIT>
__global__ void __launch_bounds__(kScanWarps * 32, 1) chunk_scan_kernel(DeltaNetScanArgs a, Workspace ws) {
  using Sm = ScanSmem<DK>;
  static_assert(DK / 16 * 2 <= kScanWarps, "a warp per 16 state rows and 16 columns");
  constexpr int kThreads = kScanWarps * 32, kHalf = kCols / 2;
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  float *Qs = sm + Sm::kQ, *Ws = sm + Sm::kW, *Ks = sm + Sm::kK, *Ps = sm + Sm::kP, *Us = sm + Sm::kU,
        *Vs = sm + Sm::kV, *Vd = sm + Sm::kVd, *Ss = sm + Sm::kS, *Gs = sm + Sm::kG;
  const int h = blockIdx.x, kh = h / (a.Hv / a.Hk), j0 = blockIdx.y * kCols;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int64_t key_dim = int64_t{a.Hk} * DK;
  const bool q_warp = warp >= kScanWarps / 2;                                // Q·S and the output, else V'
  const int m0 = (warp % (kScanWarps / 2)) / 2 * 16, n0 = warp % 2 * kHalf;  // this warp's rows, columns
  const bool s_warp = warp / 2 < DK / 16;  // owns state rows d0 .. d0 + 15, columns n0 .. n0 + 15
  const int d0 = warp / 2 * 16;
  float* state = a.state + (int64_t{h} * a.Dv + j0) * DK;  // [kCols][DK]: row n is the spec's column j0 + n

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
  __syncthreads();

  // Loads in two groups, each waited for only where it is first read: Q, W, U, G are read only before
  // the barrier in the middle of a chunk, so the next chunk's stream in while this one finishes (P V'
  // and the state update); K and P, read only after that barrier, stream in during the first half.
  auto load_qwug = [&](int c) {
    const int64_t t0 = int64_t{c} * kL, head_row = int64_t{h} * ws.n_pad + t0;
    for (int e = tid; e < kL * DK / 4; e += kThreads) {
      const int i = e / (DK / 4), d = e % (DK / 4) * 4;
      const bool valid = t0 + i < a.n;
      cp_async16(Qs + i * Sm::kLdQ + d, a.qkv + (valid ? t0 + i : 0) * a.ld + int64_t{kh} * DK + d, valid);
      cp_async16(Ws + i * Sm::kLdQ + d, ws.W + (head_row + i) * DK + d, true);
    }
    for (int e = tid; e < kL * kCols / 4; e += kThreads) {
      const int i = e / (kCols / 4), n = e % (kCols / 4) * 4;
      cp_async16(Us + i * Sm::kLdU + n, ws.U + (head_row + i) * a.Dv + j0 + n, true);
    }
    if (tid < kL / 4) cp_async16(Gs + 4 * tid, ws.G + head_row + 4 * tid, true);
  };
  auto load_kp = [&](int c) {
    const int64_t t0 = int64_t{c} * kL;
    for (int e = tid; e < kL * DK / 4; e += kThreads) {
      const int i = e / (DK / 4), d = e % (DK / 4) * 4;
      const bool valid = t0 + i < a.n;
      cp_async16(Ks + i * Sm::kLdK + d, a.qkv + (valid ? t0 + i : 0) * a.ld + key_dim + int64_t{kh} * DK + d,
                 valid);
    }
    const float* P = ws.P + (int64_t{h} * ws.chunks + c) * kL * kL;
    for (int e = tid; e < kL * kL / 4; e += kThreads)
      cp_async16(Ps + e / (kL / 4) * Sm::kLdP + e % (kL / 4) * 4, P + e * 4, true);
  };

  load_qwug(0);
  cp_async_commit();
  for (int c = 0; c < ws.chunks; ++c) {
    const int64_t t0 = int64_t{c} * kL;
    load_kp(c);
    cp_async_commit();
    cp_async_wait<1>();  // this chunk's Q, W, U, G
    __syncthreads();

    // V' = U − W S or Q S for this warp's 16 rows and 16 columns.
    float acc[1][2][4] = {};
    warp_mma<1, 2, SPLIT>(acc, RowMajorA{(q_warp ? Qs : Ws) + m0 * Sm::kLdQ, Sm::kLdQ}, Ss + n0 * Sm::kLdS,
                          Sm::kLdS, Sm::kLo, DK);
    const float GL = Gs[kL - 1];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = m0 + g + 8 * half;
      const float eg = expf(Gs[r]), el = expf(GL - Gs[r]);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = acc[0][nt][2 * half + e];
          if (q_warp) {
            v *= eg;
          } else {
            const int n = n0 + nt * 8 + 2 * t + e;
            const float vp = Us[r * Sm::kLdU + n] - v;
            store_split<false>(Vs + n * Sm::kLdV + r, Sm::kLo, vp);
            store_split<SPLIT>(Vd + n * Sm::kLdV + r, Sm::kLo, vp * el);
          }
        }
    }
    cp_async_wait<0>();  // this chunk's K and P
    __syncthreads();
    if (c + 1 < ws.chunks) load_qwug(c + 1);
    cp_async_commit();  // (an empty group past the last chunk keeps the count)

    if (q_warp) {
      // O = e^{G} ⊙ Q S + P V' (P is lower triangular: columns past this warp's last row add nothing).
      warp_mma<1, 2, false>(acc, RowMajorA{Ps + m0 * Sm::kLdP, Sm::kLdP}, Vs + n0 * Sm::kLdV, Sm::kLdV,
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
    // products before the barrier above.
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
    __syncthreads();  // Ss is the next chunk's; every tile is reloaded
  }

  if (s_warp)  // the exact state, from the registers (Ss holds it split)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) state[state_col(nt, e) * DK + state_row(e)] = s_acc[0][nt][e];
}

template <int DK, bool SPLIT>
void launch(const DeltaNetScanArgs& a, const Workspace& ws, cudaStream_t stream) {
  constexpr size_t scan_bytes = sizeof(float) * ScanSmem<DK>::kFloats;
  static const bool configured = [] {  // above the 48 KB default: once per instantiation
    check(cudaFuncSetAttribute(chunk_prepare_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(PrepSmem<DK>::bytes(kMaxDv))),
          "deltanet_chunked_scan: shared memory");
    check(cudaFuncSetAttribute(chunk_scan_kernel<DK, SPLIT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(scan_bytes)),
          "deltanet_chunked_scan: shared memory");
    return true;
  }();
  (void)configured;
  chunk_prepare_kernel<DK><<<dim3(static_cast<unsigned>(ws.chunks), static_cast<unsigned>(a.Hk)),
                             kPrepThreads, PrepSmem<DK>::bytes(a.Dv), stream>>>(a, ws);
  check_launch("deltanet_chunk_prepare");
  chunk_scan_kernel<DK, SPLIT><<<dim3(static_cast<unsigned>(a.Hv), static_cast<unsigned>(a.Dv / kCols)),
                                 kScanWarps * 32, scan_bytes, stream>>>(a, ws);
  check_launch("deltanet_chunk_scan");
}

bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace

bool deltanet_chunked_supported(const DeltaNetScanArgs& a) {
  return (a.Dk == 64 || a.Dk == 128) && a.Dv % kCols == 0 && a.Dv <= kMaxDv && a.Hk > 0 && a.Hv % a.Hk == 0 &&
         a.ld % 4 == 0 && a.ld_out % 2 == 0 && aligned(a.qkv, 16) && aligned(a.out, 8);
}

int64_t deltanet_chunked_workspace_floats(int64_t n, int Hv, int Dk, int Dv) {
  const int64_t n_pad = (n + kL - 1) / kL * kL;
  return int64_t{Hv} * n_pad * (Dk + Dv + kL + 1);
}

void deltanet_chunked_scan(const DeltaNetScanArgs& a, float* workspace, cudaStream_t stream,
                           bool split_tf32) {
  if (a.n == 0) return;
  if (!deltanet_chunked_supported(a) || !aligned(workspace, 16))
    check(cudaErrorInvalidValue, "deltanet_chunked_scan: unsupported shape or alignment");
  const Workspace ws = carve(workspace, a.n, a.Hv, a.Dk, a.Dv);
  if (a.Dk == 128)
    split_tf32 ? launch<128, true>(a, ws, stream) : launch<128, false>(a, ws, stream);
  else
    split_tf32 ? launch<64, true>(a, ws, stream) : launch<64, false>(a, ws, stream);
}

}  // namespace qwick::cuda
