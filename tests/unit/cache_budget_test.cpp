// The prompt-cache budget of `qwick serve`: --cache-ram wins, else a fraction of the device's free
// memory on a GPU or of the host's MemAvailable on the CPU; MemAvailable read from /proc/meminfo
// text.
#include <gtest/gtest.h>

#include "cli/cache_budget.h"

namespace qwick {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(CacheBudget, AnExplicitSizeWins) {
  const CacheBudget b = cache_budget(512, 0.25, 40 * kGiB, 20 * kGiB);
  EXPECT_EQ(b.bytes, int64_t{512} << 20);
  EXPECT_EQ(b.origin, "--cache-ram");
  EXPECT_EQ(cache_budget(0, 0.25, 40 * kGiB, 20 * kGiB).bytes, 0);
}

TEST(CacheBudget, AFractionOfTheDevicesFreeMemoryOnAGpu) {
  const CacheBudget b = cache_budget(-1, 0.25, 40 * kGiB, 20 * kGiB);
  EXPECT_EQ(b.bytes, 10 * kGiB);
  EXPECT_EQ(b.origin, "25% of 40.0 GiB free device memory");
}

TEST(CacheBudget, AFractionOfTheHostsAvailableMemoryOnTheCpu) {
  const CacheBudget b = cache_budget(-1, 0.5, 0, 6 * kGiB);
  EXPECT_EQ(b.bytes, 3 * kGiB);
  EXPECT_EQ(b.origin, "50% of 6.0 GiB free host memory");
  EXPECT_EQ(cache_budget(-1, 0.5, 0, 0).bytes, 0);  // unknown: no cache rather than a guess
}

TEST(CacheBudget, MemAvailableIsReadFromMeminfo) {
  EXPECT_EQ(mem_available("MemTotal:       24000000 kB\nMemFree:         1000000 kB\n"
                          "MemAvailable:   12582912 kB\nBuffers:          100 kB\n"),
            int64_t{12582912} * 1024);
  EXPECT_EQ(mem_available("MemTotal:       24000000 kB\n"), 0);
  EXPECT_EQ(mem_available("MemAvailable:   lots\n"), 0);
  EXPECT_EQ(mem_available("XMemAvailable:   100 kB\n"), 0);
  EXPECT_GT(host_available_bytes(), 0);  // Linux, where the tests run
}

}  // namespace
}  // namespace qwick
