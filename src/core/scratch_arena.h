// Bump allocator for the temporaries of one forward pass: allocations are 64-byte aligned slices of
// one growing block, all released together by reset(). After the first pass at a given size no
// memory is allocated again (no per-token allocation).
#pragma once

#include <cstddef>
#include <vector>

#include "core/aligned_buffer.h"

namespace qwick {

class ScratchArena {
 public:
  // Zeroing is not promised: callers write before they read.
  float* floats(size_t n);
  int32_t* ints(size_t n) { return reinterpret_cast<int32_t*>(floats(n)); }
  // Releases every allocation; if the pass overflowed the main block, it is regrown to fit them all.
  void reset();

 private:
  AlignedBuffer<float> main_;
  size_t used_ = 0;
  std::vector<AlignedBuffer<float>> overflow_;
  size_t overflow_total_ = 0;
};

}  // namespace qwick
