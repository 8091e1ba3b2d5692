// The pipelined prefill GEMM (matmul_cuda.h: gemm_pipelined), same contract as the simple kernel in
// gemm_cuda.cu, built for throughput:
//
//   tiles     BM (64 or 128) slots × 128 outputs per block, BM/64 × 4 warps of 64 × 32, 64-wide k slices
//   pipeline  kStages slices in flight through cp.async: the X tile (gathered through x_rows, zero
//             filled past the tile's rows) and W in its file format, raw codes plus the scale and bias
//             words of the slice; one barrier per slice
//   dequant   in registers, straight into mma.sync B fragments: each warp decodes only its own 32
//             columns, and nothing wider than the 4-bit codes ever sits in shared memory
//
// The k order inside a slice is permuted so that every lane reads contiguous bytes: in k16 step kk,
// lane t (= lane % 4) feeds the mma's k slots {2t, 2t+1, 2t+8, 2t+9} with the slice's columns
// 16t + 4kk + {0, 1, 2, 3}. A dot product does not care about the order of its terms as long as A
// and B agree, so lane t owns the slice's columns [16t, 16t + 16): 8 bytes of 4-bit codes (one
// 64-bit load), 16 of 8-bit, 32 of bf16, and 32 bytes of its X rows. 16 columns never straddle a
// quantization group (groups are multiples of 32), so one scale and bias serve the lane's whole slice.
//
// 4-bit codes become bf16 without a float conversion (gemm_tile.cuh: dequant4_pair); 8-bit codes (up
// to 255, past what that trick holds) go through f32; no prefill matrix of the real model is 8-bit.
//
// Shared memory rows are padded where a warp's loads would otherwise hit one bank twice: X rows are
// 144 bytes (lanes g, g+1 of a quarter-warp land 4 banks apart), bf16 W rows too.
//
// Tests: tests/cuda/cuda_kernels_test.cpp (Gemm.*, Moe.GroupingGroupedGemmAndCombine) run every case
// through all three kernels.
#include <cuda_bf16.h>

#include "kernels/cuda_launch.h"
#include "kernels/matmul/dequant.cuh"
#include "kernels/matmul/gemm_tile.cuh"

namespace qwick::cuda {
namespace {

constexpr int kBN = 128;  // outputs per block
constexpr int kBK = 64;   // k slice
constexpr int kStages = 4;
constexpr int kLdX = kBK + 8;  // bf16 per X row in shared memory (144 bytes)

template <WeightFormat F>
struct WTile;
template <>
struct WTile<WeightFormat::kAffine4> {
  static constexpr int kRowBytes = kBK / 2, kLdBytes = kRowBytes;
};
template <>
struct WTile<WeightFormat::kAffine8> {
  static constexpr int kRowBytes = kBK, kLdBytes = kRowBytes;
};
template <>
struct WTile<WeightFormat::kBF16> {
  static constexpr int kRowBytes = kBK * 2, kLdBytes = kRowBytes + 16;
};

template <WeightFormat F, int BM>
struct Layout {
  static constexpr int kThreads = BM / 64 * 4 * 32;
  static constexpr int kXBytes = BM * kLdX * 2;
  static constexpr int kWBytes = kBN * WTile<F>::kLdBytes;
  static constexpr int kSBBytes = kBN * 16;  // per W row: two scale words, two bias words
  static constexpr int kStageBytes = kXBytes + kWBytes + kSBBytes;
  static constexpr int kBytes = kStages * kStageBytes;
};

template <WeightFormat F, int BM>
__global__ void __launch_bounds__(Layout<F, BM>::kThreads, BM == 128 ? 1 : 2)
    gemm_pipelined_kernel(GemmArgs a) {
  using L = Layout<F, BM>;
  constexpr int kThreads = L::kThreads, kLdW = WTile<F>::kLdBytes;
  constexpr int kWChunks = WTile<F>::kRowBytes / 16;  // 16-byte chunks per W row of a slice
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);

  GemmBlock blk;
  if (!gemm_block<BM, kBN>(a, &blk)) return;
  const DeviceMatrix& m = blk.m;
  const int64_t s0 = blk.s0, s1 = blk.s1, r0 = blk.r0;
  const int64_t groups = F == WeightFormat::kBF16 ? 0 : m.cols / m.group_size;
  const int KT = static_cast<int>(a.K / kBK);

