// engine/base/base.cpp: Status formatting and the check-failure handler.
#include <cstdio>
#include <cstdlib>

#include "engine/base/check.h"
#include "engine/base/check_trap.h"
#include "engine/base/status.h"

namespace eng {

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kNotFound: return "not found";
    case Code::kFailedPrecondition: return "failed precondition";
    case Code::kOutOfRange: return "out of range";
    case Code::kResourceExhausted: return "resource exhausted";
    case Code::kUnimplemented: return "unimplemented";
    case Code::kIo: return "i/o error";
    case Code::kDataLoss: return "data loss";
    case Code::kCancelled: return "cancelled";
    case Code::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return message_;
}

namespace {
thread_local bool t_check_trap = false;  // a CheckTrap is alive on this thread
}  // namespace

CheckTrap::CheckTrap() : was_(t_check_trap) { t_check_trap = true; }
CheckTrap::~CheckTrap() { t_check_trap = was_; }

namespace detail {
void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  if (t_check_trap)
    throw CheckFailure(fmt::format("{}:{}: check failed: {}: {}", file, line, cond, msg));
  std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", file, line, cond, msg.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail

Status with_context(std::string_view fn, const Status& s) {
  if (s.ok()) return s;
  std::string_view msg = s.message();
  if (msg.starts_with(fn) && msg.substr(fn.size()).starts_with(": ")) return s;
  const size_t cut = fn.find_last_of(".:");
  std::string_view last = cut == std::string_view::npos ? fn : fn.substr(cut + 1);
  if (msg.starts_with(last) && msg.substr(last.size()).starts_with(": ")) msg.remove_prefix(last.size() + 2);
  return Status(s.code(), fmt::format("{}: {}", fn, msg));
}

}  // namespace eng
