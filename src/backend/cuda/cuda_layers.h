// The CUDA forward pass, one function per layer kind and phase (as cpu_layers.h for the CPU). Each
// enqueues its kernels on ctx.stream (the MoE's prefill also on ctx.side) and adds the layer's output
// to the residual stream: decode's ctx.d.x (one row), prefill's ctx.p.hidden (n rows at positions
// [seq.position, seq.position + n)).
//
//   decode   one row: matrix-vector products (GEMV) with the RMSNorm folded into their input
//            (`input_norm`, CudaContext::fused_norm; null: the rms_norm kernel wrote ctx.d.normed),
//            reading the DeltaNet states of set seq.live and writing the other set (cuda_decode.h)
//   prefill  a chunk: tensor-core GEMMs on bf16 rows (ctx.p.normed, which the caller fills with the
//            layer's input norm), the states of set seq.live updated in place
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_state.h"
#include "backend/cuda/cuda_weights.h"

namespace qwick::cuda {

// cuda_attention.cpp
void decode_attention_layer(CudaContext& ctx, const CudaSequence& seq, const CudaAttentionWeights& w,
                            int slot, const float* input_norm);
void prefill_attention_layer(CudaContext& ctx, const CudaSequence& seq, const CudaAttentionWeights& w,
                             int slot, int64_t n);
// cuda_deltanet.cpp
void decode_deltanet_layer(CudaContext& ctx, const CudaSequence& seq, const CudaDeltaNetWeights& w, int slot,
                           const float* input_norm);
void prefill_deltanet_layer(CudaContext& ctx, const CudaSequence& seq, const CudaDeltaNetWeights& w, int slot,
                            int64_t n);
// cuda_moe.cpp. Decode reads the residual and applies the layer's post-attention norm itself; `layer`
// picks its MoeDecodeArgs::sync words.
void decode_moe_layer(CudaContext& ctx, const CudaLayerWeights& lw, int layer);
// From ctx.p.normed (the post-attention norm); next_norm: the next layer's input norm, which the
// combine then computes into ctx.p.normed (null: the caller runs it).
void prefill_moe_layer(CudaContext& ctx, const CudaMoeWeights& w, int64_t n, const float* next_norm);

}  // namespace qwick::cuda
