// Progress of long work (writing or loading a model) on a terminal; silent when stderr is not one.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace qwick {

class Progress {
 public:
  Progress(std::string label, uint64_t total);
  ~Progress();  // finishes the line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(uint64_t amount);  // thread-compatible, not thread-safe: call from one thread

 private:
  void draw(bool final);
  std::string label_;
  uint64_t total_, done_ = 0;
  bool enabled_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace qwick
