#include "core/scratch_arena.h"

namespace qwick {

float* ScratchArena::floats(size_t n) {
  const size_t rounded = (n + 15) / 16 * 16;  // keep every slice 64-byte aligned
  if (used_ + rounded <= main_.size()) {
    float* p = main_.data() + used_;
    used_ += rounded;
    return p;
  }
  overflow_.emplace_back(rounded);
  overflow_total_ += rounded;
  return overflow_.back().data();
}

void ScratchArena::reset() {
  if (!overflow_.empty()) {
    main_.resize(main_.size() + overflow_total_);
    overflow_.clear();
    overflow_total_ = 0;
  }
  used_ = 0;
}

}  // namespace qwick
