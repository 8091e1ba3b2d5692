// One engine worker and a bounded FIFO of tasks waiting for it.
//
// The engine runs one sequence, so requests are served one at a time in arrival order. submit()
// refuses a task when `capacity` tasks are already waiting (the caller answers 503), never blocks.
// Cancellation is the task's business (CompletionObserver::cancelled, polled between prefill
// chunks and decode steps); a task cancelled while waiting is finished without running.
// shutdown() fails the waiting tasks, cancels the running one and joins the worker.
//
// Tested in tests/server/request_queue_test.cpp with an engine that records what it runs.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/completion.h"

namespace qwick {

class CompletionTask : public CompletionObserver {
 public:
  CompletionJob job;
  // On the worker thread: the task leaves the queue and starts.
  virtual void on_start() {}
  // The job ran to its end (finish_reason says how; "cancelled" also for a task cancelled while
  // it waited, with no tokens).
  virtual void on_finished(const CompletionStats& stats) = 0;
  // It did not run or failed: the engine threw, or the queue shut down.
  virtual void on_failed(const std::string& message, bool shutting_down) = 0;
};

class RequestQueue {
 public:
  RequestQueue(CompletionEngine& engine, size_t capacity);
  ~RequestQueue();
  RequestQueue(const RequestQueue&) = delete;
  RequestQueue& operator=(const RequestQueue&) = delete;

  // False when the queue is full or shut down.
  bool submit(std::shared_ptr<CompletionTask> task);
  void shutdown();

  size_t waiting() const;
  bool busy() const { return busy_.load(); }
  size_t capacity() const { return capacity_; }

 private:
  // Forwards to the running task, cancelling it once the queue shuts down.
  class Guard;
  void work();

  CompletionEngine& engine_;
  size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<CompletionTask>> waiting_;
  std::atomic<bool> stopping_{false}, busy_{false};
  std::thread worker_;
};

}  // namespace qwick