  // Each thread always copies the same rows: their source pointers (at k = 0) are set up once, and
  // a slice only adds its column offset. Invalid rows point at valid memory and copy 0 bytes.
  constexpr int kXPerThread = BM * 8 / kThreads, kWPerThread = kBN * kWChunks / kThreads;
  constexpr int kSBPerThread = F == WeightFormat::kBF16 ? 0 : kBN * 4 / kThreads;
  const uint16_t* x_src[kXPerThread];
  uint32_t x_valid = 0;
#pragma unroll
  for (int j = 0; j < kXPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    const int64_t slot = s0 + (i >> 3);
    const bool valid = slot < s1;
    x_valid |= static_cast<uint32_t>(valid) << j;
    x_src[j] = (valid ? x_row(a, slot) : a.x) + (i & 7) * 8;
  }
  const uint8_t* w_src[kWPerThread];
#pragma unroll
  for (int j = 0; j < kWPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    const int64_t row = r0 + i / kWChunks;
    w_src[j] = row < m.rows ? m.data + row * m.row_bytes + (i % kWChunks) * 16 : nullptr;
  }
  GroupWords<kSBPerThread> words;
  if constexpr (kSBPerThread > 0) {
    int64_t rows[kSBPerThread];
#pragma unroll
    for (int j = 0; j < kSBPerThread; ++j) rows[j] = r0 + ((threadIdx.x + j * kThreads) >> 2);
    words.init(m, rows, threadIdx.x);
  }

  auto load_stage = [&](int kt, int stage) {
    uint8_t* base = smem + stage * L::kStageBytes;
    uint16_t* xs = reinterpret_cast<uint16_t*>(base);
    uint8_t* ws = base + L::kXBytes;
    uint32_t* sb = reinterpret_cast<uint32_t*>(base + L::kXBytes + L::kWBytes);
    const int k0 = kt * kBK;
#pragma unroll
    for (int j = 0; j < kXPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      cp_async16(xs + (i >> 3) * kLdX + (i & 7) * 8, x_src[j] + k0, (x_valid >> j) & 1);
    }
#pragma unroll
    for (int j = 0; j < kWPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      cp_async16(ws + (i / kWChunks) * kLdW + (i % kWChunks) * 16,
                 w_src[j] ? w_src[j] + col_byte<F>(k0) : m.data, w_src[j] != nullptr);
    }
    if constexpr (F != WeightFormat::kBF16) {
#pragma unroll
      for (int j = 0; j < kSBPerThread; ++j)
        words.load(j, smem_addr(sb + threadIdx.x + j * kThreads), k0 / m.group_size);
    }
  };

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wm = (warp >> 2) * 64, wn = (warp & 3) * 32;
  float acc[4][4][4] = {};
  // Parity of the first group element of each of this lane's W rows (see the scale words above).
  int row_parity[4] = {};
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) row_parity[nt] = static_cast<int>(((r0 + wn + nt * 8 + g) * groups) & 1);

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < KT) load_stage(s, s);
    cp_async_commit();
  }

  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // slice kt has landed for everyone; everyone is done with slice kt - 1
    if (kt + kStages - 1 < KT) load_stage(kt + kStages - 1, (kt + kStages - 1) % kStages);
    cp_async_commit();

    const uint8_t* base = smem + (kt % kStages) * L::kStageBytes;
    const uint16_t* xs = reinterpret_cast<const uint16_t*>(base);
    const uint8_t* ws = base + L::kXBytes;
    const uint32_t* sb = reinterpret_cast<const uint32_t*>(base + L::kXBytes + L::kWBytes);

    // This lane's group parameters per n-tile (its slice columns [16t, 16t + 16) share one group),
    // and its 4-bit codes: one 64-bit load, word p holding k16 steps 2p and 2p + 1.
    uint32_t s2[4] = {}, b2[4] = {}, w4[4][2] = {};
    int q0 = 0, dq = 0;  // group of the slice's first column; of this lane's first column, relative
    if constexpr (F != WeightFormat::kBF16) {
      const int k0 = kt * kBK;
      q0 = k0 / m.group_size;
      dq = (k0 + 16 * t) / m.group_size - q0;
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int r = wn + nt * 8 + g;
      if constexpr (F == WeightFormat::kAffine4) {
        const uint2 v = *reinterpret_cast<const uint2*>(ws + r * kLdW + 8 * t);
        w4[nt][0] = v.x, w4[nt][1] = v.y;
      }
      if constexpr (F != WeightFormat::kBF16) {
        group_pair(sb, r, row_parity[nt], q0, dq, &s2[nt], &b2[nt]);
      }
    }

