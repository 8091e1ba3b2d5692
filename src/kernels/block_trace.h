// A timeline of every block of every kernel in one decode step, for builds configured with
// -DQWICK_BLOCK_TRACE=ON: a diagnostic that says, per block, when it started, when its first warp got
// past griddepcontrol.wait and when its last warp left (and two points of the kernel's choice), so a kernel's
// residency (how early its blocks became resident beside the kernel before), its wait and its slowest block
// can be told apart. (The CUPTI trace of tools/kernel_trace has only each kernel's first start and last end.)
//
// Each decode kernel opens with QWICK_TRACE_BLOCK() (block_trace.cuh); the hooks cost a barrier and
// a few atomics a block, so a traced step runs a little slower than an untraced one. With
// QWICK_BLOCK_TRACE=FILE in the environment, the CUDA backend records the launches of the decode step
// as it enqueues (or captures) them, arms the device buffer before each step and, once the step has
// completed, writes FILE: a line per block, assigned to its launch. Every step overwrites it, so the
// file holds the last one. tools/block_trace_summary.py reads it.
//
// In other builds enabled() is false and the rest does nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace qwick::cuda {

// One block, times from %globaltimer (ns).
struct BlockTraceRecord {
  uint64_t start;    // the block's first instruction
  uint64_t waited;   // the first of its warps past griddepcontrol.wait; ~0 when none waited
  // A kernel's own phases: marks 0 and 1 the first of its warps at block_trace_mark<i>() (~0: none),
  // marks 2 and 3 the last (0: none).
  uint64_t mark[4];
  uint64_t end;      // the last of its warps to leave
  uint32_t block;    // linear index in its grid
  uint32_t grid;     // blocks in the launch
  uint32_t threads;
  uint32_t sm;
};

// Where the blocks write: a device array and its fill count.
struct BlockTraceBuffer {
  BlockTraceRecord* records = nullptr;
  unsigned* count = nullptr;
  unsigned capacity = 0;
};

// Every CUDA translation unit holds its own copy of the device-side BlockTraceBuffer (no separable
// compilation); each registers a function that sets it, run when the buffer is made.
using BlockTraceSetter = cudaError_t (*)(const BlockTraceBuffer&);
bool register_block_trace_unit(BlockTraceSetter set);

namespace block_trace {

// Built with the hooks, and QWICK_BLOCK_TRACE names the output file.
bool enabled();
// While recording: launch_kernel notes each launch of the step, in order.
void record_launches(bool on);
void note_launch(const char* name, dim3 grid, dim3 block);
// Records the launches of its scope (the decode step's enqueue, captured or not).
struct RecordedLaunches {
  RecordedLaunches() { record_launches(true); }
  ~RecordedLaunches() { record_launches(false); }
  RecordedLaunches(const RecordedLaunches&) = delete;
  RecordedLaunches& operator=(const RecordedLaunches&) = delete;
};
// Before a step's kernels are launched on `stream`: the buffer emptied (made on first use).
void arm(cudaStream_t stream);
// After the step has completed: its blocks, assigned to the recorded launches, written to the file.
void collect();

}  // namespace block_trace
}  // namespace qwick::cuda
