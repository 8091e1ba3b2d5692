// A persistent pool of worker threads for the compute kernels.
//
// Workers are created once and wait between jobs: they spin briefly (a decode step issues
// thousands of short parallel regions, and waking a sleeping thread costs tens of microseconds),
// then sleep on a futex so an idle engine burns no CPU. The calling thread takes part in every job.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qwick {

class ThreadPool {
 public:
  // `n_threads` counts the caller; 1 runs everything inline. 0 picks the number of cores.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  using Task = std::function<void(size_t task, int thread)>;
  // Runs task(i, thread) for every i in [0, n_tasks), handing tasks out dynamically, and returns
  // when all have finished. `thread` is in [0, size()): an index for per-thread scratch space.
  // The first exception a task throws is rethrown here. A call from inside a task runs inline.
  void parallel_for(size_t n_tasks, const Task& task);

  static int default_threads();

 private:
  void worker_main(int index);
  void run_tasks(int thread);

  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> finished_{0};
  std::atomic<size_t> next_task_{0};
  std::atomic<bool> stop_{false};
  const Task* task_ = nullptr;
  size_t n_tasks_ = 0;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace qwick
