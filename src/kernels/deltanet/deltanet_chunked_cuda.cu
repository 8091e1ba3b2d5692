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

__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc))));
}

// ---- deltanet_chunk_prepare -------------------------------------------------------------------

constexpr int kPrepThreads = 256;
constexpr int kMaxDv = 256;  // the prepare kernel stages a chunk's value rows, Dv + 4 floats each

template <int DK>
struct PrepSmem {
  // Rows read as float4 by 8 threads of consecutive rows at once: DK + 4 puts them in distinct banks.
  static constexpr int kLd = DK + 4, kLdA = kL + 4;
  static constexpr int kQ = 0, kK = kQ + kL * kLd, kA = kK + kL * kLd, kKK = kA + kL * kLdA,
                       kg = kKK + kL * kL, kb = kg + kL, kG = kb + kL, kFloats = kG + kL;
  // Then the chunk's value rows of one value head, kL rows of Dv + 4.
  static size_t bytes(int Dv) { return sizeof(float) * (kFloats + size_t{kL} * (Dv + 4)); }
};

template <int DK>
__global__ void __launch_bounds__(kPrepThreads) chunk_prepare_kernel(DeltaNetScanArgs a, Workspace ws) {
  using Sm = PrepSmem<DK>;
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  float *Qs = sm + Sm::kQ, *Ks = sm + Sm::kK, *As = sm + Sm::kA, *gs = sm + Sm::kg, *bs = sm + Sm::kb,
        *Gs = sm + Sm::kG, *Vs = sm + Sm::kFloats;
  const int ld_v = a.Dv + 4;
  float *QKs = Qs, *KKs = sm + Sm::kKK;  // [kL][kL] each; QKᵀ takes Q's place once Q is read
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
    *reinterpret_cast<float4*>(Qs + i * Sm::kLd + d) = q;
    *reinterpret_cast<float4*>(Ks + i * Sm::kLd + d) = k;
  }
  __syncthreads();

  // QKᵀ and KKᵀ, shared by the value heads of this key head: rows ti + 16·ii, columns tj + 16·jj.
  const int ti = tid / 16, tj = tid % 16;
  float qk[4][4] = {}, kk[4][4] = {};
  for (int d = 0; d < DK; d += 4) {
    float4 qi[4], ki[4], kj[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      qi[r] = *reinterpret_cast<const float4*>(Qs + (ti + 16 * r) * Sm::kLd + d);
      ki[r] = *reinterpret_cast<const float4*>(Ks + (ti + 16 * r) * Sm::kLd + d);
      kj[r] = *reinterpret_cast<const float4*>(Ks + (tj + 16 * r) * Sm::kLd + d);
    }
#pragma unroll
    for (int ii = 0; ii < 4; ++ii)
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        qk[ii][jj] = dot4(qi[ii], kj[jj], qk[ii][jj]);
        kk[ii][jj] = dot4(ki[ii], kj[jj], kk[ii][jj]);
      }
  }
  __syncthreads();  // every thread is done with Q
