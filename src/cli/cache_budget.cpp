#include "cli/cache_budget.h"

#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace qwick {

CacheBudget cache_budget(int64_t cache_ram_mib, double fraction, int64_t device_free,
                         int64_t host_available) {
  if (cache_ram_mib >= 0) return {cache_ram_mib << 20, "--cache-ram"};
  const bool device = device_free > 0;
  const int64_t free = device ? device_free : host_available;
  return {static_cast<int64_t>(static_cast<double>(free) * fraction),
          fmt::format("{:g}% of {:.1f} GiB free {} memory", fraction * 100,
                      static_cast<double>(free) / (1 << 30), device ? "device" : "host")};
}

int64_t mem_available(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  const size_t at = meminfo.find(kKey);
  if (at == std::string_view::npos || (at > 0 && meminfo[at - 1] != '\n')) return 0;
  std::string_view rest = meminfo.substr(at + kKey.size());
  rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
  int64_t kib = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), kib);
  if (ec != std::errc() || !std::string_view(end, rest.data() + rest.size()).starts_with(" kB")) return 0;
  return kib * 1024;
}

int64_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::ostringstream text;
  text << in.rdbuf();
  return mem_available(text.str());
}

}  // namespace qwick
