// The context range of a decode attention split and the layout of its partial result, which the
// splits' kernel writes and the combine reads (attention_decode_cuda.cu).
#pragma once

#include "kernels/attention/attention_cuda.h"

namespace qwick::cuda {

// Split s covers positions [s·per, min(len, (s+1)·per)), per = ceil(len / splits); len comes from the
// device (graph replays), so a split may be empty.
struct SplitRange {
  int64_t begin, end;
};
__device__ __forceinline__ SplitRange split_range(const AttentionDecodeArgs& a, int split) {
  const int64_t len = static_cast<int64_t>(*a.d_pos) + 1;
  const int64_t per = (len + a.splits - 1) / a.splits;
  const int64_t begin = split * per;
  return {begin, begin + per < len ? begin + per : len};
}

// Query head h's partial from split s: head_dim unnormalised output values, then the running max m and
// the sum l of exp(score - m) (m = -inf, l = 0 for an empty range).
__device__ __forceinline__ float* partial_row(const AttentionDecodeArgs& a, int h, int split) {
  return a.partial + (static_cast<int64_t>(h) * a.splits + split) * (a.head_dim + 2);
}

}  // namespace qwick::cuda
