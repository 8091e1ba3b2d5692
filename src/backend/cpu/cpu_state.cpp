#include "backend/cpu/cpu_state.h"

#include <algorithm>
#include <cstring>

#include "core/numeric.h"

namespace qwick {

KvCache::KvCache(KvDtype dtype, int n_kv_heads, int head_dim)
    : dtype_(dtype), n_kv_heads_(n_kv_heads), head_dim_(head_dim) {}

void KvCache::reserve(int64_t n, int64_t limit) {
  if (n <= capacity_) return;
  const int64_t cap = std::max(n, std::min<int64_t>(std::max<int64_t>(2 * capacity_, 256), limit));
  const size_t row = static_cast<size_t>(head_dim_) * elem_bytes();
  for (AlignedBuffer<uint8_t>* buf : {&k_, &v_}) {
    AlignedBuffer<uint8_t> grown(static_cast<size_t>(n_kv_heads_) * static_cast<size_t>(cap) * row);
    for (int h = 0; h < n_kv_heads_; ++h)
      if (capacity_ > 0)
        std::memcpy(grown.data() + static_cast<size_t>(h * cap) * row, buf->data() + static_cast<size_t>(h * capacity_) * row,
                    static_cast<size_t>(capacity_) * row);
    *buf = std::move(grown);
  }
  capacity_ = cap;
}

void KvCache::write(int64_t pos, const float* k, const float* v) {
  const size_t row = static_cast<size_t>(head_dim_) * elem_bytes();
  for (int h = 0; h < n_kv_heads_; ++h) {
    uint8_t* kd = k_.data() + static_cast<size_t>(h * capacity_ + pos) * row;
    uint8_t* vd = v_.data() + static_cast<size_t>(h * capacity_ + pos) * row;
    const float* ks = k + static_cast<size_t>(h) * head_dim_;
    const float* vs = v + static_cast<size_t>(h) * head_dim_;
    if (dtype_ == KvDtype::kF32) {
      std::memcpy(kd, ks, row);
      std::memcpy(vd, vs, row);
    } else {
      auto* kb = reinterpret_cast<uint16_t*>(kd);
      auto* vb = reinterpret_cast<uint16_t*>(vd);
      for (int d = 0; d < head_dim_; ++d) {
        kb[d] = f32_to_bf16(ks[d]);
        vb[d] = f32_to_bf16(vs[d]);
      }
    }
  }
}

std::vector<uint8_t> KvCache::save(int64_t n) const {
  const size_t row = static_cast<size_t>(head_dim_) * elem_bytes(), rows = static_cast<size_t>(n) * row;
  std::vector<uint8_t> out(2 * static_cast<size_t>(n_kv_heads_) * rows);
  uint8_t* dst = out.data();
  for (const AlignedBuffer<uint8_t>* buf : {&k_, &v_})
    for (int h = 0; h < n_kv_heads_; ++h, dst += rows)
      if (rows) std::memcpy(dst, buf->data() + static_cast<size_t>(h) * static_cast<size_t>(capacity_) * row, rows);
  return out;
}

void KvCache::load(const std::vector<uint8_t>& saved, int64_t n, int64_t limit) {
  reserve(n, limit);
  const size_t row = static_cast<size_t>(head_dim_) * elem_bytes(), rows = static_cast<size_t>(n) * row;
  const uint8_t* src = saved.data();
  for (AlignedBuffer<uint8_t>* buf : {&k_, &v_})
    for (int h = 0; h < n_kv_heads_; ++h, src += rows)
      if (rows) std::memcpy(buf->data() + static_cast<size_t>(h) * static_cast<size_t>(capacity_) * row, src, rows);
}

KvHeadView KvCache::head(int kv_head) const {
  const size_t off = static_cast<size_t>(kv_head) * static_cast<size_t>(capacity_) * static_cast<size_t>(head_dim_) *
                     elem_bytes();
  return {dtype_, k_.data() + off, v_.data() + off};
}

CpuSequence::CpuSequence(const ModelConfig& cfg, KvDtype kv_dtype) {
  for (LayerKind kind : cfg.layers) {
    if (kind == LayerKind::kAttention) {
      slot.push_back(static_cast<int>(kv.size()));
      kv.emplace_back(kv_dtype, cfg.n_kv_heads, cfg.head_dim);
    } else {
      slot.push_back(static_cast<int>(deltanet.size()));
      DeltaNetState s;
      s.conv.resize(static_cast<size_t>(cfg.conv_kernel - 1) * static_cast<size_t>(cfg.conv_channels()));
      s.recurrent.resize(static_cast<size_t>(cfg.lin_n_v_heads) * cfg.lin_v_dim * cfg.lin_k_dim);
      deltanet.push_back(std::move(s));
    }
  }
}

void CpuSequence::copy_deltanet_from(const std::vector<DeltaNetState>& other) {
  for (size_t i = 0; i < deltanet.size(); ++i) {
    std::memcpy(deltanet[i].conv.data(), other[i].conv.data(), deltanet[i].conv.size() * sizeof(float));
    std::memcpy(deltanet[i].recurrent.data(), other[i].recurrent.data(), deltanet[i].recurrent.size() * sizeof(float));
  }
}

void CpuSequence::clear() {
  position = 0;  // stale KV rows are overwritten before they are read
  for (auto& s : deltanet) {
    std::memset(s.conv.data(), 0, s.conv.size() * sizeof(float));
    std::memset(s.recurrent.data(), 0, s.recurrent.size() * sizeof(float));
  }
}

}  // namespace qwick