#pragma unroll
    for (int p = 0; p < 2; ++p) {  // k16 steps 2p, 2p + 1
      // B fragments of both steps for every n-tile: bf[nt][kh] = {b0, b1}.
      uint32_t bf[4][2][2];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const uint8_t* src = ws + (wn + nt * 8 + g) * kLdW;
        if constexpr (F == WeightFormat::kAffine4) {
          const uint32_t w = w4[nt][p], w_hi = w >> 4;
#pragma unroll
          for (int j = 0; j < 4; ++j) bf[nt][j >> 1][j & 1] = dequant4_pair(w, w_hi, j, s2[nt], b2[nt]);
        } else if constexpr (F == WeightFormat::kAffine8) {
          const uint2 v = *reinterpret_cast<const uint2*>(src + 16 * t + 8 * p);
          const float sc = __uint_as_float(s2[nt] << 16), bi = __uint_as_float(b2[nt] << 16);
#pragma unroll
          for (int kh = 0; kh < 2; ++kh) {
            const uint32_t w = kh ? v.y : v.x;
            bf[nt][kh][0] = pack_bf16x2(static_cast<float>(w & 0xffu) * sc + bi,
                                        static_cast<float>((w >> 8) & 0xffu) * sc + bi);
            bf[nt][kh][1] = pack_bf16x2(static_cast<float>((w >> 16) & 0xffu) * sc + bi,
                                        static_cast<float>(w >> 24) * sc + bi);
          }
        } else {
          const uint4 v = *reinterpret_cast<const uint4*>(src + 32 * t + 16 * p);
          bf[nt][0][0] = v.x, bf[nt][0][1] = v.y, bf[nt][1][0] = v.z, bf[nt][1][1] = v.w;
        }
      }
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        // Rows g and g + 8 of the m-tile, the lane's 8 columns of these two steps.
        const uint4 lo = *reinterpret_cast<const uint4*>(xs + (wm + mt * 16 + g) * kLdX + 16 * t + 8 * p);
        const uint4 hi = *reinterpret_cast<const uint4*>(xs + (wm + mt * 16 + g + 8) * kLdX + 16 * t + 8 * p);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          mma_bf16(acc[mt][nt], lo.x, hi.x, lo.y, hi.y, bf[nt][0][0], bf[nt][0][1]);
          mma_bf16(acc[mt][nt], lo.z, hi.z, lo.w, hi.w, bf[nt][1][0], bf[nt][1][1]);
        }
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t slot = s0 + wm + mt * 16 + g + 8 * h;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
        store_pair(a, blk, slot, wn + nt * 8 + 2 * t, acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
    }
  }
}

template <WeightFormat F, int BM>
void launch(const GemmArgs& a, unsigned row_tiles, cudaStream_t stream) {
  using L = Layout<F, BM>;
  static const bool raised = [] {
    check(cudaFuncSetAttribute(gemm_pipelined_kernel<F, BM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               L::kBytes),
          "gemm_pipelined: shared memory limit");
    return true;
  }();
  (void)raised;
  const dim3 grid(blocks_for(a.N, kBN), row_tiles);
  launch_kernel(gemm_pipelined_kernel<F, BM>, grid, dim3(L::kThreads), L::kBytes, stream, a.overlap,
                "gemm_pipelined", a);
}

template <int BM>
void launch_format(const GemmArgs& a, unsigned row_tiles, cudaStream_t stream) {
  with_device_format(a.format, "gemm_pipelined: weights must be affine 4/8-bit or bf16 on the GPU",
                     [&](auto f) { launch<f.value, BM>(a, row_tiles, stream); });
}

}  // namespace

void gemm_pipelined(const GemmArgs& a, cudaStream_t stream) {
  const RowTiling t = row_tiling(a, 2 * multiprocessor_count());  // one 128-slot block fits an SM
  if (t.rows > 128) check(cudaErrorInvalidValue, "gemm_pipelined: tiles of 64 or 128 rows");
  if (t.tiles == 0) return;
  if (t.rows == 128)
    launch_format<128>(a, t.tiles, stream);
  else
    launch_format<64>(a, t.tiles, stream);
}

}  // namespace qwick::cuda
