// tests/tensor/test_util.h: random inputs and tolerance checks shared by the kernel tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/base/thread_pool.h"

namespace eng::test {

inline std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> random_ids(int64_t n, int32_t lo, int32_t hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Every element within atol + rtol * |want|; reports the worst element.
template <typename W>
::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<W>& want,
                                     double rtol, double atol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size mismatch";
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = static_cast<double>(want[i]), g = got[i];
    const double excess = std::abs(g - w) / (atol + rtol * std::abs(w));
    if (std::isnan(excess))
      return ::testing::AssertionFailure() << "element " << i << ": got " << g << " want " << w;
    if (excess > worst) {
      worst = excess;
      at = i;
    }
  }
  if (worst <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << at << ": got " << got[at] << " want "
                                       << static_cast<double>(want[at]) << " (" << worst
                                       << "x the tolerance)";
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs fn inline on one pool thread (a nested region): kernels then use no parallelism, so
// comparing with a normal call shows the result does not depend on the thread count.
template <typename Fn>
void run_single_threaded(Fn&& fn) {
  default_pool().run(2, [&](int64_t i) {
    if (i == 0) fn();
  });
}

}  // namespace eng::test