#pragma unroll
  for (int ii = 0; ii < 4; ++ii)
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      QKs[(ti + 16 * ii) * kL + tj + 16 * jj] = qk[ii][jj];
      KKs[(ti + 16 * ii) * kL + tj + 16 * jj] = kk[ii][jj];
    }

  const int ratio = a.Hv / a.Hk;
  for (int vh = 0; vh < ratio; ++vh) {
    const int h = kh * ratio + vh;
    if (tid < kL) {
      const int64_t t = t0 + tid;
      const bool valid = t < a.n;
      // log of the decay the token scan multiplies by; FLT_MIN keeps an underflowed decay finite.
      gs[tid] = valid ? logf(fmaxf(a.decay[t * a.Hv + h], FLT_MIN)) : 0.0f;
      bs[tid] = valid ? a.beta[t * a.Hv + h] : 0.0f;
    }
    // The value rows, staged so the substitution below reads them from shared memory (read from
    // global memory inside its sequential loop, each row's load was a full round trip).
    for (int e = tid; e < kL * a.Dv / 4; e += kPrepThreads) {
      const int i = e / (a.Dv / 4), d = e % (a.Dv / 4) * 4;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (t0 + i < a.n)
        v = *reinterpret_cast<const float4*>(a.qkv + (t0 + i) * a.ld + 2 * key_dim + int64_t{h} * a.Dv + d);
      *reinterpret_cast<float4*>(Vs + i * ld_v + d) = v;
    }
    __syncthreads();
    if (tid == 0) {
      float acc = 0.0f;
      for (int i = 0; i < kL; ++i) acc += gs[i], Gs[i] = acc;
    }
    __syncthreads();
    const int64_t head_row = int64_t{h} * ws.n_pad + t0;
    if (tid < kL) ws.G[head_row + tid] = Gs[tid];
    float* P = ws.P + (int64_t{h} * ws.chunks + chunk) * kL * kL;
#pragma unroll
    for (int ii = 0; ii < 4; ++ii)
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int i = ti + 16 * ii, j = tj + 16 * jj;
        const float dij = j <= i ? expf(Gs[i] - Gs[j]) : 0.0f;
        As[i * Sm::kLdA + j] = j < i ? bs[i] * KKs[i * kL + j] * dij : 0.0f;
        P[i * kL + j] = QKs[i * kL + j] * dij;
      }
    __syncthreads();

    // Forward substitution x_i = r_i − Σ_{j<i} A_ij x_j, a thread per column of [W | U]; the
    // column stays in registers (fully unrolled), A is read as broadcast float4s.
    for (int c = tid; c < DK + a.Dv; c += kPrepThreads) {
      const bool is_w = c < DK;
      float* out = is_w ? ws.W + head_row * DK + c : ws.U + head_row * a.Dv + (c - DK);
      const int64_t ld_out = is_w ? DK : a.Dv;
      float x[kL];
#pragma unroll
      for (int i = 0; i < kL; ++i) {
        float r;
        if (is_w)
          r = bs[i] * expf(Gs[i]) * Ks[i * Sm::kLd + c];
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
    __syncthreads();  // As, gs, bs, Gs are the next value head's
  }
}

// ---- deltanet_chunk_scan ----------------------------------------------------------------------

// Two warps per chunk row tile: warps 0-3 compute V' = U − W·S for rows 16w, warps 4-7 Q·S for the
// same rows of Q (and then P·V' and the output); the state update S = e^{G_L} S + Kᵀ(...) is shared by
// DK / 16 warps, 16 state rows each. (Against four warps each doing both products: 858 against 890 µs
// for prepare and scan of a 4096-row layer on the H200.)
constexpr int kScanWarps = 8, kCols = 32;  // state columns (value dims) per block

template <int DK>
struct ScanSmem {
  // Fragment reads of m16n8k8: A by rows at (group, lane % 4) -> stride ≡ 4 (mod 32) is conflict free;
  // K read transposed and the B operands at (lane % 4, group) -> stride ≡ 8 (mod 32).
  // V', Vd and S, the B operands every warp reads, are stored already split (tf32 hi bits, then at
  // kLo further the lo bits): converting them at each read cost every warp the same instructions.
  static constexpr int kLdQ = DK + 4, kLdK = DK + 8, kLdP = kL + 4, kLdV = kCols + 8;
  static constexpr int kQ = 0, kW = kQ + kL * kLdQ, kK = kW + kL * kLdQ, kP = kK + kL * kLdK,
                       kU = kP + kL * kLdP, kV = kU + kL * kLdV, kVd = kV + kL * kLdV, kS = kVd + kL * kLdV,
                       kG = kS + DK * kLdV, kLo = kG + kL - kV, kFloats = kV + 2 * kLo;
};

