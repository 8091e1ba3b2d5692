// A timeline of the kernels inside one CUDA graph launch, for any program, with no change to it: a CUPTI
// injection library (the driver loads it when CUDA_INJECTION64_PATH names it). It records every kernel's
// start and end on the GPU; at exit it takes the graph launches holding the most kernels (for qwick, the
// decode step; or with QWICK_TRACE_BURSTS, bursts of kernels outside graphs: a prefill), picks the
// median one by length, and writes a line per kernel to QWICK_TRACE_OUT
// (default kernel_trace.tsv):
//   index  name  registers  blocks  threads  smem  start_us  end_us  gap_us  own_us
// start and end count from the launch's first kernel start; gap_us is this start minus the latest end
// before it (negative: they overlapped, as programmatic dependent launch allows); own_us is this end
// minus that latest end, the time the launch grew by while this kernel finished last (the own times add
// up to the launch's length). A summary of own time by kernel goes to stderr.
//   export CUDA_INJECTION64_PATH=build/tools/kernel_trace/libqwick_kernel_trace.so
//   QWICK_TRACE_OUT=trace.tsv qwick bench ...
// Concurrent-kernel records do not serialize kernels, but they may add a little time to each: compare a
// traced step's length with an untraced run before reading small differences.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Kernel {
  std::string name;
  uint64_t start, end;
  uint32_t correlation, graph;
  int registers, blocks, threads, smem;
};

std::mutex mutex;
std::vector<Kernel> kernels;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = kBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    kernels.push_back(Kernel{k->name ? k->name : "?", k->start, k->end, k->correlationId, k->graphId,
                             k->registersPerThread, k->gridX * k->gridY * k->gridZ,
                             k->blockX * k->blockY * k->blockZ,
                             k->staticSharedMemory + k->dynamicSharedMemory});
  }
  std::free(buffer);
}

// A kernel's name as the code spells it: demangled, its namespaces and parameter list dropped, template
// arguments kept (they tell instances apart), e.g. "gemv_kernel<(qwick::WeightFormat)3, ...>".
std::string short_name(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  int depth = 0;  // the parameter list: the first "(" outside template brackets, not a namespace's
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0 && s.compare(i, 11, "(anonymous ") != 0) {
      s.resize(i);
      break;
    }
  }
  if (s.compare(0, 5, "void ") == 0) s.erase(0, 5);
  for (const std::string ns : {"(anonymous namespace)::", "qwick::cuda::"})
    for (size_t at; (at = s.find(ns)) != std::string::npos;) s.erase(at, ns.size());
  return s;
}

void report() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(mutex);
  // Launches of graphs: kernels of one cudaGraphLaunch share its correlation id. With
  // QWICK_TRACE_BURSTS=US, the kernels outside graphs instead (prefill): a launch is then a burst of
  // them with no idle time of US microseconds or more inside.
  std::map<uint32_t, std::vector<Kernel>> launches;
  if (const char* bursts = std::getenv("QWICK_TRACE_BURSTS")) {
    const uint64_t idle_ns = static_cast<uint64_t>(std::atof(bursts) * 1e3);
    std::vector<Kernel> plain;
    for (const Kernel& k : kernels)
      if (k.graph == 0) plain.push_back(k);
    std::sort(plain.begin(), plain.end(), [](const Kernel& a, const Kernel& b) { return a.start < b.start; });
    uint32_t burst = 0;
    uint64_t busy_until = 0;
    for (const Kernel& k : plain) {
      if (busy_until != 0 && k.start >= busy_until + idle_ns) ++burst;
      busy_until = std::max(busy_until, k.end);
      launches[burst].push_back(k);
    }
  } else {
    for (const Kernel& k : kernels)
      if (k.graph != 0) launches[k.correlation].push_back(k);
  }
  size_t most = 0;
  for (const auto& [id, ks] : launches) most = std::max(most, ks.size());
  if (most == 0) {
    std::fprintf(stderr, "kernel_trace: no launches recorded (%zu kernels)\n", kernels.size());
    return;
  }
  // The launches of that size, each with its length; the median by length stands for them.
  std::vector<std::pair<uint64_t, std::vector<Kernel>>> runs;
  for (auto& [id, ks] : launches) {
    if (ks.size() != most) continue;
    std::sort(ks.begin(), ks.end(), [](const Kernel& a, const Kernel& b) { return a.start < b.start; });
    uint64_t end = 0;
    for (const Kernel& k : ks) end = std::max(end, k.end);
    runs.emplace_back(end - ks.front().start, std::move(ks));
  }
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const auto& [run_length, run] = runs[runs.size() / 2];
  const char* env_path = std::getenv("QWICK_TRACE_OUT");
  const char* path = env_path ? env_path : "kernel_trace.tsv";
  FILE* out = std::fopen(path, "w");
  if (!out) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path);
    return;
  }
  std::fprintf(out, "index\tname\tregisters\tblocks\tthreads\tsmem\tstart_us\tend_us\tgap_us\town_us\n");
  const double t0 = static_cast<double>(run.front().start);
  double last_end = t0, idle = 0;
  std::map<std::string, std::pair<int, double>> own_by_name;
  for (size_t i = 0; i < run.size(); ++i) {
    const Kernel& k = run[i];
    const double start = static_cast<double>(k.start), end = static_cast<double>(k.end);
    const double own = std::max(0.0, end - last_end);
    const std::string name = short_name(k.name.c_str());
    std::fprintf(out, "%zu\t%s\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\n", i, name.c_str(), k.registers,
                 k.blocks, k.threads, k.smem, (start - t0) / 1e3, (end - t0) / 1e3, (start - last_end) / 1e3,
                 own / 1e3);
    auto& [count, total] = own_by_name[name];
    ++count, total += own / 1e3;
    idle += std::max(0.0, start - last_end);
    last_end = std::max(last_end, end);
  }
  std::fclose(out);
  std::fprintf(stderr,
               "kernel_trace: %zu launches of %zu kernels; median %.1f us, of it %.1f us with no kernel "
               "running; own time by kernel:\n",
               runs.size(), most, static_cast<double>(run_length) / 1e3, idle / 1e3);
  std::vector<std::pair<std::string, std::pair<int, double>>> rows(own_by_name.begin(), own_by_name.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  for (const auto& [name, v] : rows)
    std::fprintf(stderr, "  %9.1f us %4d x  %s\n", v.second, v.first, name.substr(0, 110).c_str());
}

}  // namespace

extern "C" int InitializeInjection() {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: CUPTI activity tracing unavailable\n");
    return 0;
  }
  std::atexit(report);
  return 1;
}
