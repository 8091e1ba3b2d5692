// The warpgroup-product (sm_90a) kernel behind attention_prefill: it takes head_dim 64, 128 and 256
// and returns false, launching nothing, for any other (attention_prefill then runs the mma.sync
// kernel, which takes head_dim 32).
#pragma once

#include "kernels/attention/attention_cuda.h"

namespace qwick::cuda {

bool attention_prefill_wgmma(const AttentionPrefillArgs& a, cudaStream_t stream);

}  // namespace qwick::cuda
