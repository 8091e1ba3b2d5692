// The request queue with an engine that runs jobs only when the test lets it: FIFO order, the
// capacity bound, tasks cancelled while waiting, engine failures, and shutdown.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include "core/error.h"
#include "runtime/request_queue.h"

namespace qwick {
namespace {

// Runs a job (its id is prompt[0]) once released, or until the observer cancels it.
class GateEngine : public CompletionEngine {
 public:
  int64_t context_size() const override { return 100; }
  int64_t vocab_size() const override { return 10; }
  CompletionStats run(const CompletionJob& job, CompletionObserver& observer) override {
    std::unique_lock lock(mutex_);
    started_.push_back(job.prompt[0]);
    changed_.notify_all();
    if (job.prompt[0] < 0) fail("job {} fails", job.prompt[0]);
    CompletionStats s;
    s.prompt_tokens = 1;
    while (released_ < static_cast<int>(started_.size())) {
      if (observer.cancelled()) {
        s.finish_reason = "cancelled";
        return s;
      }
      changed_.wait_for(lock, std::chrono::milliseconds(1));
    }
    lock.unlock();
    observer.on_token({7, 0, {}});
    s.generated_tokens = 1;
    s.finish_reason = "stop";
    return s;
  }
  void release() {
    std::lock_guard lock(mutex_);
    ++released_;
    changed_.notify_all();
  }
  void wait_started(size_t n) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return started_.size() >= n; });
  }
  std::vector<int32_t> started() {
    std::lock_guard lock(mutex_);
    return started_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int32_t> started_;
  int released_ = 0;
};

struct Outcome {
  std::string finish_reason, error;
  bool shutting_down = false;
  int tokens = 0;
};

class Task : public CompletionTask {
 public:
  explicit Task(int32_t id) { job.prompt = {id}; }
  bool cancelled() const override { return cancel.load(); }
  void on_prefill(int64_t, int64_t) override {}
  TokenAction on_token(const GeneratedToken&) override {
    ++outcome.tokens;
    return TokenAction::kContinue;
  }
  void on_finished(const CompletionStats& s) override {
    outcome.finish_reason = s.finish_reason;
    done.set_value();
  }
  void on_failed(const std::string& message, bool shutting_down) override {
    outcome.error = message;
    outcome.shutting_down = shutting_down;
    done.set_value();
  }
  Outcome get() {
    future.wait();
    return outcome;
  }
  std::atomic<bool> cancel{false};

 private:
  Outcome outcome;
  std::promise<void> done;
  std::future<void> future = done.get_future();
};

TEST(RequestQueue, RunsInOrderAndRefusesBeyondItsCapacity) {
  GateEngine engine;
  RequestQueue queue(engine, 2);
  auto t1 = std::make_shared<Task>(1), t2 = std::make_shared<Task>(2), t3 = std::make_shared<Task>(3),
       t4 = std::make_shared<Task>(4);
  ASSERT_TRUE(queue.submit(t1));
  engine.wait_started(1);  // running: no longer waiting
  EXPECT_TRUE(queue.busy());
  ASSERT_TRUE(queue.submit(t2));
  ASSERT_TRUE(queue.submit(t3));
  EXPECT_EQ(queue.waiting(), 2u);
  EXPECT_FALSE(queue.submit(t4));
  for (int i = 0; i < 3; ++i) engine.release();
  for (auto* t : {&t1, &t2, &t3}) {
    const Outcome o = (*t)->get();
    EXPECT_EQ(o.finish_reason, "stop");
    EXPECT_EQ(o.tokens, 1);
  }
  EXPECT_EQ(engine.started(), (std::vector<int32_t>{1, 2, 3}));
  // Room again.
  EXPECT_TRUE(queue.submit(t4));
  engine.release();
  EXPECT_EQ(t4->get().finish_reason, "stop");
}

TEST(RequestQueue, ATaskCancelledWhileWaitingDoesNotRun) {
  GateEngine engine;
  RequestQueue queue(engine, 4);
  auto t1 = std::make_shared<Task>(1), t2 = std::make_shared<Task>(2), t3 = std::make_shared<Task>(3);
  queue.submit(t1);
  engine.wait_started(1);
  queue.submit(t2);
  queue.submit(t3);
  t2->cancel = true;
  engine.release();
  engine.release();
  EXPECT_EQ(t1->get().finish_reason, "stop");
  const Outcome o2 = t2->get();
  EXPECT_EQ(o2.finish_reason, "cancelled");
  EXPECT_EQ(o2.tokens, 0);
  EXPECT_EQ(t3->get().finish_reason, "stop");
  EXPECT_EQ(engine.started(), (std::vector<int32_t>{1, 3}));
}

TEST(RequestQueue, AnEngineFailureFailsOnlyThatTask) {
  GateEngine engine;
  RequestQueue queue(engine, 4);
  auto bad = std::make_shared<Task>(-1), good = std::make_shared<Task>(5);
  queue.submit(bad);
  queue.submit(good);
  engine.release();
  engine.release();
  const Outcome o = bad->get();
  EXPECT_EQ(o.error, "job -1 fails");
  EXPECT_FALSE(o.shutting_down);
  EXPECT_EQ(good->get().finish_reason, "stop");
}

TEST(RequestQueue, ShutdownFailsWaitingTasksAndCancelsTheRunningOne) {
  GateEngine engine;
  RequestQueue queue(engine, 4);
  auto running = std::make_shared<Task>(1), waiting = std::make_shared<Task>(2);
  queue.submit(running);
  engine.wait_started(1);
  queue.submit(waiting);
  queue.shutdown();  // the engine is never released: only cancellation ends the running job
  const Outcome r = running->get(), w = waiting->get();
  EXPECT_TRUE(r.shutting_down);
  EXPECT_TRUE(w.shutting_down);
  EXPECT_EQ(w.error, "the server is shutting down");
  EXPECT_EQ(engine.started(), std::vector<int32_t>{1});
  EXPECT_FALSE(queue.submit(std::make_shared<Task>(3)));
}

}  // namespace
}  // namespace qwick
