// What the GPU benches share: the time of work as the decode step runs it, captured in a CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/cuda/cuda_launch.h"

namespace qwick::cuda {

// Median over `reps` launches of a graph holding what `enqueue` puts on its stream, divided by `calls`
// (the calls it enqueues): neither the host's launch rate nor a launch's own latency is timed. A
// warm-up launch (which uploads the graph) comes first.
inline double graph_us_per_call(int reps, int calls, const std::function<void(cudaStream_t)>& enqueue) {
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cudaGraph_t graph;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  enqueue(stream);
  check(cudaStreamEndCapture(stream, &graph), "capture");
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  cudaEvent_t t0, t1;
  check(cudaEventCreate(&t0), "event");
  check(cudaEventCreate(&t1), "event");
  check(cudaGraphLaunch(exec, stream), "launch");
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    check(cudaEventRecord(t0, stream), "event");
    check(cudaGraphLaunch(exec, stream), "launch");
    check(cudaEventRecord(t1, stream), "event");
    check(cudaEventSynchronize(t1), "event");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, t0, t1), "event");
    us.push_back(1e3 * ms / calls);
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  std::nth_element(us.begin(), us.begin() + static_cast<int64_t>(us.size() / 2), us.end());
  return us[us.size() / 2];
}

}  // namespace qwick::cuda
