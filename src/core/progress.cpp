#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace qwick {

Progress::Progress(std::string label, uint64_t total)
    : label_(std::move(label)),
      total_(total),
      enabled_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() {
  if (enabled_) draw(true);
}

void Progress::advance(uint64_t amount) {
  done_ += amount;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(false);
}

void Progress::draw(bool final) {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double pct = total_ ? 100.0 * static_cast<double>(done_) / static_cast<double>(total_) : 100.0;
  std::fprintf(stderr, "\r%s: %5.1f%%  %.1f / %.1f GB  %.1fs%s", label_.c_str(), pct, done_ / 1e9,
               total_ / 1e9, secs, final ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace qwick
