// The CPU as a device for `qwick bench`: its name from /proc/cpuinfo and a measured copy bandwidth.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/aligned_buffer.h"

namespace qwick {

DeviceInfo probe_cpu() {
  DeviceInfo info;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0) {
      info.name = line.substr(line.find(':') + 2);
      break;
    }
  if (info.name.empty()) info.name = "CPU";
  // One thread copying 256 MiB (several times the caches); best of 5, bytes read + written.
  constexpr size_t kBytes = size_t{256} << 20;
  AlignedBuffer<uint8_t> src(kBytes), dst(kBytes);
  std::memset(src.data(), 1, kBytes);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), kBytes);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  info.copy_gbps = 2.0 * static_cast<double>(kBytes) / best / 1e9;
  return info;
}

}  // namespace qwick
