// The prompt cache's memory budget for `qwick serve`: --cache-ram MiB when given, else a fraction
// (--cache-ram-fraction) of the memory free once the model is loaded. Saved states live where the
// backend keeps its sequence: in device memory on a GPU (its free memory, from Backend::memory),
// in host memory on the CPU (MemAvailable of /proc/meminfo, which counts reclaimable page cache,
// a mapped checkpoint's pages included, as available).
//
// Tested in tests/unit/cache_budget_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace qwick {

struct CacheBudget {
  int64_t bytes = 0;
  std::string origin;  // for the log: "--cache-ram", "25% of 12.0 GiB free device memory", ...
};

// `cache_ram_mib` < 0: `fraction` of `device_free` when positive (a GPU backend), else of
// `host_available`; a budget that cannot be measured (both 0) is 0, no cache.
CacheBudget cache_budget(int64_t cache_ram_mib, double fraction, int64_t device_free, int64_t host_available);

// MemAvailable of a /proc/meminfo text in bytes; 0 when it has none.
int64_t mem_available(std::string_view meminfo);
// This machine's MemAvailable; 0 where /proc/meminfo cannot be read.
int64_t host_available_bytes();

}  // namespace qwick
