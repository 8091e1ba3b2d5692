// qwick bench --parallel: aggregate decode throughput of several sequences stepped together.
//
// For each count N, N sequences of their own each prefill a distinct synthetic prompt of `context`
// tokens, then decode greedily together: every step is one Backend::step with one row per sequence.
// The counts take turns at timed runs of `tokens` steps (`reps` rounds, median per count), so that
// a change in the machine's load falls on all of them alike. The table gives the time a step, the
// aggregate tokens/s (N tokens a step), each sequence's tokens/s and the aggregate against the
// first count.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/backend.h"

namespace qwick {

struct ParallelBench {
  std::vector<int> counts;  // sequences stepped together, one table row each
  int64_t context = 256;    // prompt tokens of each sequence
  int64_t tokens = 32;      // steps a timed run
  int64_t reps = 3;         // timed runs (median)
  int64_t chunk = 512;      // prefill chunk
};

// Sequences the bench uses: the counts added up. The backend must hold them
// (BackendOptions::sequences) with a KV pool for all; returns the measurements as JSON.
int parallel_bench_sequences(const ParallelBench& spec);
nlohmann::json bench_parallel(Backend& backend, int64_t vocab_size, const ParallelBench& spec);

}  // namespace qwick
