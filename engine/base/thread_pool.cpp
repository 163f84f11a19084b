// engine/base/thread_pool.cpp: a spin-then-sleep pool tuned for many short loops per step.
#include "engine/base/thread_pool.h"

#include <pthread.h>
#include <signal.h>

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
    generation_.fetch_add(2);  // keeps the parity: workers see a change and stop
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

bool ThreadPool::in_parallel_region() { return t_in_region; }

void ThreadPool::drain() {
  // task_ is read only for a claimed index: a worker joining the empty generation that
  // run_on_every_thread leaves behind finds num_tasks_ == 0 and a task_ that may be null.
  for (;;) {
    int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= num_tasks_) break;
    (*task_)(i);
    done_.fetch_add(1, std::memory_order_release);
  }
}

void block_interrupt_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);  // Ctrl-C under mpirun (shell/interrupt.h)
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void ThreadPool::worker_loop() {
  block_interrupt_signals();
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
    if (gen & 1) continue;  // odd: the caller is setting up the next job
    // Join the job only if it is still the one we saw: run() waits for active_ == 0 before
    // it rewrites the job's fields, so a late worker never reads a half-written job.
    // seq_cst on both sides (Dekker): either run() sees this worker active, or it sees the
    // closed generation.
    active_.fetch_add(1, std::memory_order_seq_cst);
    if (generation_.load(std::memory_order_seq_cst) == gen) {
      if (every_ != nullptr) {
        (*every_)();
        done_.fetch_add(1, std::memory_order_release);
      } else {
        drain();
      }
    }
    active_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int64_t num_tasks, FunctionRef<void(int64_t)> task) {
  if (num_tasks <= 0) return;
  if (num_tasks == 1 || workers_.empty() || t_in_region) {
    for (int64_t i = 0; i < num_tasks; ++i) task(i);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  // Close (odd generation), let workers still inside the previous job leave, then publish.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  while (active_.load(std::memory_order_seq_cst) > 0) cpu_relax();
  task_ = &task;
  every_ = nullptr;
  num_tasks_ = num_tasks;
  next_.store(0, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);  // even: open
  }
  if (sleepers_.load() > 0) cv_.notify_all();
  t_in_region = true;
  drain();
  t_in_region = false;
  // Wait for the tasks workers claimed, not for workers that never joined (a descheduled
  // worker on a busy machine must not stall every loop).
  while (done_.load(std::memory_order_acquire) < num_tasks) cpu_relax();
}

void ThreadPool::run_on_every_thread(FunctionRef<void()> fn) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  const bool was = t_in_region;
  t_in_region = true;
  fn();
  t_in_region = was;
  if (workers_.empty()) return;
  generation_.fetch_add(1, std::memory_order_seq_cst);
  while (active_.load(std::memory_order_seq_cst) > 0) cpu_relax();
  every_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  // Each worker joins every open generation exactly once, so all of them run fn.
  const int64_t workers = static_cast<int64_t>(workers_.size());
  while (done_.load(std::memory_order_acquire) < workers) std::this_thread::yield();
  // Leave no worker inside this job before `fn` goes out of scope.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  while (active_.load(std::memory_order_seq_cst) > 0) cpu_relax();
  every_ = nullptr;
  num_tasks_ = 0;  // a worker joining this empty generation claims nothing
  next_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);  // even again
  }
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
