// tests/tensor/attention_test.cpp: flash-style causal attention against the naive oracle (in
// double), at odd sizes that cross the kernel's block and chunk boundaries.
#include <cmath>
#include <random>

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
                    float scale, const int32_t* seg = nullptr) {
  const int64_t n = s.B * s.T * s.H * s.D;
  AttnResult r{std::vector<float>(n), std::vector<float>(s.B * s.H * s.T), std::vector<float>(n),
               std::vector<float>(n), std::vector<float>(n)};
  kern::attention_forward(q.data(), k.data(), v.data(), r.o.data(), r.lse.data(), s.B, s.T, s.H,
                          s.D, scale, seg);
  kern::attention_backward(q.data(), k.data(), v.data(), r.o.data(), r.lse.data(), dout.data(),
                           r.dq.data(), r.dk.data(), r.dv.data(), s.B, s.T, s.H, s.D, scale, seg);
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

// Segment ids (packing): the kernel against the oracle, for packed rows (contiguous segments,
// one starting past the 512-key chunk so whole chunks of a query are masked, padding id 0)
// and for arbitrary ids (a non-contiguous mask).
TEST(Attention, SegmentsMatchReference) {
  struct Case {
    Shape4 s;
    std::vector<int64_t> lengths;  // segment lengths of every row, id 1, 2, ...; rest id 0
    bool random_ids = false;
  };
  const Case cases[] = {
      {{2, 37, 3, 16}, {5, 20, 1, 7}},
      {{1, 130, 2, 64}, {64, 1, 65}},
      {{1, 700, 1, 32}, {520, 100, 33}},  // the third segment's queries see no key of chunk 0
      {{2, 45, 2, 16}, {}, true},
  };
  uint32_t seed = 300;
  for (const Case& c : cases) {
    const Shape4& s = c.s;
    const int64_t n = s.B * s.T * s.H * s.D;
    std::vector<int32_t> seg(s.B * s.T, 0);
    std::mt19937 rng(seed);
    for (int64_t b = 0; b < s.B; ++b) {
      int64_t t = 0;
      for (size_t i = 0; i < c.lengths.size(); ++i)
        for (int64_t j = 0; j < c.lengths[i] && t < s.T; ++j) seg[b * s.T + t++] = int32_t(i + 1);
      if (c.random_ids)
        for (t = 0; t < s.T; ++t) seg[b * s.T + t] = static_cast<int32_t>(rng() % 3);
    }
    const float scale = 1.f / std::sqrt(static_cast<float>(s.D));
    auto q = random_floats(n, ++seed, -3.f, 3.f), k = random_floats(n, ++seed, -1.f, 1.f);
    auto v = random_floats(n, ++seed), dout = random_floats(n, ++seed);
    AttnResult r = run_fast(q, k, v, dout, s, scale, seg.data());
    auto qd = to_double(q), kd = to_double(k), vd = to_double(v), dd = to_double(dout);
    std::vector<double> o(n), lse(s.B * s.H * s.T), dq(n), dk(n), dv(n);
    ref::attention_forward<double>(qd.data(), kd.data(), vd.data(), o.data(), lse.data(), s.B, s.T,
                                   s.H, s.D, scale, seg.data());
    ref::attention_backward<double>(qd.data(), kd.data(), vd.data(), o.data(), lse.data(),
                                    dd.data(), dq.data(), dk.data(), dv.data(), s.B, s.T, s.H, s.D,
                                    scale, seg.data());
    const std::string where = fmt::format("B={} T={} H={} D={}", s.B, s.T, s.H, s.D);
    EXPECT_TRUE(all_close(r.o, o, 1e-4, 1e-5)) << where;
    EXPECT_TRUE(all_close(r.lse, lse, 1e-5, 1e-5)) << where;
    EXPECT_TRUE(all_close(r.dq, dq, 1e-3, 1e-4)) << where;
    EXPECT_TRUE(all_close(r.dk, dk, 1e-3, 1e-4)) << where;
    EXPECT_TRUE(all_close(r.dv, dv, 1e-3, 1e-4)) << where;
  }
}

// Packed documents do not attend across each other: in a row [doc A | doc B], doc B's outputs
// and gradients equal those of doc B alone (positions 0.., its own row), and replacing doc A's
// keys and values changes none of doc B's outputs.
TEST(Attention, PackedDocumentsDoNotAttendAcrossEachOther) {
  const int64_t H = 2, D = 16, TA = 70, TB = 90, T = TA + TB;
  const Shape4 packed{1, T, H, D}, alone{1, TB, H, D};
  const int64_t row = H * D;
  auto q = random_floats(T * row, 1, -3.f, 3.f), k = random_floats(T * row, 2, -1.f, 1.f);
  auto v = random_floats(T * row, 3), dout = random_floats(T * row, 4);
  std::vector<int32_t> seg(T, 1);
  std::fill(seg.begin() + TA, seg.end(), 2);
  const float scale = 0.25f;
  AttnResult p = run_fast(q, k, v, dout, packed, scale, seg.data());
  auto tail = [&](const std::vector<float>& x) {
    return std::vector<float>(x.begin() + TA * row, x.end());
  };
  AttnResult b = run_fast(tail(q), tail(k), tail(v), tail(dout), alone, scale);
  EXPECT_TRUE(all_close(tail(p.o), to_double(b.o), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(tail(p.dq), to_double(b.dq), 1e-4, 1e-5));
  EXPECT_TRUE(all_close(tail(p.dk), to_double(b.dk), 1e-4, 1e-5));
  EXPECT_TRUE(all_close(tail(p.dv), to_double(b.dv), 1e-4, 1e-5));
  // Doc A's keys and values replaced: doc B's outputs are bitwise the same.
  auto k2 = k, v2 = v;
  for (int64_t i = 0; i < TA * row; ++i) k2[i] += 5.f, v2[i] -= 7.f;
  AttnResult p2 = run_fast(q, k2, v2, dout, packed, scale, seg.data());
  EXPECT_TRUE(test::bitwise_equal(tail(p.o), tail(p2.o)));
  // Without the segment ids doc B would see doc A (the test can fail).
  AttnResult u = run_fast(q, k, v, dout, packed, scale);
  EXPECT_FALSE(all_close(tail(u.o), to_double(b.o), 1e-3, 1e-4));
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
