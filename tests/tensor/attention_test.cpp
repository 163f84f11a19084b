// tests/tensor/attention_test.cpp: flash-style causal attention against the naive oracle (in
// double), at odd sizes that cross the kernel's block and chunk boundaries.
#include <cmath>

#include <fmt/format.h>

#include "engine/tensor/kernels.h"
#include "engine/tensor/reference.h"
#include "tests/tensor/test_util.h"

namespace eng {
namespace {

using test::all_close;
using test::random_floats;
using test::to_double;

struct Shape4 {
  int64_t B, T, H, D;
};

struct AttnResult {
  std::vector<float> o, lse, dq, dk, dv;
};

AttnResult run_fast(const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v, const std::vector<float>& dout, Shape4 s,
                    float scale) {
  const int64_t n = s.B * s.T * s.H * s.D;
  AttnResult r{std::vector<float>(n), std::vector<float>(s.B * s.H * s.T), std::vector<float>(n),
               std::vector<float>(n), std::vector<float>(n)};
  kern::attention_forward(q.data(), k.data(), v.data(), r.o.data(), r.lse.data(), s.B, s.T, s.H,
                          s.D, scale);
  kern::attention_backward(q.data(), k.data(), v.data(), r.o.data(), r.lse.data(), dout.data(),
                           r.dq.data(), r.dk.data(), r.dv.data(), s.B, s.T, s.H, s.D, scale);
  return r;
}

TEST(Attention, MatchesReference) {
  const Shape4 shapes[] = {
      {1, 1, 1, 16},   {2, 37, 3, 16}, {1, 130, 2, 64},
      {2, 65, 1, 128},  // T = block + 1
      {1, 700, 1, 32},  // T > the forward key chunk and the backward query chunk (512)
  };
  uint32_t seed = 100;
  for (const Shape4& s : shapes) {
    const int64_t n = s.B * s.T * s.H * s.D;
    const float scale = 1.f / std::sqrt(static_cast<float>(s.D));
    // Spread-out scores (x3) so the softmax is far from uniform.
    auto q = random_floats(n, ++seed, -3.f, 3.f), k = random_floats(n, ++seed, -1.f, 1.f);
    auto v = random_floats(n, ++seed), dout = random_floats(n, ++seed);
    AttnResult r = run_fast(q, k, v, dout, s, scale);

    auto qd = to_double(q), kd = to_double(k), vd = to_double(v), dd = to_double(dout);
    std::vector<double> o(n), lse(s.B * s.H * s.T), dq(n), dk(n), dv(n);
    ref::attention_forward<double>(qd.data(), kd.data(), vd.data(), o.data(), lse.data(), s.B, s.T,
                                   s.H, s.D, scale);
    ref::attention_backward<double>(qd.data(), kd.data(), vd.data(), o.data(), lse.data(), dd.data(),
                                    dq.data(), dk.data(), dv.data(), s.B, s.T, s.H, s.D, scale);
    const std::string where = fmt::format("B={} T={} H={} D={}", s.B, s.T, s.H, s.D);
    EXPECT_TRUE(all_close(r.o, o, 1e-4, 1e-5)) << where;
    EXPECT_TRUE(all_close(r.lse, lse, 1e-5, 1e-5)) << where;
    EXPECT_TRUE(all_close(r.dq, dq, 1e-3, 1e-4)) << where;
    EXPECT_TRUE(all_close(r.dk, dk, 1e-3, 1e-4)) << where;
    EXPECT_TRUE(all_close(r.dv, dv, 1e-3, 1e-4)) << where;
  }
}

TEST(Attention, DeterministicForAnyThreading) {
  const Shape4 s{2, 200, 4, 64};
  const int64_t n = s.B * s.T * s.H * s.D;
  auto q = random_floats(n, 1), k = random_floats(n, 2), v = random_floats(n, 3);
  auto dout = random_floats(n, 4);
  AttnResult a = run_fast(q, k, v, dout, s, 0.125f);
  AttnResult b = run_fast(q, k, v, dout, s, 0.125f);
  AttnResult c;
  test::run_single_threaded([&] { c = run_fast(q, k, v, dout, s, 0.125f); });
  for (const AttnResult* other : {&b, &c}) {
    EXPECT_TRUE(test::bitwise_equal(a.o, other->o));
    EXPECT_TRUE(test::bitwise_equal(a.lse, other->lse));
    EXPECT_TRUE(test::bitwise_equal(a.dq, other->dq));
    EXPECT_TRUE(test::bitwise_equal(a.dk, other->dk));
    EXPECT_TRUE(test::bitwise_equal(a.dv, other->dv));
  }
}

}  // namespace
}  // namespace eng
