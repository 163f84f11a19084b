// engine/base/check.h: always-on invariant checks; a failure is a bug and aborts with file:line.
#pragma once

#include <fmt/format.h>

namespace eng::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace eng::detail

// ENG_CHECK(cond, "fmt {}", args...): always on. ENG_DCHECK: only in debug builds (hot loops).
#define ENG_CHECK(cond, ...)                                                         \
  do {                                                                               \
    if (!(cond)) [[unlikely]]                                                        \
      ::eng::detail::check_failed(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
  } while (0)

#ifdef NDEBUG
#define ENG_DCHECK(cond, ...) \
  do {                        \
  } while (0)
#else
#define ENG_DCHECK(cond, ...) ENG_CHECK(cond, __VA_ARGS__)
#endif
