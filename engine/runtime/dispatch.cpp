// engine/runtime/dispatch.cpp: the device-side executor thread (see dispatch.h).
#include "engine/runtime/dispatch.h"

#include <new>

#include "engine/base/thread_pool.h"

namespace eng {

Dispatcher::Dispatcher(Work work, int capacity)
    : work_(std::move(work)), capacity_(capacity), args_(static_cast<size_t>(capacity)) {
  ENG_CHECK(capacity >= 1, "dispatcher: capacity must be >= 1, got {}", capacity);
  thread_ = std::thread([this] {
    block_interrupt_signals();  // Ctrl-C belongs to the host (Lua) thread
    worker_loop();
  });
}

Dispatcher::~Dispatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void Dispatcher::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || completed_ < submitted_; });
    if (completed_ == submitted_) return;  // stop_ and drained
    const int64_t ticket = completed_;
    const int64_t arg = args_[static_cast<size_t>(ticket % capacity_)];
    const bool skip = failed_ticket_ >= 0;
    lock.unlock();
    Status s = ok_status();
    // An exception must not end this thread (std::terminate): out of memory inside a step is
    // the step's error (issue 30), the host thread sees it at its next wait.
    try {
      if (!skip) s = work_(ticket, arg);
    } catch (const std::bad_alloc&) {
      s = resource_exhausted("step {}: out of memory on the device thread (std::bad_alloc)",
                             ticket);
    }
    lock.lock();
    if (!s.ok() && failed_ticket_ < 0) {
      failed_ticket_ = ticket;
      error_ = std::move(s);
    }
    ++completed_;
    done_cv_.notify_all();
  }
}

Status Dispatcher::error_for(int64_t ticket) const {
  if (failed_ticket_ >= 0 && ticket >= failed_ticket_) return error_;
  return ok_status();
}

Result<int64_t> Dispatcher::submit(int64_t arg) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return submitted_ - completed_ < capacity_; });
  if (failed_ticket_ >= 0) return error_;
  const int64_t ticket = submitted_;
  args_[static_cast<size_t>(ticket % capacity_)] = arg;
  ++submitted_;
  lock.unlock();
  work_cv_.notify_one();
  return ticket;
}

Status Dispatcher::wait(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  ENG_CHECK(ticket < submitted_, "dispatcher: wait for ticket {} but only {} submitted", ticket,
            submitted_);
  done_cv_.wait(lock, [&] { return completed_ > ticket; });
  return error_for(ticket);
}

Status Dispatcher::wait_all() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return completed_ == submitted_; });
  return error_for(submitted_ - 1);
}

bool Dispatcher::done(int64_t ticket) const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ > ticket;
}

int64_t Dispatcher::submitted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return submitted_;
}

int64_t Dispatcher::completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_;
}

}  // namespace eng
