// engine/base/status.h: recoverable failures a user can cause. Bugs use ENG_CHECK instead.
//
//   Result<Shape> r = parse_shape("8,64");
//   if (!r.ok()) return r.status();          // propagate
//   Shape s = std::move(r).value();
//
// Messages are lowercase, name the operation first and show both conflicting values:
//   "matmul: inner dims differ: (8, 64, 768) x (512, 3072)".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "engine/base/check.h"

namespace eng {

enum class Code {
  kOk,
  kInvalidArgument,
  kNotFound,
  kFailedPrecondition,
  kOutOfRange,
  kResourceExhausted,
  kUnimplemented,
  kIo,
  kDataLoss,
  kCancelled,
  kInternal,
};

const char* code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  Code code_ = Code::kOk;  // kOk means no error
  std::string message_;    // empty when ok
};

inline Status ok_status() { return Status(); }

template <typename... Args>
Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
  return Status(Code::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status not_found(fmt::format_string<Args...> f, Args&&... args) {
  return Status(Code::kNotFound, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status failed_precondition(fmt::format_string<Args...> f, Args&&... args) {
  return Status(Code::kFailedPrecondition, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status resource_exhausted(fmt::format_string<Args...> f, Args&&... args) {
  return Status(Code::kResourceExhausted, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status unimplemented(fmt::format_string<Args...> f, Args&&... args) {
  return Status(Code::kUnimplemented, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status io_error(fmt::format_string<Args...> f, Args&&... args) {
  return Status(Code::kIo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status data_loss(fmt::format_string<Args...> f, Args&&... args) {
  return Status(Code::kDataLoss, fmt::format(f, std::forward<Args>(args)...));
}

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    ENG_CHECK(!status_.ok(), "Result constructed from an ok Status without a value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const T& value() const& {
    ENG_CHECK(ok(), "Result::value on error: {}", status_.message());
    return *value_;
  }
  T& value() & {
    ENG_CHECK(ok(), "Result::value on error: {}", status_.message());
    return *value_;
  }
  T&& value() && {
    ENG_CHECK(ok(), "Result::value on error: {}", status_.message());
    return std::move(*value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  Status status_;           // ok iff value_ holds a value
  std::optional<T> value_;  // the result when ok
};

// Names the caller in an error, keeping its code: with_context("Trainer:step", s) is
// "Trainer:step: <message>". A message that already starts with the caller's last word
// ("config: ..." inside sl.config) has that word replaced, not repeated. The one way the
// front-end and the shell's bindings add context to a Status.
Status with_context(std::string_view fn, const Status& s);
template <typename T>
Result<T> with_context(std::string_view fn, Result<T> r) {
  if (r.ok()) return r;
  return with_context(fn, r.status());
}

}  // namespace eng

// Propagate a non-ok Status from an expression returning Status.
#define ENG_RETURN_IF_ERROR(expr)            \
  do {                                       \
    ::eng::Status eng_status_ = (expr);      \
    if (!eng_status_.ok()) return eng_status_; \
  } while (0)

#define ENG_CONCAT_INNER(a, b) a##b
#define ENG_CONCAT(a, b) ENG_CONCAT_INNER(a, b)
#define ENG_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
// ENG_ASSIGN_OR_RETURN(Shape s, parse_shape(text));
#define ENG_ASSIGN_OR_RETURN(lhs, expr) \
  ENG_ASSIGN_OR_RETURN_IMPL(ENG_CONCAT(eng_result_, __LINE__), lhs, expr)
