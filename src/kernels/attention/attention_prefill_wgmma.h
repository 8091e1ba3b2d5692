// The warpgroup-product (sm_90a) kernel behind attention_prefill's default variant; attention_prefill
// dispatches to it for the head sizes it takes and falls back to the pipelined mma.sync kernel.
#pragma once

#include "kernels/attention/attention_cuda.h"

namespace qwick::cuda {

bool attention_prefill_wgmma_supports(const AttentionPrefillArgs& a);  // head_dim 64, 128 or 256
void attention_prefill_wgmma(const AttentionPrefillArgs& a, cudaStream_t stream);

}  // namespace qwick::cuda