template <int DK, bool SPLIT>
__global__ void __launch_bounds__(kScanWarps * 32, 1) chunk_scan_kernel(DeltaNetScanArgs a, Workspace ws) {
  using Sm = ScanSmem<DK>;
  static_assert(DK / 16 <= kScanWarps, "a warp per 16 state rows");
  constexpr int kThreads = kScanWarps * 32, kRowTiles = kL / 16;
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  float *Qs = sm + Sm::kQ, *Ws = sm + Sm::kW, *Ks = sm + Sm::kK, *Ps = sm + Sm::kP, *Us = sm + Sm::kU,
        *Vs = sm + Sm::kV, *Vd = sm + Sm::kVd, *Ss = sm + Sm::kS, *Gs = sm + Sm::kG;
  const int h = blockIdx.x, kh = h / (a.Hv / a.Hk), j0 = blockIdx.y * kCols;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int64_t key_dim = int64_t{a.Hk} * DK;
  const bool q_warp = warp >= kRowTiles;   // Q·S and the output, else V'
  const int m0 = (warp % kRowTiles) * 16;  // this warp's rows of the chunk
  const bool s_warp = warp < DK / 16;      // owns state rows d0 .. d0 + 15
  const int d0 = warp * 16;
  float* state = a.state + (int64_t{h} * a.Dv + j0) * DK;  // [kCols][DK]: row n is the spec's column j0 + n

  // Accumulator element e of this warp's state tile nt: state row (k dim) and column (value dim).
  auto state_row = [&](int e) { return d0 + g + 8 * (e >> 1); };
  auto state_col = [&](int nt, int e) { return nt * 8 + 2 * t + (e & 1); };
  float s_acc[1][4][4];
  if (s_warp)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s_acc[0][nt][e] = state[state_col(nt, e) * DK + state_row(e)];
        store_split<SPLIT>(Ss + state_row(e) * Sm::kLdV + state_col(nt, e), Sm::kLo, s_acc[0][nt][e]);
      }
  __syncthreads();

  // Loads in two parts: Q, W, U, G are read only before the barrier in the middle of a chunk, so the
  // next chunk's stream in while this one finishes (P V' and the state update); K and P follow.
  // Measured neutral on the H200 (1.19 vs 1.20 ms per 4K layer): the loads are not what a chunk waits on.
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
      cp_async16(Us + i * Sm::kLdV + n, ws.U + (head_row + i) * a.Dv + j0 + n, true);
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
  for (int c = 0; c < ws.chunks; ++c) {
    const int64_t t0 = int64_t{c} * kL;
    load_kp(c);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    // V' = U − W S (warps 0-3) or Q S (warps 4-7) for this warp's 16 rows.
    float acc[1][4][4] = {};
    warp_mma<1, 4, SPLIT>(acc, (q_warp ? Qs : Ws) + m0 * Sm::kLdQ, Sm::kLdQ, 1, Ss, Sm::kLdV, 1, Sm::kLo, DK);
    const float GL = Gs[kL - 1];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = m0 + g + 8 * half;
      const float eg = expf(Gs[r]), el = expf(GL - Gs[r]);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = acc[0][nt][2 * half + e];
          if (q_warp) {
            v *= eg;
          } else {
            const int n = nt * 8 + 2 * t + e;
            const float vp = Us[r * Sm::kLdV + n] - v;
            store_split<SPLIT>(Vs + r * Sm::kLdV + n, Sm::kLo, vp);
            store_split<SPLIT>(Vd + r * Sm::kLdV + n, Sm::kLo, vp * el);
          }
        }
    }
    __syncthreads();
    if (c + 1 < ws.chunks) load_qwug(c + 1);  // committed and waited for with the next K and P

    if (q_warp) {
      // O = e^{G} ⊙ Q S + P V' (P is lower triangular: columns past this warp's last row add nothing).
      warp_mma<1, 4, SPLIT>(acc, Ps + m0 * Sm::kLdP, Sm::kLdP, 1, Vs, Sm::kLdV, 1, Sm::kLo, m0 + 16);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = t0 + m0 + g + 8 * half;
        if (row >= a.n) continue;
        float* o = a.out + row * a.ld_out + int64_t{h} * a.Dv + j0 + 2 * t;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
          *reinterpret_cast<float2*>(o + nt * 8) =
              make_float2(acc[0][nt][2 * half], acc[0][nt][2 * half + 1]);
      }
    }

    // S = e^{G_L} S + Kᵀ (e^{G_L − G} ⊙ V'): Kᵀ's element (d, i) is Ks[i][d]. Ss was last read by the
    // products before the barrier above.
    if (s_warp) {
      const float eL = expf(GL);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s_acc[0][nt][e] *= eL;
      warp_mma<1, 4, SPLIT>(s_acc, Ks + d0, 1, Sm::kLdK, Vd, Sm::kLdV, 1, Sm::kLo, kL);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          store_split<SPLIT>(Ss + state_row(e) * Sm::kLdV + state_col(nt, e), Sm::kLo, s_acc[0][nt][e]);
    }
    __syncthreads();  // Ss is the next chunk's; every tile is reloaded
  }

  if (s_warp)  // the exact state, from the registers (Ss holds it split)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
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
