// tests/tensor/kernels_test.cpp: each fast kernel in kernels.h against its ref:: oracle
// (attention is in attention_test.cpp), plus determinism and bf16 rounding cases.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "engine/tensor/dtype.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/moe.h"
#include "engine/tensor/reference.h"
#include "tests/tensor/test_util.h"

namespace eng {
namespace {

using test::all_close;
using test::random_floats;
using test::random_ids;
using test::to_double;

// ---- matmul ---------------------------------------------------------------------------------

struct MatmulCase {
  int64_t M, N, K;
  int64_t pad;  // extra leading-dimension elements
  float alpha, beta;
};

void check_matmul(bool ta, bool tb, const MatmulCase& c, uint32_t seed) {
  const int64_t a_rows = ta ? c.K : c.M, a_cols = ta ? c.M : c.K;
  const int64_t b_rows = tb ? c.N : c.K, b_cols = tb ? c.K : c.N;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
  auto A = random_floats(a_rows * lda, seed);       // (a_rows, lda)
  auto B = random_floats(b_rows * ldb, seed + 1);   // (b_rows, ldb)
  auto C = random_floats(c.M * ldc, seed + 2);      // (M, ldc)
  auto want = to_double(C);
  auto Ad = to_double(A), Bd = to_double(B);
  ref::matmul<double>(ta, tb, c.M, c.N, c.K, c.alpha, Ad.data(), lda, Bd.data(), ldb, c.beta,
                      want.data(), ldc);
  kern::matmul(ta, tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc);
  const double atol = 1e-5 * std::sqrt(static_cast<double>(c.K) + 1);
  EXPECT_TRUE(all_close(C, want, 1e-5, atol))
      << fmt::format("ta={} tb={} M={} N={} K={} pad={}", ta, tb, c.M, c.N, c.K, c.pad);
}

TEST(Matmul, AllTransposesAndStridesMatchReference) {
  const MatmulCase cases[] = {
      {1, 1, 1, 0, 1.f, 0.f},      {7, 13, 5, 3, 0.5f, 0.7f},    {33, 17, 65, 0, 1.f, 1.f},
      {200, 300, 64, 5, 1.f, 0.f},  // split over rows of C
      {24, 900, 130, 1, 2.f, 0.5f},  // small M: split over columns
      {257, 129, 300, 2, 1.f, 0.f}, {3, 5, 0, 1, 1.f, 0.5f},  // K = 0: C = beta C
  };
  uint32_t seed = 1;
  for (const auto& c : cases)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) check_matmul(ta, tb, c, seed += 3);
}

TEST(Matmul, BetaZeroIgnoresOldC) {
  auto A = random_floats(64 * 48, 1), B = random_floats(48 * 80, 2);
  std::vector<float> C(64 * 80, std::numeric_limits<float>::quiet_NaN());
  kern::matmul(false, false, 64, 80, 48, 1.f, A.data(), 48, B.data(), 80, 0.f, C.data(), 80);
  for (float x : C) ASSERT_FALSE(std::isnan(x));
}

TEST(Matmul, Deterministic) {
  auto A = random_floats(512 * 256, 1), B = random_floats(256 * 384, 2);
  std::vector<float> C1(512 * 384), C2(512 * 384);
  kern::matmul(false, true, 512, 384, 256, 1.f, A.data(), 256, B.data(), 256, 0.f, C1.data(), 384);
  kern::matmul(false, true, 512, 384, 256, 1.f, A.data(), 256, B.data(), 256, 0.f, C2.data(), 384);
  EXPECT_TRUE(test::bitwise_equal(C1, C2));
}

// ---- grouped matmul (ragged_dot) --------------------------------------------------------------

// kern::ragged_dot / ragged_dot_grad against moe.h's double loops, with many equal groups (each
// thread takes whole groups), few uneven ones (each group's matmul split over the pool), and
// sizes that are negative or run past N.
TEST(RaggedDot, EqualsTheReferenceLoop) {
  struct Case {
    int64_t B, N, K, P;
    std::vector<int32_t> groups;  // B x E
  };
  const Case cases[] = {
      {1, 512, 48, 40, std::vector<int32_t>(16, 32)},             // by groups
      {2, 300, 64, 96, {250, 10, 40, 0, 5, 200, 95, -3}},          // split: one group holds most
      {1, 100, 16, 24, {30, -2, 500, 7}},                          // cut at N; negative as 0
      {1, 64, 8, 8, {10, 20}},                                     // rows past the groups: 0
      {1, 2048, 128, 256, {1800, 100, 148, 0}},                    // one group holds most: split
  };
  uint32_t seed = 11;
  for (const Case& c : cases) {
    const int64_t E = static_cast<int64_t>(c.groups.size()) / c.B;
    for (int tb = 0; tb < 2; ++tb) {
      auto lhs = random_floats(c.B * c.N * c.K, seed += 2), rhs = random_floats(E * c.K * c.P, seed + 1);
      std::vector<float> out(c.B * c.N * c.P, 7.f);
      kern::ragged_dot(lhs.data(), rhs.data(), c.groups.data(), c.B, c.N, c.K, c.P, E, tb, out.data());
      auto ld = to_double(lhs), rd = to_double(rhs);
      std::vector<double> want(out.size());
      moe::ragged_dot(ld.data(), rd.data(), c.groups.data(), c.B, c.N, c.K, c.P, E, tb, want.data());
      EXPECT_TRUE(all_close(out, want, 1e-5, 1e-5 * std::sqrt(double(c.K)))) << "E=" << E << " tb=" << tb;
    }
    auto lhs = random_floats(c.B * c.N * c.K, seed += 2), dout = random_floats(c.B * c.N * c.P, seed + 1);
    std::vector<float> drhs(E * c.K * c.P, 7.f);
    kern::ragged_dot_grad(lhs.data(), dout.data(), c.groups.data(), c.B, c.N, c.K, c.P, E, drhs.data());
    auto ld = to_double(lhs), dd = to_double(dout);
    std::vector<double> want(drhs.size());
    moe::ragged_dot_grad(ld.data(), dd.data(), c.groups.data(), c.B, c.N, c.K, c.P, E, want.data());
    EXPECT_TRUE(all_close(drhs, want, 1e-5, 1e-5 * std::sqrt(double(c.N)))) << "grad E=" << E;
  }
}

// ---- embedding ------------------------------------------------------------------------------

TEST(Embed, LookupAndGradMatchReference) {
  for (int64_t E : {1, 16, 37, 256}) {
    const int64_t N = 301, V = 50;
    auto table = random_floats(V * E, 3);
    auto ids = random_ids(N, -2, V + 2, 4);  // a few out of range: zero rows, no gradient
    std::vector<float> out(N * E), want(N * E);
    kern::embed_lookup(table.data(), ids.data(), out.data(), N, V, E);
    ref::embed_lookup(table.data(), ids.data(), want.data(), N, V, E);
    EXPECT_EQ(out, want) << "E=" << E;

    auto dy = random_floats(N * E, 5);
    std::vector<float> dt(V * E, 7.f), dt_ref(V * E), dt_inline(V * E);
    kern::embed_lookup_grad(ids.data(), dy.data(), dt.data(), N, V, E);
    ref::embed_lookup_grad(ids.data(), dy.data(), dt_ref.data(), N, V, E);
    EXPECT_EQ(dt, dt_ref) << "E=" << E;  // same summation order as the reference
    test::run_single_threaded(
        [&] { kern::embed_lookup_grad(ids.data(), dy.data(), dt_inline.data(), N, V, E); });
    EXPECT_TRUE(test::bitwise_equal(dt, dt_inline));
  }
}

TEST(Embed, LargeGradIsDeterministic) {
  const int64_t N = 4096, V = 256, E = 512;
  auto ids = random_ids(N, 0, V, 6);
  auto dy = random_floats(N * E, 7);
  std::vector<float> a(V * E), b(V * E), want(V * E);
  kern::embed_lookup_grad(ids.data(), dy.data(), a.data(), N, V, E);
  kern::embed_lookup_grad(ids.data(), dy.data(), b.data(), N, V, E);
  ref::embed_lookup_grad(ids.data(), dy.data(), want.data(), N, V, E);
  EXPECT_TRUE(test::bitwise_equal(a, b));
  EXPECT_EQ(a, want);
}

TEST(OneHot, MatchesReference) {
  const int64_t N = 77, V = 257;
  auto ids = random_ids(N, -1, V + 1, 8);
  std::vector<float> out(N * V, 3.f), want(N * V);
  kern::one_hot(ids.data(), out.data(), N, V);
  ref::one_hot(ids.data(), want.data(), N, V);
  EXPECT_EQ(out, want);
}

// ---- RMSNorm --------------------------------------------------------------------------------

TEST(RmsNorm, ForwardBackwardMatchReference) {
  for (int64_t E : {16, 37, 256, 1000})
    for (int64_t N : {1, 33, 100, 2048}) {
      if (N * E > 600000) continue;
      auto x = random_floats(N * E, 10, -2.f, 2.f), s = random_floats(E, 11, 0.5f, 1.5f);
      auto dy = random_floats(N * E, 12);
      std::vector<float> y(N * E), r(N), dx(N * E), ds(E);
      std::vector<double> yw(N * E), rw(N), dxw(N * E), dsw(E);
      kern::rmsnorm_forward(x.data(), s.data(), y.data(), r.data(), N, E, 1e-5f);
      auto xd = to_double(x), sd = to_double(s), dyd = to_double(dy);
      ref::rmsnorm_forward<double>(xd.data(), sd.data(), yw.data(), rw.data(), N, E, 1e-5);
      EXPECT_TRUE(all_close(y, yw, 1e-5, 1e-6)) << N << "x" << E;
      EXPECT_TRUE(all_close(r, rw, 1e-5, 1e-6)) << N << "x" << E;
      kern::rmsnorm_backward(x.data(), s.data(), r.data(), dy.data(), dx.data(), ds.data(), N, E);
      ref::rmsnorm_backward<double>(xd.data(), sd.data(), rw.data(), dyd.data(), dxw.data(),
                                    dsw.data(), N, E);
      EXPECT_TRUE(all_close(dx, dxw, 1e-4, 1e-5)) << N << "x" << E;
      EXPECT_TRUE(all_close(ds, dsw, 1e-4, 1e-4 * std::sqrt(double(N)))) << N << "x" << E;
      std::vector<float> dx2(N * E), ds2(E);
      test::run_single_threaded([&] {
        kern::rmsnorm_backward(x.data(), s.data(), r.data(), dy.data(), dx2.data(), ds2.data(), N, E);
      });
      EXPECT_TRUE(test::bitwise_equal(dx, dx2));
      EXPECT_TRUE(test::bitwise_equal(ds, ds2));
    }
}

// ---- RoPE -----------------------------------------------------------------------------------

TEST(Rope, MatchesReferenceAndInverts) {
  for (int64_t D : {16, 64, 128}) {
    const int64_t B = 2, T = 37, H = 3;
    auto x = random_floats(B * T * H * D, 13);
    std::vector<int32_t> pos(B * T);
    for (int64_t i = 0; i < B * T; ++i) pos[i] = static_cast<int32_t>(i % T);
    pos[5] = 70000;  // beyond the cached table
    pos[6] = 1000;
    for (bool inverse : {false, true}) {
      std::vector<float> y(x.size());
      std::vector<double> want(x.size());
      auto xd = to_double(x);
      kern::rope(x.data(), pos.data(), y.data(), B, T, H, D, 1.f, 10000.f, inverse);
      ref::rope<double>(xd.data(), pos.data(), want.data(), B, T, H, D, 1.0, 10000.0, inverse);
      EXPECT_TRUE(all_close(y, want, 1e-5, 2e-6)) << "D=" << D << " inverse=" << inverse;
    }
    std::vector<float> y(x.size()), back(x.size());
    kern::rope(x.data(), pos.data(), y.data(), B, T, H, D, 1.f, 10000.f, false);
    kern::rope(y.data(), pos.data(), back.data(), B, T, H, D, 1.f, 10000.f, true);
    EXPECT_TRUE(all_close(back, x, 1e-5, 1e-6));
  }
}

TEST(Rope, ChangingTimescalesRebuildsTheTable) {
  const int64_t B = 1, T = 9, H = 1, D = 16;
  auto x = random_floats(T * D, 14);
  std::vector<int32_t> pos(T);
  for (int i = 0; i < T; ++i) pos[i] = i;
  for (float max_ts : {10000.f, 500.f}) {
    std::vector<float> y(x.size());
    std::vector<double> want(x.size());
    auto xd = to_double(x);
    kern::rope(x.data(), pos.data(), y.data(), B, T, H, D, 1.f, max_ts, false);
    ref::rope<double>(xd.data(), pos.data(), want.data(), B, T, H, D, 1.0, max_ts, false);
    EXPECT_TRUE(all_close(y, want, 1e-5, 1e-6)) << max_ts;
  }
}

// MaxText's LLaMARotaryEmbedding (rope_form.h): adjacent pairs and Llama 3.1's scaled timescales,
// against the float64 oracle, at positions past the 8192 of the original context; the table is
// rebuilt when only use_scale changes.
TEST(Rope, Llama31FormMatchesReferenceAndInverts) {
  const int64_t B = 2, T = 11, H = 2, D = 128;
  auto x = random_floats(B * T * H * D, 15);
  auto xd = to_double(x);
  std::vector<int32_t> pos(B * T);
  for (int64_t i = 0; i < B * T; ++i) pos[i] = static_cast<int32_t>(i * 997);  // up to 20937
  pos[3] = 70000;  // beyond the cached table
  for (kern::RopeForm form : {kern::RopeForm{true, true}, kern::RopeForm{true, false},
                              kern::RopeForm{false, true}}) {
    for (bool inverse : {false, true}) {
      std::vector<float> y(x.size());
      std::vector<double> want(x.size());
      kern::rope(x.data(), pos.data(), y.data(), B, T, H, D, 1.f, 500000.f, inverse, form);
      ref::rope<double>(xd.data(), pos.data(), want.data(), B, T, H, D, 1.0, 500000.0, inverse,
                        form);
      EXPECT_TRUE(all_close(y, want, 1e-5, 2e-6))
          << form.interleave << form.use_scale << " inverse=" << inverse;
    }
  }
  // Adjacent pairs: element 2i pairs with 2i+1, so at position 0 nothing moves and a rotation
  // of (1, 0) in pair 0 lands in elements 0 and 1 only.
  std::vector<float> one(D, 0.f), y(D);
  one[0] = 1.f;
  const int32_t p1 = 1;
  kern::rope(one.data(), &p1, y.data(), 1, 1, 1, D, 1.f, 500000.f, false, {true, true});
  EXPECT_NEAR(y[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(y[1], std::sin(1.0), 1e-6);
  for (int64_t d = 2; d < D; ++d) EXPECT_EQ(y[d], 0.f) << d;
}

// Llama 3.1's scaling at D = 128, rope_max_timescale 500000: pair 28 (wavelength 1955 < 2048)
// keeps its timescale, pair 35 (wavelength 8215 > 8192) is slowed 8x, and pair 30 (wavelength
// ~2646) is interpolated: 1 / ts' = (1 - s) / (8 ts) + s / ts, s = (8192 / wavelength - 1) / 3.
TEST(Rope, Llama31ScalingBands) {
  auto ts = [](int64_t i, bool scale) {
    return kern::rope_timescale<double>(i, 128, 1.0, 500000.0, scale);
  };
  EXPECT_DOUBLE_EQ(ts(28, true), ts(28, false));
  EXPECT_NEAR(ts(35, true), 8 * ts(35, false), 1e-9 * ts(35, true));
  EXPECT_DOUBLE_EQ(ts(0, true), 1.0);
  const double t30 = ts(30, false), wavelen = 2 * M_PI * t30;
  ASSERT_GT(wavelen, 2048);
  ASSERT_LT(wavelen, 8192);
  const double s = (8192 / wavelen - 1) / 3;
  EXPECT_NEAR(1 / ts(30, true), (1 - s) / (8 * t30) + s / t30, 1e-15);
  EXPECT_GT(ts(30, true), t30);
  EXPECT_LT(ts(30, true), 8 * t30);
}

// ---- LayerNorm with bias (gpt3) and bias add ----------------------------------------------

// Against the float64 oracles; rows beyond one task and widths not a multiple of the column
// block (64).
TEST(LayerNorm, ForwardBackwardAndBiasAddMatchReference) {
  for (auto [N, E] : {std::pair<int64_t, int64_t>{7, 5}, {300, 130}}) {
    auto x = random_floats(N * E, 40, -3.f, 3.f), s = random_floats(E, 41), b = random_floats(E, 42);
    auto dy = random_floats(N * E, 43);
    std::vector<float> y(N * E), mean(N), rstd(N), dx(N * E), ds(E), db(E);
    kern::layernorm_forward(x.data(), s.data(), b.data(), y.data(), mean.data(), rstd.data(), N, E,
                            1e-5f);
    kern::layernorm_backward(x.data(), s.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                             ds.data(), db.data(), N, E);
    auto xd = to_double(x), sd = to_double(s), bd = to_double(b), dyd = to_double(dy);
    std::vector<double> wy(N * E), wm(N), wr(N), wdx(N * E), wds(E), wdb(E);
    ref::layernorm_forward<double>(xd.data(), sd.data(), bd.data(), wy.data(), wm.data(), wr.data(),
                                   N, E, 1e-5);
    ref::layernorm_backward<double>(xd.data(), sd.data(), wm.data(), wr.data(), dyd.data(),
                                    wdx.data(), wds.data(), wdb.data(), N, E);
    EXPECT_TRUE(all_close(y, wy, 1e-5, 1e-5)) << N << "x" << E;
    EXPECT_TRUE(all_close(mean, wm, 1e-5, 1e-6));
    EXPECT_TRUE(all_close(rstd, wr, 1e-5, 1e-6));
    EXPECT_TRUE(all_close(dx, wdx, 1e-4, 1e-5));
    EXPECT_TRUE(all_close(ds, wds, 1e-4, 1e-4));
    EXPECT_TRUE(all_close(db, wdb, 1e-5, 1e-5));
    std::vector<float> yb(N * E), gb(E);
    kern::bias_add(x.data(), b.data(), yb.data(), N, E);
    for (int64_t k = 0; k < N * E; ++k) ASSERT_EQ(yb[k], x[k] + b[k % E]) << k;
    kern::bias_add_grad(dy.data(), gb.data(), N, E);
    std::vector<double> wgb(E);
    ref::bias_add_grad<double>(dyd.data(), wgb.data(), N, E);
    EXPECT_TRUE(all_close(gb, wgb, 1e-5, 1e-5));
  }
}

// ---- elementwise ----------------------------------------------------------------------------

TEST(Elementwise, MatchReference) {
  for (int64_t n : {1, 15, 16, 17, 100003}) {
    auto a = random_floats(n, 20, -8.f, 8.f), b = random_floats(n, 21, -3.f, 3.f);
    auto dy = random_floats(n, 22);
    std::vector<float> y(n), want(n);
    kern::add(a.data(), b.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
    EXPECT_EQ(y, want);
    kern::mul(a.data(), b.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) want[i] = a[i] * b[i];
    EXPECT_EQ(y, want);
    kern::scale(a.data(), 0.3f, y.data(), n);
    for (int64_t i = 0; i < n; ++i) want[i] = 0.3f * a[i];
    EXPECT_EQ(y, want);

    auto ad = to_double(a), bd = to_double(b), dyd = to_double(dy);
    std::vector<double> yw(n), dgw(n), duw(n);
    kern::swiglu_forward(a.data(), b.data(), y.data(), n);
    ref::swiglu_forward<double>(ad.data(), bd.data(), yw.data(), n);
    EXPECT_TRUE(all_close(y, yw, 1e-5, 1e-6)) << n;
    std::vector<float> dg(n), du(n);
    kern::swiglu_backward(a.data(), b.data(), dy.data(), dg.data(), du.data(), n);
    ref::swiglu_backward<double>(ad.data(), bd.data(), dyd.data(), dgw.data(), duw.data(), n);
    EXPECT_TRUE(all_close(dg, dgw, 1e-5, 1e-6)) << n;
    EXPECT_TRUE(all_close(du, duw, 1e-5, 1e-6)) << n;
  }
}

TEST(Elementwise, SwigluExtremes) {
  std::vector<float> g = {-200.f, -90.f, -20.f, 0.f, 20.f, 90.f, 200.f}, u(g.size(), 2.f);
  std::vector<float> y(g.size());
  kern::swiglu_forward(g.data(), u.data(), y.data(), static_cast<int64_t>(g.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_TRUE(std::isfinite(y[i])) << g[i];
    EXPECT_NEAR(y[i], ref::silu<double>(g[i]) * 2.0, 1e-5 * std::abs(g[i]) + 1e-6) << g[i];
  }
}

// ---- bf16 -----------------------------------------------------------------------------------

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Bf16, RoundingCases) {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const Case cases[] = {
      {0x3F800000, 0x3F80},  // 1.0 exact
      {0x3F808000, 0x3F80},  // tie, even below: down
      {0x3F818000, 0x3F82},  // tie, odd below: up to even
      {0x3F808001, 0x3F81},  // above the tie: up
      {0x3F807FFF, 0x3F80},  // below the tie: down
      {0x80000000, 0x8000},  // -0
      {0x7F800000, 0x7F80},  // inf
      {0xFF800000, 0xFF80},  // -inf
      {0x7F7FFFFF, 0x7F80},  // max float rounds to inf
      {0x00012345, 0x0001},  // denormal kept (not flushed)
      {0x7FC00000, 0x7FC0},  // quiet NaN
      {0x7F800001, 0x7FC0},  // signalling NaN with low payload stays NaN
      {0xFFFFFFFF, 0xFFFF},  // NaN with all bits
  };
  std::vector<float> x;
  std::vector<uint16_t> want;
  for (int rep = 0; rep < 3; ++rep)  // > 16 values: exercises the vector path and the tail
    for (const auto& c : cases) {
      x.push_back(from_bits(c.in));
      want.push_back(c.out);
    }
  std::vector<uint16_t> y(x.size());
  kern::convert_f32_to_bf16(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(y[i], want[i]) << std::hex << "in 0x" << cases[i % std::size(cases)].in;
    EXPECT_EQ(y[i], f32_to_bf16(x[i]));
  }
}

TEST(Bf16, RandomBitsMatchScalarAndRoundTrip) {
  const int64_t n = 100003;
  std::mt19937 rng(30);
  std::vector<float> x(n);
  for (auto& f : x) f = from_bits(rng());
  std::vector<uint16_t> h(n);
  kern::convert_f32_to_bf16(x.data(), h.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h[i], f32_to_bf16(x[i])) << i;
  std::vector<float> back(n);
  kern::convert_bf16_to_f32(h.data(), back.data(), n);
  std::vector<uint16_t> again(n);
  kern::convert_f32_to_bf16(back.data(), again.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(back[i] == back[i] ? 0 : 1, x[i] == x[i] ? 0 : 1) << i;  // NaN stays NaN
    ASSERT_EQ(again[i], h[i]) << i;                                  // bf16 values are exact
    if (std::isfinite(back[i]) && std::isfinite(x[i])) {  // denormals: absolute error
      ASSERT_LE(std::abs(back[i] - x[i]), std::abs(x[i]) * (1.f / 256) + 1e-40f) << i;
    }
  }
}

// ---- softmax cross-entropy -------------------------------------------------------------------

TEST(CrossEntropy, MatchesReference) {
  for (int64_t V : {1, 17, 257, 8192, 32000}) {
    const int64_t N = V >= 8192 ? 9 : 65;
    auto logits = random_floats(N * V, 40, -10.f, 10.f);
    auto targets = random_ids(N, 0, static_cast<int32_t>(V), 41);
    auto dxent = random_floats(N, 42);
    std::vector<float> xent(N), lse(N), dl(N * V);
    auto ld = to_double(logits), dxd = to_double(dxent);
    std::vector<double> xw(N), lw(N), dlw(N * V);
    kern::softmax_cross_entropy_forward(logits.data(), targets.data(), xent.data(), lse.data(), N, V);
    ref::softmax_cross_entropy_forward<double>(ld.data(), targets.data(), xw.data(), lw.data(), N, V);
    EXPECT_TRUE(all_close(lse, lw, 1e-6, 1e-5)) << V;
    EXPECT_TRUE(all_close(xent, xw, 1e-5, 1e-5)) << V;
    kern::softmax_cross_entropy_backward(logits.data(), targets.data(), lse.data(), dxent.data(),
                                         dl.data(), N, V);
    ref::softmax_cross_entropy_backward<double>(ld.data(), targets.data(), lw.data(), dxd.data(),
                                                dlw.data(), N, V);
    EXPECT_TRUE(all_close(dl, dlw, 1e-4, 1e-7)) << V;
  }
}

TEST(CrossEntropy, HugeLogitsStayFinite) {
  const int64_t N = 2, V = 40;
  auto logits = random_floats(N * V, 43, -1.f, 1.f);
  logits[3] = 3000.f;
  logits[V + 7] = -3000.f;
  std::vector<int32_t> targets = {3, 8};
  std::vector<float> xent(N), lse(N), dxent = {1.f, 1.f}, dl(N * V);
  kern::softmax_cross_entropy_forward(logits.data(), targets.data(), xent.data(), lse.data(), N, V);
  EXPECT_FLOAT_EQ(lse[0], 3000.f);
  EXPECT_NEAR(xent[0], 0.f, 1e-3);
  EXPECT_TRUE(std::isfinite(xent[1]));
  kern::softmax_cross_entropy_backward(logits.data(), targets.data(), lse.data(), dxent.data(),
                                       dl.data(), N, V);
  for (float d : dl) EXPECT_TRUE(std::isfinite(d));
}

// ---- reductions and AdamW --------------------------------------------------------------------

TEST(Reductions, SumsInDoubleAndDeterministic) {
  for (int64_t n : {0, 1, 17, 16384, 100001, 1 << 20}) {
    auto x = random_floats(n, 50, -3.f, 5.f);
    double s = 0, ss = 0;
    for (float f : x) {
      s += f;
      ss += double(f) * f;
    }
    const double got_s = kern::sum(x.data(), n), got_ss = kern::sum_squares(x.data(), n);
    EXPECT_NEAR(got_s, s, 1e-9 * (std::abs(s) + n)) << n;
    EXPECT_NEAR(got_ss, ss, 1e-12 * ss + 1e-12) << n;
    double inline_s = 0, inline_ss = 0;
    test::run_single_threaded([&] {
      inline_s = kern::sum(x.data(), n);
      inline_ss = kern::sum_squares(x.data(), n);
    });
    EXPECT_EQ(inline_s, got_s) << n;  // bitwise: chunking does not depend on threads
    EXPECT_EQ(inline_ss, got_ss) << n;
  }
}

TEST(AdamW, MatchesReferenceOverSteps) {
  const int64_t n = 10007;
  auto p = random_floats(n, 60), mu = std::vector<float>(n, 0.f), nu = std::vector<float>(n, 0.f);
  auto pr = p, mur = mu, nur = nu;
  for (int64_t step = 1; step <= 5; ++step) {
    auto g = random_floats(n, 60 + static_cast<uint32_t>(step), -0.1f, 0.1f);
    kern::adamw_update(p.data(), g.data(), mu.data(), nu.data(), n, 1e-3f, 0.8f, 0.9f, 0.95f,
                       1e-8f, 0.1f, step);
    ref::adamw_update<float>(pr.data(), g.data(), mur.data(), nur.data(), n, 1e-3f, 0.8f, 0.9f,
                             0.95f, 1e-8f, 0.1f, step);
  }
  EXPECT_TRUE(all_close(p, pr, 1e-6, 1e-7));
  EXPECT_TRUE(all_close(mu, mur, 1e-6, 1e-8));  // mu cancels: absolute vs the g scale
  EXPECT_TRUE(all_close(nu, nur, 1e-6, 1e-10));
}

// The routing's top-k (jax.lax.top_k: descending, ties to the lower index) against
// std::stable_sort of the experts by score, on rows full of ties (regression: the insertion
// top-k that replaced the sort was tested only on distinct scores).
TEST(MoeRouting, TopKBreaksTiesLikeAStableSort) {
  const int64_t E = 8;
  const std::vector<std::vector<double>> rows = {
      {1, 1, 1, 1, 1, 1, 1, 1}, {0, 2, 2, 1, 2, 0, 1, 2}, {3, 3, 1, 1, 3, 3, 1, 1},
      {-1, 0, -1, 0, 5, 5, -1, 0}, {0, 0, 0, 0, 0, 0, 0, 9}};
  for (const auto& row : rows)
    for (int64_t k = 1; k <= E; ++k) {
      moe::RouteParams p;
      p.k = k;
      moe::Token<double> t;
      moe::route_token(row.data(), static_cast<const double*>(nullptr), E, p, t);
      std::vector<int64_t> want(E);
      for (int64_t e = 0; e < E; ++e) want[e] = e;
      std::stable_sort(want.begin(), want.end(), [&](int64_t a, int64_t b) { return row[a] > row[b]; });
      want.resize(k);
      EXPECT_EQ(t.idx, want) << "k=" << k << " row " << ::testing::PrintToString(row);
    }
}

}  // namespace
}  // namespace eng
