#include "backend/cpu/cpu_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/numeric.h"
#include "kernels/attention/kv_q8.h"

namespace qwick {

KvCache::KvCache(KvDtype dtype, int n_kv_heads, int head_dim)
    : dtype_(dtype), n_kv_heads_(n_kv_heads), head_dim_(head_dim) {}

size_t KvCache::row_bytes(int plane) const {
  if (plane == kKeyScales || plane == kValueScales) return dtype_ == KvDtype::kQ8 ? sizeof(float) : 0;
  return static_cast<size_t>(head_dim_) * kv_value_bytes(dtype_);
}

void KvCache::reserve(int64_t n, int64_t limit) {
  if (n <= capacity_) return;
  const int64_t cap = std::max(n, std::min<int64_t>(std::max<int64_t>(2 * capacity_, 256), limit));
  for (int p = 0; p < kPlanes; ++p) {
    const size_t row = row_bytes(p);
    if (row == 0) continue;
    AlignedBuffer<uint8_t> grown(static_cast<size_t>(n_kv_heads_) * static_cast<size_t>(cap) * row);
    if (capacity_ > 0)
      for (int h = 0; h < n_kv_heads_; ++h)
        std::memcpy(grown.data() + static_cast<size_t>(h * cap) * row, planes_[p].data() + offset(p, h, 0),
                    static_cast<size_t>(capacity_) * row);
    planes_[p] = std::move(grown);
  }
  capacity_ = cap;
}

void KvCache::write(int64_t pos, const float* k, const float* v) {
  for (int h = 0; h < n_kv_heads_; ++h)
    for (const int p : {kKeys, kValues}) {
      const float* src = (p == kKeys ? k : v) + static_cast<size_t>(h) * static_cast<size_t>(head_dim_);
      uint8_t* dst = planes_[p].data() + offset(p, h, pos);
      switch (dtype_) {
        case KvDtype::kF32:
          std::memcpy(dst, src, row_bytes(p));
          break;
        case KvDtype::kBF16:
          for (int d = 0; d < head_dim_; ++d) reinterpret_cast<uint16_t*>(dst)[d] = f32_to_bf16(src[d]);
          break;
        case KvDtype::kQ8: {
          const int scales = p == kKeys ? kKeyScales : kValueScales;
          const float scale = kv_q8_code_row(src, head_dim_, dst);
          std::memcpy(planes_[scales].data() + offset(scales, h, pos), &scale, sizeof scale);
          break;
        }
      }
    }
}

std::vector<uint8_t> KvCache::save(std::span<const KvRowRun> runs) const {
  size_t bytes = 0;
  for (const KvRowRun& r : runs)
    for (int p = 0; p < kPlanes; ++p)
      bytes += static_cast<size_t>(n_kv_heads_) * static_cast<size_t>(r.count) * row_bytes(p);
  std::vector<uint8_t> out(bytes);
  uint8_t* dst = out.data();
  for (int p = 0; p < kPlanes; ++p)
    for (int h = 0; h < n_kv_heads_; ++h)
      for (const KvRowRun& r : runs) {
        const size_t rows = static_cast<size_t>(r.count) * row_bytes(p);
        if (rows == 0) continue;
        std::memcpy(dst, planes_[p].data() + offset(p, h, r.row), rows);
        dst += rows;
      }
  return out;
}

void KvCache::load(const std::vector<uint8_t>& saved, std::span<const KvRowRun> runs) {
  const uint8_t* src = saved.data();
  for (int p = 0; p < kPlanes; ++p)
    for (int h = 0; h < n_kv_heads_; ++h)
      for (const KvRowRun& r : runs) {
        const size_t rows = static_cast<size_t>(r.count) * row_bytes(p);
        if (rows == 0) continue;
        std::memcpy(planes_[p].data() + offset(p, h, r.row), src, rows);
        src += rows;
      }
}

std::vector<uint8_t> KvCache::save(int64_t n) const {
  const KvRowRun all{0, n};
  return save(std::span<const KvRowRun>(&all, 1));
}

void KvCache::load(const std::vector<uint8_t>& saved, int64_t n, int64_t limit) {
  reserve(n, limit);
  const KvRowRun all{0, n};
  load(saved, std::span<const KvRowRun>(&all, 1));
}

KvHeadView KvCache::head(int kv_head, int64_t first_row) const {
  const auto at = [&](int p) { return planes_[p].data() + offset(p, kv_head, first_row); };
  return {dtype_, at(kKeys), at(kValues), reinterpret_cast<const float*>(at(kKeyScales)),
          reinterpret_cast<const float*>(at(kValueScales))};
}

namespace {
size_t round_to_line(size_t bytes) {
  return (bytes + 63) / 64 * 64;
}
}  // namespace

size_t KvCache::gather_bytes(int64_t rows) const {
  size_t bytes = 0;
  for (int p = 0; p < kPlanes; ++p) bytes += round_to_line(static_cast<size_t>(rows) * row_bytes(p));
  return bytes;
}

KvHeadView KvCache::gather(int kv_head, std::span<const KvRowRun> runs, uint8_t* dst) const {
  uint8_t* plane_start[kPlanes];
  for (int p = 0; p < kPlanes; ++p) {
    plane_start[p] = dst;
    for (const KvRowRun& r : runs) {
      const size_t rows = static_cast<size_t>(r.count) * row_bytes(p);
      if (rows == 0) continue;
      std::memcpy(dst, planes_[p].data() + offset(p, kv_head, r.row), rows);
      dst += rows;
    }
    dst = plane_start[p] + round_to_line(static_cast<size_t>(dst - plane_start[p]));
  }
  return {dtype_, plane_start[kKeys], plane_start[kValues],
          reinterpret_cast<const float*>(plane_start[kKeyScales]),
          reinterpret_cast<const float*>(plane_start[kValueScales])};
}

CpuSequence::CpuSequence(const ModelConfig& cfg) {
  int attention_layers = 0;
  for (LayerKind kind : cfg.layers) {
    if (kind == LayerKind::kAttention) {
      slot.push_back(attention_layers++);
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
    std::memcpy(deltanet[i].recurrent.data(), other[i].recurrent.data(),
                deltanet[i].recurrent.size() * sizeof(float));
  }
}

void CpuSequence::reserve_row_states(int64_t rows) {
  row_states.resize(deltanet.size());
  for (size_t i = 0; i < deltanet.size(); ++i)
    while (static_cast<int64_t>(row_states[i].size()) < rows) {
      DeltaNetState s;
      s.conv.resize(deltanet[i].conv.size());
      s.recurrent.resize(deltanet[i].recurrent.size());
      row_states[i].push_back(std::move(s));
    }
}

void CpuSequence::keep_row(int64_t row) {
  for (size_t i = 0; i < deltanet.size(); ++i) {
    const DeltaNetState& kept = row_states[i][static_cast<size_t>(row)];
    std::memcpy(deltanet[i].conv.data(), kept.conv.data(), deltanet[i].conv.size() * sizeof(float));
    std::memcpy(deltanet[i].recurrent.data(), kept.recurrent.data(),
                deltanet[i].recurrent.size() * sizeof(float));
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
