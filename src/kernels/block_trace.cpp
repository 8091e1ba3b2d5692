#include "kernels/block_trace.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cuda_launch.h"

namespace qwick::cuda {
namespace {

std::vector<BlockTraceSetter>& setters() {
  static std::vector<BlockTraceSetter> units;
  return units;
}

}  // namespace

bool register_block_trace_unit(BlockTraceSetter set) {
  setters().push_back(set);
  return true;
}

namespace block_trace {
namespace {

struct Launch {
  std::string name;
  unsigned blocks, threads;
};

struct State {
  std::vector<Launch> launches;
  bool recording = false;
  BlockTraceBuffer buffer;
};
State& state() {
  static State s;
  return s;
}

const char* output_path() {
  static const char* path = std::getenv("QWICK_BLOCK_TRACE");
  return path && *path ? path : nullptr;
}

// Blocks of a launch all start before any block of the next (a programmatic launch begins only once
// every block of the one before has started), so in start order each block belongs to the first launch
// of its shape that is not yet full. Returns each record's launch (-1: none matched).
std::vector<int> assign(const std::vector<BlockTraceRecord>& records, const std::vector<Launch>& launches) {
  std::vector<size_t> order(records.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return records[a].start < records[b].start; });
  std::vector<unsigned> left(launches.size());
  for (size_t j = 0; j < launches.size(); ++j) left[j] = launches[j].blocks;
  std::vector<int> launch_of(records.size(), -1);
  size_t open = 0;
  for (size_t i : order) {
    while (open < launches.size() && left[open] == 0) ++open;
    for (size_t j = open; j < launches.size(); ++j) {
      if (left[j] == 0 || launches[j].blocks != records[i].grid || launches[j].threads != records[i].threads)
        continue;
      launch_of[i] = static_cast<int>(j);
      --left[j];
      break;
    }
  }
  return launch_of;
}

}  // namespace

#ifdef QWICK_BLOCK_TRACE
bool enabled() {
  return output_path() != nullptr;
}
#else
bool enabled() {
  return false;
}
#endif

void record_launches(bool on) {
  if (!enabled()) return;
  State& s = state();
  if (on) s.launches.clear();
  s.recording = on;
}

void note_launch(const char* name, dim3 grid, dim3 block) {
  State& s = state();
  if (s.recording) s.launches.push_back(Launch{name, grid.x * grid.y * grid.z, block.x * block.y * block.z});
}

void arm(cudaStream_t stream) {
  if (!enabled()) return;
  BlockTraceBuffer& b = state().buffer;
  if (!b.records) {
    constexpr unsigned kCapacity = 1u << 18;  // a decode step has ~40K blocks
    check(cudaMalloc(&b.records, sizeof(BlockTraceRecord) * kCapacity), "block trace: buffer");
    check(cudaMalloc(&b.count, sizeof(unsigned)), "block trace: count");
    b.capacity = kCapacity;
    for (BlockTraceSetter set : setters()) check(set(b), "block trace: set buffer");
  }
  check(cudaMemsetAsync(b.count, 0, sizeof(unsigned), stream), "block trace: reset");
}

void collect() {
  if (!enabled()) return;
  const State& s = state();
  const BlockTraceBuffer& b = s.buffer;
  if (!b.records) return;
  unsigned count = 0;
  check(cudaMemcpy(&count, b.count, sizeof count, cudaMemcpyDeviceToHost), "block trace: count");
  count = std::min(count, b.capacity);
  std::vector<BlockTraceRecord> records(count);
  check(cudaMemcpy(records.data(), b.records, sizeof(BlockTraceRecord) * count, cudaMemcpyDeviceToHost),
        "block trace: records");
  const std::vector<int> launch_of = assign(records, s.launches);
  uint64_t t0 = ~0ull;
  for (const BlockTraceRecord& r : records) t0 = std::min(t0, r.start);
  FILE* f = std::fopen(output_path(), "w");
  if (!f) fail("block trace: cannot write {}", output_path());
  std::fprintf(f,
               "launch\tname\tgrid\tthreads\tblock\tsm\tstart_ns\twaited_ns\tmark0_ns\tmark1_ns\tmark2_ns\tmark3_ns\t"
               "end_ns\n");
  auto at = [&](uint64_t t) { return t == ~0ull || t == 0 ? -1LL : static_cast<long long>(t - t0); };
  for (size_t i = 0; i < records.size(); ++i) {
    const BlockTraceRecord& r = records[i];
    const int j = launch_of[i];
    std::fprintf(f, "%d\t%s\t%u\t%u\t%u\t%u\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\n", j,
                 j >= 0 ? s.launches[static_cast<size_t>(j)].name.c_str() : "?", r.grid, r.threads, r.block,
                 r.sm, at(r.start), at(r.waited), at(r.mark[0]), at(r.mark[1]), at(r.mark[2]), at(r.mark[3]),
                 at(r.end));
  }
  std::fclose(f);
}

}  // namespace block_trace
}  // namespace qwick::cuda
