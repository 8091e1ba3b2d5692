#include "core/thread_pool.h"

#include <immintrin.h>

#include "core/error.h"

namespace qwick {
namespace {

thread_local bool t_inside_pool = false;

// About 50 µs of spinning (a pause is ~20 ns on current x86) before a waiter sleeps on the futex: long
// enough to bridge the gaps between a decode step's parallel regions, short enough not to steal a
// busy machine's cores from the threads doing the work.
constexpr int kSpinIterations = 2000;

template <typename T, typename Pred>
void spin_then_wait(const std::atomic<T>& value, Pred done) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (done(value.load(std::memory_order_acquire))) return;
    _mm_pause();
  }
  for (T v = value.load(std::memory_order_acquire); !done(v); v = value.load(std::memory_order_acquire))
    value.wait(v, std::memory_order_acquire);
}

}  // namespace

int ThreadPool::default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = default_threads();
  if (n_threads > 1024) fail("thread count {} is out of range (1..1024)", n_threads);
  workers_.reserve(static_cast<size_t>(n_threads - 1));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_tasks(int thread) {
  for (;;) {
    const size_t i = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_tasks_) return;
    try {
      (*task_)(i, thread);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_main(int index) {
  t_inside_pool = true;
  uint64_t seen = 0;
  for (;;) {
    spin_then_wait(generation_, [seen](uint64_t g) { return g != seen; });
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    run_tasks(index);
    if (finished_.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<int>(workers_.size()))
      finished_.notify_one();
  }
}

void ThreadPool::parallel_for(size_t n_tasks, const Task& task) {
  if (n_tasks == 0) return;
  if (workers_.empty() || n_tasks == 1 || t_inside_pool) {
    for (size_t i = 0; i < n_tasks; ++i) task(i, 0);
    return;
  }
  task_ = &task;
  n_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  finished_.store(0, std::memory_order_relaxed);
  error_ = nullptr;
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();

  t_inside_pool = true;
  run_tasks(0);
  t_inside_pool = false;
  const int n_workers = static_cast<int>(workers_.size());
  spin_then_wait(finished_, [n_workers](int f) { return f == n_workers; });
  task_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace qwick
