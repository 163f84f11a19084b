// engine/base/check_trap.h: turning a failed ENG_CHECK into a Status, for one purpose only.
//
// Replaying untrusted bytes (a compile-cache entry) runs code whose checks are invariants
// (the IR builder's shape inference). While a CheckTrap lives on this thread, a failed
// ENG_CHECK throws CheckFailure instead of aborting; the function holding the trap catches
// it and returns a Status, so no exception leaves it. Anywhere else a failed check aborts.
#pragma once

#include <exception>
#include <string>

namespace eng {

class CheckFailure : public std::exception {
 public:
  explicit CheckFailure(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;  // "file:line: check failed: cond: message"
};

class CheckTrap {
 public:
  CheckTrap();
  ~CheckTrap();
  CheckTrap(const CheckTrap&) = delete;
  CheckTrap& operator=(const CheckTrap&) = delete;

 private:
  bool was_;  // the enclosing trap's state, restored on destruction
};

}  // namespace eng
