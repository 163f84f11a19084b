// engine/runtime/dispatch.h: the device-side executor thread behind asynchronous steps.
//
//   Dispatcher d([&](int64_t ticket, int64_t arg) { return run_on_devices(arg); }, /*capacity=*/2);
//   ENG_ASSIGN_OR_RETURN(int64_t t, d.submit(step));   // returns at once (blocks only when full)
//   ...                                                 // the host loads the next batch
//   ENG_RETURN_IF_ERROR(d.wait(t));                     // the sync point
//
// Contracts:
// - Work items run one at a time, in submission order, on one thread that the Dispatcher
//   owns. Tickets are 0, 1, 2, ... in submission order; ticket t is done when completed() > t.
// - At most `capacity` items are pending (submitted, not finished): submit() blocks until one
//   finishes. That bound is what makes ring buffers indexed by ticket % capacity safe: when
//   submit() returns ticket t, ticket t - capacity has finished.
// - Errors are sticky: the first failing item's Status is kept, every later item is skipped
//   (not run), and wait() for that ticket or any later one, wait_all() and submit() return it.
//   Earlier tickets still wait() ok. There is no recovery: device state after a failed step
//   is unknown.
// - Nothing allocates per item: the ring of arguments is sized once.
// - submit/wait are meant to be called from one host thread; done() and the counters from any.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/base/status.h"

namespace eng {

class Dispatcher {
 public:
  using Work = std::function<Status(int64_t ticket, int64_t arg)>;
  Dispatcher(Work work, int capacity);
  ~Dispatcher();  // finishes (or skips, after an error) what was submitted, then joins
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  int capacity() const { return capacity_; }
  // Blocks while `capacity` items are pending, then enqueues work(ticket, arg).
  Result<int64_t> submit(int64_t arg);
  // Blocks until ticket t finished (t must have been submitted).
  Status wait(int64_t ticket);
  Status wait_all();  // a barrier: every submitted item finished
  bool done(int64_t ticket) const;
  int64_t submitted() const;
  int64_t completed() const;

 private:
  void worker_loop();
  Status error_for(int64_t ticket) const;  // REQUIRES: mu_ held

  Work work_;
  const int capacity_;
  std::vector<int64_t> args_;        // ring: args_[ticket % capacity_]
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // the worker waits for items (or stop)
  std::condition_variable done_cv_;  // the host waits for completions
  int64_t submitted_ = 0;            // tickets handed out
  int64_t completed_ = 0;            // tickets finished (run or skipped)
  int64_t failed_ticket_ = -1;       // first failing ticket, -1 if none
  Status error_;                     // its Status
  bool stop_ = false;
  std::thread thread_;               // last: started after everything above exists
};

}  // namespace eng
