// Core pieces: the thread pool, the command-line parser and the sampler.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <vector>

#include "cli/args.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "runtime/sampler.h"

namespace qwick {
namespace {

TEST(ThreadPool, RunsEveryTaskOnceAndRethrows) {
  ThreadPool pool(3);
  for (size_t n : {0, 1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](size_t i, int thread) {
      EXPECT_GE(thread, 0);
      EXPECT_LT(thread, 3);
      ++hits[i];
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
  EXPECT_THROW(pool.parallel_for(10,
                                 [](size_t i, int) {
                                   if (i == 5) fail("task {} failed", i);
                                 }),
               Error);
  // Nested calls run inline instead of deadlocking.
  std::atomic<int> total{0};
  pool.parallel_for(4, [&](size_t, int) { pool.parallel_for(3, [&](size_t, int) { ++total; }); });
  EXPECT_EQ(total.load(), 12);
}

TEST(Args, ParsesLlamaStyleOptionsAndEnvironment) {
  std::string model;
  int threads = 0;
  double temp = 0.8;
  bool flag = true;
  std::string pos;
  ArgParser p("test", "test");
  p.option({"-m", "--model"}, "DIR", "model", &model, "QWICK_TEST_MODEL");
  p.option({"-t", "--threads"}, "N", "threads", &threads);
  p.option({"--temp"}, "T", "temperature", &temp);
  p.flag({"--mmap"}, "map", &flag);
  p.positional("X", "x", &pos, false);
  ::setenv("QWICK_TEST_MODEL", "/from/env", 1);
  std::vector<std::string> args = {"cmd", "-t", "4", "--temp=0.5", "--no-mmap", "extra"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ASSERT_TRUE(p.parse(static_cast<int>(argv.size()), argv.data()));
  EXPECT_EQ(model, "/from/env");
  EXPECT_EQ(threads, 4);
  EXPECT_DOUBLE_EQ(temp, 0.5);
  EXPECT_FALSE(flag);
  EXPECT_EQ(pos, "extra");
  std::vector<std::string> cli = {"cmd", "--model", "/from/cli"};
  std::vector<char*> argv2;
  for (auto& a : cli) argv2.push_back(a.data());
  p.parse(static_cast<int>(argv2.size()), argv2.data());
  EXPECT_EQ(model, "/from/cli");  // the command line wins over the environment
  ::unsetenv("QWICK_TEST_MODEL");

  std::vector<std::string> bad = {"cmd", "-t", "four"};
  std::vector<char*> argv3;
  for (auto& a : bad) argv3.push_back(a.data());
  EXPECT_THROW(p.parse(static_cast<int>(argv3.size()), argv3.data()), Error);
}

TEST(Sampler, GreedyPenaltiesAndSeededDraws) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, -1.0f};
  SamplingParams greedy;
  Sampler g(greedy, 4);
  auto l = logits;
  EXPECT_EQ(g.sample(l), 1);

  SamplingParams pen;
  pen.presence_penalty = 1.5f;
  Sampler p(pen, 4);
  p.accept(1);
  l = logits;
  EXPECT_EQ(p.sample(l), 2);  // 3 - 1.5 < 2

  SamplingParams bias;
  bias.logit_bias = {{3, 10.0f}};
  Sampler b(bias, 4);
  l = logits;
  EXPECT_EQ(b.sample(l), 3);

  SamplingParams hot;
  hot.temperature = 1.0f;
  hot.seed = 42;
  std::map<int, int> counts;
  Sampler s1(hot, 4), s2(hot, 4);
  for (int i = 0; i < 2000; ++i) {
    auto a = logits, c = logits;
    const int x = s1.sample(a);
    EXPECT_EQ(x, s2.sample(c));  // same seed, same draws
    ++counts[x];
  }
  // Frequencies follow softmax(logits) = {0.087, 0.644, 0.237, 0.032}.
  EXPECT_NEAR(counts[1] / 2000.0, 0.644, 0.04);
  EXPECT_NEAR(counts[2] / 2000.0, 0.237, 0.04);

  SamplingParams cut = hot;
  cut.top_k = 1;
  Sampler k1(cut, 4);
  for (int i = 0; i < 20; ++i) {
    auto a = logits;
    EXPECT_EQ(k1.sample(a), 1);
  }
  SamplingParams minp = hot;
  minp.min_p = 0.3f;  // keeps tokens with p >= 0.3 * p_max: ids 1 and 2
  Sampler m(minp, 4);
  for (int i = 0; i < 200; ++i) {
    auto a = logits;
    const int x = m.sample(a);
    EXPECT_TRUE(x == 1 || x == 2) << x;
  }
  SamplingParams badbias;
  badbias.logit_bias = {{9, 1.0f}};
  EXPECT_THROW(Sampler(badbias, 4), Error);
}

}  // namespace
}  // namespace qwick
