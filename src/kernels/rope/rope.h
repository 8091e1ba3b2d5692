// Partial rotary position embedding (model-spec.md §2.4): the first `rotary_dim` dims of each head
// rotate in NeoX "rotate_half" pairs (i, i + rotary_dim/2); the rest pass through. For text the
// interleaved M-RoPE sections all carry the same position, so this is exactly plain RoPE.
#pragma once

#include <cstdint>
#include <vector>

namespace qwick {

class RopeTable {
 public:
  RopeTable(double theta, int rotary_dim);
  int rotary_dim() const { return rotary_dim_; }
  // cos/sin of the rotary_dim/2 angles at `pos`, computed in f32 as transformers does.
  void angles(int64_t pos, float* cos_out, float* sin_out) const;

 private:
  int rotary_dim_;
  std::vector<float> inv_freq_;  // [rotary_dim / 2]
};

// Rotates x[0, rotary_dim) in place with the angles of one position.
void apply_rope(float* x, int rotary_dim, const float* cos, const float* sin);

}  // namespace qwick
