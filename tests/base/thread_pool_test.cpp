// tests/base/thread_pool_test.cpp: every task runs exactly once, nesting runs inline, and
// many short jobs back to back neither hang nor lose work.
#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/base/thread_pool.h"

namespace eng {
namespace {

TEST(ThreadPool, RunsEveryTaskExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 100, 10007}) {
      std::vector<std::atomic<int>> hits(n);
      pool.run(n, [&](int64_t i) { hits[i].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " i=" << i;
    }
  }
}

TEST(ThreadPool, ParallelForCoversTheRangeOnce) {
  for (int64_t n : {1, 5, 64, 1000, 100003})
    for (int64_t grain : {1, 16, 1000, 1 << 20}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> calls{0};
      parallel_for(n, grain, [&](int64_t lo, int64_t hi) {
        ASSERT_LT(lo, hi);
        calls.fetch_add(1);
        for (int64_t i = lo; i < hi; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << grain;
      if (grain >= n) {
        EXPECT_EQ(calls.load(), 1) << "a range below the grain runs as one call";
      }
    }
  parallel_for(0, 1, [&](int64_t, int64_t) { FAIL() << "empty range must not call"; });
}

TEST(ThreadPool, NestedParallelForRunsInline) {
  EXPECT_FALSE(ThreadPool::in_parallel_region());
  std::atomic<int> inner_calls{0}, inner_elems{0};
  parallel_for(8, 1, [&](int64_t lo, int64_t hi) {
    EXPECT_TRUE(ThreadPool::in_parallel_region());
    for (int64_t i = lo; i < hi; ++i) {
      const auto me = std::this_thread::get_id();
      parallel_for(1000, 1, [&](int64_t a, int64_t b) {
        EXPECT_EQ(std::this_thread::get_id(), me);  // no hand-off to another thread
        EXPECT_EQ(a, 0);
        EXPECT_EQ(b, 1000);  // one call over the whole range
        inner_calls.fetch_add(1);
        inner_elems.fetch_add(static_cast<int>(b - a));
      });
    }
  });
  EXPECT_EQ(inner_calls.load(), 8);
  EXPECT_EQ(inner_elems.load(), 8000);
  EXPECT_FALSE(ThreadPool::in_parallel_region());
}

TEST(ThreadPool, ManyShortJobsBackToBack) {
  ThreadPool& pool = default_pool();
  std::atomic<int64_t> total{0};
  constexpr int kJobs = 2000;
  for (int j = 0; j < kJobs; ++j) pool.run(pool.num_threads() + 1, [&](int64_t i) { total.fetch_add(i + 1); });
  const int64_t m = pool.num_threads() + 1;
  EXPECT_EQ(total.load(), kJobs * m * (m + 1) / 2);
}

TEST(ThreadPool, ConcurrentCallersAreSerialised) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  auto caller = [&] {
    for (int j = 0; j < 100; ++j) pool.run(5, [&](int64_t i) { total.fetch_add(i); });
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2 * 100 * 10);
}

TEST(ThreadPool, IdleWorkersSleepAndWakeUp) {
  ThreadPool pool(2);
  std::atomic<int> n{0};
  pool.run(4, [&](int64_t) { n.fetch_add(1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the spin: workers sleep
  pool.run(4, [&](int64_t) { n.fetch_add(1); });
  EXPECT_EQ(n.load(), 8);
}

// Issue 16 item 12: a worker that joins the empty generation run_on_every_thread leaves
// behind, in a pool that never ran a task (task_ still null), must not touch the task
// (UBSan reported a reference bound to null in drain()).
TEST(ThreadPool, EveryThreadJobBeforeAnyTaskJob) {
  for (int round = 0; round < 50; ++round) {
    ThreadPool pool(3);
    std::atomic<int> ran{0};
    for (int j = 0; j < 20; ++j) pool.run_on_every_thread([&] { ran.fetch_add(1); });
    EXPECT_EQ(ran.load(), 20 * 3);
    std::atomic<int64_t> total{0};
    pool.run(4, [&](int64_t i) { total.fetch_add(i); });
    EXPECT_EQ(total.load(), 6);
  }
}

}  // namespace
}  // namespace eng
