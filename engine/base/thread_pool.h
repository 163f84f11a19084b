// engine/base/thread_pool.h: the engine's one thread pool. Every parallel loop (kernels,
// devices) runs on it; OpenBLAS is kept single-threaded so two pools never fight for cores.
//
//   parallel_for(rows, /*grain=*/16, [&](int64_t lo, int64_t hi) { ... });
//
// The calling thread takes part. A parallel_for issued from inside a pool task runs
// inline on that thread (so "parallel over devices" and "parallel inside a kernel"
// compose without oversubscription).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/base/function_ref.h"

namespace eng {

class ThreadPool {
 public:
  // num_threads counts the caller: ThreadPool(2) starts one worker.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs task(i) for every i in [0, num_tasks), spread over the pool; returns when all ran.
  void run(int64_t num_tasks, FunctionRef<void(int64_t)> task);

  // Runs fn once on the calling thread and once on every worker, and returns when all ran:
  // for warming per-thread state (kernel scratch) outside hot paths. Waits for sleepers.
  void run_on_every_thread(FunctionRef<void()> fn);

  // True on a pool worker or inside run() on the caller (nested loops then run inline).
  static bool in_parallel_region();

 private:
  void worker_loop();
  void drain();  // claims and runs tasks of the current job until none are left

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};  // even: a job is open (or idle); odd: being set up
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};  // workers blocked on cv_ (to skip notify when all spin)
  // The current job: written only while generation_ is odd and no worker is active_.
  const FunctionRef<void(int64_t)>* task_ = nullptr;
  const FunctionRef<void()>* every_ = nullptr;  // set: each worker runs it once (no claiming)
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_{0};     // next task index to claim
  std::atomic<int> active_{0};       // workers inside the current job
  std::atomic<int64_t> done_{0};     // tasks of the current job completed
  std::mutex run_mu_;                // one job at a time
};

// Blocks SIGINT (and SIGTERM) on the calling thread. Every engine-owned thread calls it first,
// so Ctrl-C is always delivered to the thread running Lua (the shell's handler touches the
// Lua state; it must not run on a worker in the middle of a kernel).
void block_interrupt_signals();

// The process-wide pool: SHARDLAB_NUM_THREADS threads, else the number of cores.
ThreadPool& default_pool();

// Splits [0, n) into chunks of at least `grain` and runs fn(lo, hi) on the default pool.
void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn);

}  // namespace eng
