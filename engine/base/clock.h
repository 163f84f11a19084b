// engine/base/clock.h: monotonic wall-clock helpers.
#pragma once

#include <chrono>
#include <cstdint>

namespace eng {

inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

inline int64_t unix_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace eng
