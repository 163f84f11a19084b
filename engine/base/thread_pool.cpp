// engine/base/thread_pool.cpp: a spin-then-sleep pool tuned for many short loops per step.
#include "engine/base/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "engine/base/check.h"

namespace eng {

namespace {
thread_local bool t_in_region = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
constexpr int kSpinIterations = 1 << 14;  // ~tens of microseconds before sleeping
}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

bool ThreadPool::in_parallel_region() { return t_in_region; }

void ThreadPool::drain() {
  const auto& task = *task_;
  for (;;) {
    int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= num_tasks_) break;
    task(i);
  }
}

void ThreadPool::worker_loop() {
  t_in_region = true;
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    int spins = 0;
    while (gen == seen) {
      if (++spins < kSpinIterations) {
        cpu_relax();
      } else {
        std::unique_lock<std::mutex> lock(mu_);
        sleepers_.fetch_add(1);
        cv_.wait(lock, [&] { return generation_.load() != seen; });
        sleepers_.fetch_sub(1);
        spins = 0;
      }
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    drain();
    acked_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int64_t num_tasks, FunctionRef<void(int64_t)> task) {
  if (num_tasks <= 0) return;
  if (num_tasks == 1 || workers_.empty() || t_in_region) {
    for (int64_t i = 0; i < num_tasks; ++i) task(i);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  task_ = &task;
  num_tasks_ = num_tasks;
  next_.store(0, std::memory_order_relaxed);
  acked_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load() > 0) cv_.notify_all();
  t_in_region = true;
  drain();
  t_in_region = false;
  // Every worker acks the job, so none can still read task_ once this returns.
  const int workers = static_cast<int>(workers_.size());
  while (acked_.load(std::memory_order_acquire) < workers) cpu_relax();
  task_ = nullptr;
}

ThreadPool& default_pool() {
  static ThreadPool* pool = [] {
    int n = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("SHARDLAB_NUM_THREADS")) {
      int v = std::atoi(env);
      if (v > 0) n = v;
    }
    return new ThreadPool(std::max(1, n));  // leaked on purpose: workers outlive statics
  }();
  return *pool;
}

void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  ThreadPool& pool = default_pool();
  grain = std::max<int64_t>(1, grain);
  int64_t max_chunks = (n + grain - 1) / grain;
  int64_t chunks = std::min<int64_t>(max_chunks, pool.num_threads() * 4);
  if (chunks <= 1 || ThreadPool::in_parallel_region()) {
    fn(0, n);
    return;
  }
  int64_t per = (n + chunks - 1) / chunks;
  pool.run(chunks, [&](int64_t c) {
    int64_t lo = c * per, hi = std::min(n, lo + per);
    if (lo < hi) fn(lo, hi);
  });
}

}  // namespace eng
