#include "backend/cuda/cuda_state.h"

#include "kernels/cuda/cuda_launch.h"

namespace qwick::cuda {

CudaSequence::CudaSequence(const ModelConfig& cfg, int64_t max_context, KvDtype kv_dtype)
    : cfg_(cfg), max_context_(max_context), kv_dtype_(kv_dtype) {
  auto carve = [&](Carver& c) {
    kv.clear();
    for (auto& set : deltanet) set.clear();
    slot.clear();
    for (LayerKind kind : cfg_.layers) {
      if (kind == LayerKind::kAttention) {
        slot.push_back(static_cast<int>(kv.size()));
        if (kv_q8())
          kv.push_back({c.take<uint8_t>(kv_elems()), c.take<uint8_t>(kv_elems()), c.take<float>(kv_rows()),
                        c.take<float>(kv_rows())});
        else
          kv.push_back({c.take<uint16_t>(kv_elems()), c.take<uint16_t>(kv_elems()), nullptr, nullptr});
      } else {
        slot.push_back(static_cast<int>(deltanet[0].size()));
        for (auto& set : deltanet)
          set.push_back({c.take<float>(conv_state_floats()), c.take<float>(recurrent_state_floats())});
      }
    }
    if (kv_q8() && !kv.empty()) kv_bf16 = {c.take<uint16_t>(kv_elems()), c.take<uint16_t>(kv_elems())};
  };
  Carver sizing(nullptr);
  carve(sizing);
  buf_ = DeviceBuffer(sizing.used());
  Carver real(buf_.data());
  carve(real);
}

void CudaSequence::clear(cudaStream_t stream) {
  for (auto& [conv, rec] : deltanet[live]) {
    check(cudaMemsetAsync(conv, 0, sizeof(float) * conv_state_floats(), stream), "reset");
    check(cudaMemsetAsync(rec, 0, sizeof(float) * recurrent_state_floats(), stream), "reset");
  }
  position = 0;
}

size_t CudaSequence::snapshot_bytes(int64_t positions) const {
  const size_t kv_rows = static_cast<size_t>(cfg_.n_kv_heads) * static_cast<size_t>(positions) *
                         kv_row_bytes(kv_dtype_, cfg_.head_dim);
  return kv.size() * 2 * kv_rows +
         deltanet[live].size() * (conv_state_floats() + recurrent_state_floats()) * sizeof(float);
}

void CudaSequence::copy(uint8_t* packed, int64_t positions, bool to_snapshot, cudaStream_t stream) const {
  const size_t head_rows =
      static_cast<size_t>(positions) * static_cast<size_t>(cfg_.head_dim) * kv_elem_bytes();
  const size_t head_stride =
      static_cast<size_t>(max_context_) * static_cast<size_t>(cfg_.head_dim) * kv_elem_bytes();
  auto move = [&](void* state, size_t bytes) {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(to_snapshot ? packed : state, to_snapshot ? state : packed, bytes,
                          cudaMemcpyDeviceToDevice, stream),
          "snapshot copy");
    packed += bytes;
  };
  for (const KvLayer& layer : kv) {
    for (void* cache : {layer.k, layer.v})
      for (int h = 0; h < cfg_.n_kv_heads; ++h)
        move(static_cast<uint8_t*>(cache) + static_cast<size_t>(h) * head_stride, head_rows);
    if (kv_q8())
      for (float* scales : {layer.k_scale, layer.v_scale})
        for (int h = 0; h < cfg_.n_kv_heads; ++h)
          move(scales + static_cast<size_t>(h) * static_cast<size_t>(max_context_),
               static_cast<size_t>(positions) * sizeof(float));
  }
  for (const auto& [conv, rec] : deltanet[live]) {
    move(conv, conv_state_floats() * sizeof(float));
    move(rec, recurrent_state_floats() * sizeof(float));
  }
  check(cudaStreamSynchronize(stream), "snapshot copy");
}

}  // namespace qwick::cuda
