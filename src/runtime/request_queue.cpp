#include "runtime/request_queue.h"

#include <exception>

namespace qwick {

class RequestQueue::Guard : public CompletionObserver {
 public:
  Guard(CompletionTask& task, const std::atomic<bool>& stopping) : task_(task), stopping_(stopping) {}
  bool cancelled() const override { return stopping_.load() || task_.cancelled(); }
  void on_prefill(int64_t done, int64_t total) override { task_.on_prefill(done, total); }
  TokenAction on_token(const GeneratedToken& token) override {
    return stopping_.load() ? TokenAction::kCancel : task_.on_token(token);
  }

 private:
  CompletionTask& task_;
  const std::atomic<bool>& stopping_;
};

RequestQueue::RequestQueue(CompletionEngine& engine, size_t capacity)
    : engine_(engine), capacity_(capacity), worker_([this] { work(); }) {}

RequestQueue::~RequestQueue() {
  shutdown();
}

bool RequestQueue::submit(std::shared_ptr<CompletionTask> task) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_.load() || waiting_.size() >= capacity_) return false;
    waiting_.push_back(std::move(task));
  }
  wake_.notify_one();
  return true;
}

size_t RequestQueue::waiting() const {
  std::lock_guard lock(mutex_);
  return waiting_.size();
}

void RequestQueue::shutdown() {
  std::deque<std::shared_ptr<CompletionTask>> dropped;
  {
    std::lock_guard lock(mutex_);
    stopping_.store(true);
    dropped.swap(waiting_);
  }
  wake_.notify_all();
  for (const auto& task : dropped) task->on_failed("the server is shutting down", true);
  if (worker_.joinable()) worker_.join();
}

void RequestQueue::work() {
  while (true) {
    std::shared_ptr<CompletionTask> task;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_.load() || !waiting_.empty(); });
      if (stopping_.load()) return;
      task = std::move(waiting_.front());
      waiting_.pop_front();
      busy_.store(true);
    }
    task->on_start();
    if (task->cancelled()) {
      CompletionStats stats;
      stats.prompt_tokens = static_cast<int64_t>(task->job.prompt.size());
      stats.finish_reason = "cancelled";
      task->on_finished(stats);
    } else {
      Guard guard(*task, stopping_);
      try {
        const CompletionStats stats = engine_.run(task->job, guard);
        if (stopping_.load() && stats.finish_reason == "cancelled")
          task->on_failed("the server is shutting down", true);
        else
          task->on_finished(stats);
      } catch (const std::exception& e) {
        task->on_failed(e.what(), false);
      }
    }
    busy_.store(false);
  }
}

}  // namespace qwick
