// tests/tensor/kernels_bf16_test.cpp: the bf16 kernels (kernels.h, bf16 section) against their
// float64 oracles (reference.h, ref::*_bf16: bf16 rounding at the same points), and the
// rounding itself against eng::f32_to_bf16 on every class of f32 bits. CTest runs this suite
// twice: as is, and with SHARDLAB_DISABLE_AVX512_BF16=1 (software conversions): same asserts.
//
// Tolerances. The kernel and the oracle round at the same points, so they agree exactly
// except where an f32 intermediate (vs the oracle's double) lands on the other side of a bf16
// rounding boundary; the f32 error of a sum of n terms is at most n * 2^-24 of the summed
// magnitudes, so a flip is rare (about n * 2^-24 / 2^-8 per rounding) and costs one bf16 ulp
// (2^-8 relative), which later roundings can carry forward once or twice more. So each check
// asserts (a) a minimum fraction of bitwise-equal elements (a misplaced or missing rounding
// point breaks this for most elements), and (b) every element within `ulps` bf16 ulps of the
// oracle plus an absolute term for outputs that are differences of nearly equal f32 sums
// (RMSNorm dx, attention dq/dk), scaled by the output's rms.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "engine/tensor/bf16_simd.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/onednn_matmul.h"
#include "engine/tensor/reference.h"
#include "tests/tensor/test_util.h"

namespace eng {
namespace {

struct Bf16Data {  // bf16 bits and the same values in double
  std::vector<uint16_t> bits;
  std::vector<double> val;
};

Bf16Data random_bf16(int64_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  auto f = test::random_floats(n, seed, lo, hi);
  Bf16Data d{std::vector<uint16_t>(n), std::vector<double>(n)};
  for (int64_t i = 0; i < n; ++i) d.val[i] = bf16_to_f32(d.bits[i] = f32_to_bf16(f[i]));
  return d;
}

struct Tol {
  double ulps;       // bf16 ulps (2^-8 relative) per element
  double rms_atol;   // absolute term, times the oracle's rms
  double min_exact;  // fraction of elements bitwise equal to the oracle
};

::testing::AssertionResult close_bf16(const std::vector<uint16_t>& got, const std::vector<double>& want,
                                      Tol tol, const std::string& what) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": size";
  double ss = 0;
  for (double w : want) ss += w * w;
  const double atol = tol.rms_atol * std::sqrt(ss / std::max<size_t>(1, want.size()));
  int64_t exact = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = bf16_to_f32(got[i]), w = want[i];
    if (g == w || (std::isnan(g) && std::isnan(w))) {
      ++exact;
      continue;
    }
    if (!(std::abs(g - w) <= tol.ulps * std::ldexp(std::abs(w), -8) + atol))
      return ::testing::AssertionFailure() << what << ": element " << i << " got " << g << " want " << w;
  }
  const double frac = static_cast<double>(exact) / std::max<size_t>(1, got.size());
  if (frac < tol.min_exact)
    return ::testing::AssertionFailure() << what << ": only " << frac << " of elements bitwise equal";
  return ::testing::AssertionSuccess() << what << ": " << frac << " exact";
}

std::vector<double> widen(const std::vector<uint16_t>& b) {
  std::vector<double> d(b.size());
  for (size_t i = 0; i < b.size(); ++i) d[i] = bf16_to_f32(b[i]);
  return d;
}

// ---- rounding -------------------------------------------------------------------------------

// Every high half (all exponents, signs, NaN/inf payloads) with the low halves that decide
// rounding (0, ties, just below/above a tie, max), through the vector path.
TEST(Bf16Kernels, VectorRoundingMatchesSoftwareOnEveryClass) {
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
  std::vector<float> x;
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : lows) {
      const uint32_t u = hi << 16 | lo;
      float f;
      std::memcpy(&f, &u, 4);
      x.push_back(f);
    }
  for (size_t i = 0; i < x.size(); i += kern::simd::kW) {
    const kern::simd::Mask m = kern::simd::mask_for(static_cast<int64_t>(x.size() - i));
    uint16_t out[kern::simd::kW];
    kern::bf16::store(out, kern::simd::load(x.data() + i, m), m);
    for (size_t j = 0; j < static_cast<size_t>(kern::simd::kW) && i + j < x.size(); ++j)
      ASSERT_EQ(out[j], f32_to_bf16(x[i + j])) << fmt::format("bits {:#010x}", [&] {
        uint32_t u;
        std::memcpy(&u, &x[i + j], 4);
        return u;
      }());
  }
  EXPECT_EQ(kern::bf16::use_hw_convert(), kern::cpu_has_avx512_bf16() && ENG_AVX512);
}

TEST(Bf16Kernels, OracleRoundingIsCorrectlyRoundedFromDouble) {
  EXPECT_EQ(ref::round_bf16(1.0 + std::ldexp(1.0, -8)), 1.0);  // tie: to even
  EXPECT_EQ(ref::round_bf16(1.0 + 3 * std::ldexp(1.0, -8)), 1.0 + std::ldexp(1.0, -6));
  EXPECT_EQ(ref::round_bf16(1.0 + std::ldexp(1.0, -8) + 1e-12), 1.0 + std::ldexp(1.0, -7));
  EXPECT_EQ(ref::round_bf16(std::ldexp(1.0, -140)), 0.0);  // below half the least subnormal
  EXPECT_EQ(ref::round_bf16(std::ldexp(3.0, -134)), std::ldexp(1.0, -132));  // subnormal tie
  EXPECT_TRUE(std::isinf(ref::round_bf16(std::ldexp(1.0, 128))));
  for (float f : {0.1f, -3.7e-20f, 6.5e37f, 1e-39f}) EXPECT_EQ(ref::round_bf16(double(f)), bf16_to_f32(f32_to_bf16(f)));
}

// ---- elementwise ----------------------------------------------------------------------------

TEST(Bf16Kernels, AddMulSwigluMatchOracle) {
  const int64_t n = 40000 + 7;  // several parallel chunks and a tail
  auto a = random_bf16(n, 1, -4, 4), b = random_bf16(n, 2, -4, 4), dy = random_bf16(n, 3);
  std::vector<uint16_t> y(n), y2(n);
  std::vector<double> w(n), w2(n);
  kern::mul_bf16(a.bits.data(), b.bits.data(), y.data(), n);
  ref::mul_bf16(a.val.data(), b.val.data(), w.data(), n);
  EXPECT_TRUE(close_bf16(y, w, {0, 0, 1.0}, "mul"));  // bf16 x bf16 is exact in f32
  kern::add_bf16(a.bits.data(), b.bits.data(), y.data(), n);
  ref::add_bf16(a.val.data(), b.val.data(), w.data(), n);
  EXPECT_TRUE(close_bf16(y, w, {1, 0, 0.999}, "add"));  // exact in f32 unless exponents far apart
  kern::swiglu_forward_bf16(a.bits.data(), b.bits.data(), y.data(), n);
  ref::swiglu_forward_bf16(a.val.data(), b.val.data(), w.data(), n);
  EXPECT_TRUE(close_bf16(y, w, {2, 0, 0.999}, "swiglu forward"));
  kern::swiglu_backward_bf16(a.bits.data(), b.bits.data(), dy.bits.data(), y.data(), y2.data(), n);
  ref::swiglu_backward_bf16(a.val.data(), b.val.data(), dy.val.data(), w.data(), w2.data(), n);
  EXPECT_TRUE(close_bf16(y, w, {3, 1e-3, 0.999}, "swiglu dg"));  // dg: a sum of two terms
  EXPECT_TRUE(close_bf16(y2, w2, {2, 0, 0.999}, "swiglu du"));
}

// ---- RMSNorm --------------------------------------------------------------------------------

TEST(Bf16Kernels, RmsnormForwardBackwardMatchOracle) {
  const int64_t N = 70, E = 200;  // N not a multiple of the 32-row dscale blocks
  auto x = random_bf16(N * E, 4, -2, 2), dy = random_bf16(N * E, 5);
  auto scale_f = test::random_floats(E, 6, 0.5f, 1.5f);
  std::vector<double> scale_d(scale_f.begin(), scale_f.end());
  std::vector<uint16_t> y(N * E), dx(N * E);
  std::vector<float> rstd(N), dscale(E);
  kern::rmsnorm_forward_bf16(x.bits.data(), scale_f.data(), y.data(), rstd.data(), N, E, 1e-5f);
  std::vector<double> wy(N * E), wr(N), wdx(N * E), wds(E);
  ref::rmsnorm_forward_bf16(x.val.data(), scale_d.data(), wy.data(), wr.data(), N, E, 1e-5);
  EXPECT_TRUE(close_bf16(y, wy, {2, 0, 0.99}, "rmsnorm y"));
  EXPECT_TRUE(test::all_close(rstd, wr, 1e-5, 0));  // an f32 sum of E squares
  kern::rmsnorm_backward_bf16(x.bits.data(), scale_f.data(), rstd.data(), dy.bits.data(), dx.data(),
                              dscale.data(), N, E);
  std::vector<double> rstd_d(rstd.begin(), rstd.end());  // the oracle uses the kernel's rstd
  ref::rmsnorm_backward_bf16(x.val.data(), scale_d.data(), rstd_d.data(), dy.val.data(),
                             wdx.data(), wds.data(), N, E);
  EXPECT_TRUE(close_bf16(dx, wdx, {2, 1e-3, 0.99}, "rmsnorm dx"));
  std::vector<uint16_t> dscale_bits(E);
  for (int64_t e = 0; e < E; ++e) {
    dscale_bits[e] = f32_to_bf16(dscale[e]);
    ASSERT_EQ(bf16_to_f32(dscale_bits[e]), dscale[e]) << "dscale is rounded to bf16";
  }
  EXPECT_TRUE(close_bf16(dscale_bits, wds, {1, 1e-3, 0.98}, "rmsnorm dscale"));  // sum of N
}

// ---- RoPE -----------------------------------------------------------------------------------

TEST(Bf16Kernels, RopeAndItsInverseMatchOracle) {
  const int64_t B = 2, T = 37, H = 3, D = 64;
  auto x = random_bf16(B * T * H * D, 7, -3, 3);
  auto pos = test::random_ids(B * T, 0, 5000, 8);
  std::vector<uint16_t> y(x.bits.size());
  std::vector<double> w(x.bits.size());
  for (bool inverse : {false, true}) {
    kern::rope_bf16(x.bits.data(), pos.data(), y.data(), B, T, H, D, 1.f, 10000.f, inverse);
    ref::rope_bf16(x.val.data(), pos.data(), w.data(), B, T, H, D, 1.0, 10000.0, inverse);
    EXPECT_TRUE(close_bf16(y, w, {2, 0, 0.99}, inverse ? "rope inverse" : "rope"));
  }
}

// LLaMARotaryEmbedding in bf16: f32 math, one rounding per element (the oracle's).
TEST(Bf16Kernels, Llama31RopeMatchesOracle) {
  const int64_t B = 2, T = 13, H = 2, D = 128;
  auto x = random_bf16(B * T * H * D, 9, -3, 3);
  auto pos = test::random_ids(B * T, 0, 20000, 10);
  std::vector<uint16_t> y(x.bits.size());
  std::vector<double> w(x.bits.size());
  for (bool inverse : {false, true}) {
    kern::rope_bf16(x.bits.data(), pos.data(), y.data(), B, T, H, D, 1.f, 500000.f, inverse,
                    {true, true});
    ref::rope_bf16(x.val.data(), pos.data(), w.data(), B, T, H, D, 1.0, 500000.0, inverse,
                   {true, true});
    EXPECT_TRUE(close_bf16(y, w, {1, 0, 0.99}, inverse ? "llama3.1 rope inverse" : "llama3.1 rope"));
  }
}

// ---- attention ------------------------------------------------------------------------------

// Packed rows: segment ids 1, 1, ..., 2, 2, ..., 3 ... with lengths that cross the 32-row blocks.
std::vector<int32_t> packed_segments(int64_t B, int64_t T, uint32_t seed) {
  auto cuts = test::random_ids(B * 4, 1, static_cast<int32_t>(T), seed);
  std::vector<int32_t> seg(B * T);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> c(cuts.begin() + b * 4, cuts.begin() + b * 4 + 4);
    std::sort(c.begin(), c.end());
    for (int64_t t = 0; t < T; ++t)
      seg[b * T + t] = 1 + static_cast<int32_t>(std::upper_bound(c.begin(), c.end(), t) - c.begin());
  }
  return seg;
}

void check_attention(int64_t B, int64_t T, int64_t H, int64_t D, bool segments, uint32_t seed) {
  const std::string what = fmt::format("B={} T={} H={} D={} segments={}", B, T, H, D, segments);
  const int64_t n = B * T * H * D;
  auto q = random_bf16(n, seed, -2, 2), k = random_bf16(n, seed + 1, -2, 2);
  auto v = random_bf16(n, seed + 2), dout = random_bf16(n, seed + 3);
  const auto seg_v = packed_segments(B, T, seed + 4);
  const int32_t* seg = segments ? seg_v.data() : nullptr;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  std::vector<uint16_t> o(n), dq(n), dk(n), dv(n);
  std::vector<float> lse(B * H * T);
  kern::attention_forward_bf16(q.bits.data(), k.bits.data(), v.bits.data(), seg, o.data(),
                               lse.data(), B, T, H, D, scale);
  std::vector<double> wo(n), wl(B * H * T), wdq(n), wdk(n), wdv(n);
  ref::attention_forward_bf16(q.val.data(), k.val.data(), v.val.data(), seg, wo.data(), wl.data(),
                              B, T, H, D, double(scale));
  EXPECT_TRUE(close_bf16(o, wo, {3, 0, 0.99}, what + " o"));
  EXPECT_TRUE(test::all_close(lse, wl, 0, 1e-5)) << what;
  kern::attention_backward_bf16(q.bits.data(), k.bits.data(), v.bits.data(), o.data(), lse.data(),
                                seg, dout.bits.data(), dq.data(), dk.data(), dv.data(), B, T, H, D,
                                scale);
  std::vector<double> lse_d(lse.begin(), lse.end());
  ref::attention_backward_bf16(q.val.data(), k.val.data(), v.val.data(), widen(o).data(),
                               lse_d.data(), seg, dout.val.data(), wdq.data(), wdk.data(),
                               wdv.data(), B, T, H, D, double(scale));
  EXPECT_TRUE(close_bf16(dv, wdv, {3, 1e-3, 0.99}, what + " dv"));
  EXPECT_TRUE(close_bf16(dq, wdq, {3, 1e-2, 0.99}, what + " dq"));  // sums of ds, which cancel
  EXPECT_TRUE(close_bf16(dk, wdk, {3, 1e-2, 0.99}, what + " dk"));
}

TEST(Bf16Kernels, AttentionMatchesOracle) {
  check_attention(2, 150, 2, 32, false, 10);  // blocks of 32 queries, a partial last block
  check_attention(1, 300, 3, 64, false, 20);  // key blocks past the first query chunk
  check_attention(1, 77, 2, 32, false, 25);   // odd T: p v over an odd number of keys
  check_attention(1, 100, 2, 48, false, 27);  // D not a multiple of 32: the AMX GEMM packs A
}

TEST(Bf16Kernels, AttentionWithSegmentIdsMatchesOracle) {
  check_attention(2, 150, 2, 32, true, 30);
  check_attention(1, 300, 3, 64, true, 40);
}

// A packed row's second document sees nothing of the first: its outputs match running it
// alone (to the last bits that summation over masked zeros may move).
TEST(Bf16Kernels, SegmentsIsolateDocuments) {
  const int64_t T = 96, split = 40, H = 2, D = 32, n = T * H * D;
  auto q = random_bf16(n, 50), k = random_bf16(n, 51), v = random_bf16(n, 52);
  std::vector<int32_t> seg(T, 1);
  std::fill(seg.begin() + split, seg.end(), 2);
  std::vector<uint16_t> o(n), o2((T - split) * H * D);
  std::vector<float> lse(H * T), lse2(H * (T - split));
  const int64_t off = split * H * D;
  kern::attention_forward_bf16(q.bits.data(), k.bits.data(), v.bits.data(), seg.data(), o.data(),
                               lse.data(), 1, T, H, D, 0.2f);
  kern::attention_forward_bf16(q.bits.data() + off, k.bits.data() + off, v.bits.data() + off,
                               nullptr, o2.data(), lse2.data(), 1, T - split, H, D, 0.2f);
  std::vector<uint16_t> tail(o.begin() + off, o.end());
  EXPECT_TRUE(close_bf16(tail, widen(o2), {1, 0, 0.99}, "second document"));
}

// Kernels run inline on one thread (a nested region) give the same bits as on the pool.
TEST(Bf16Kernels, SameBitsOnOneThread) {
  const int64_t N = 300, E = 256;
  auto x = random_bf16(N * E, 60), dy = random_bf16(N * E, 61);
  std::vector<float> scale(E, 1.1f), r1(N), r2(N), ds1(E), ds2(E);
  std::vector<uint16_t> y1(N * E), y2(N * E), dx1(N * E), dx2(N * E);
  auto run = [&](std::vector<uint16_t>& y, std::vector<float>& r, std::vector<uint16_t>& dx,
                 std::vector<float>& ds) {
    kern::rmsnorm_forward_bf16(x.bits.data(), scale.data(), y.data(), r.data(), N, E, 1e-5f);
    kern::rmsnorm_backward_bf16(x.bits.data(), scale.data(), r.data(), dy.bits.data(), dx.data(),
                                ds.data(), N, E);
  };
  run(y1, r1, dx1, ds1);
  test::run_single_threaded([&] { run(y2, r2, dx2, ds2); });
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(dx1, dx2);
  EXPECT_TRUE(test::bitwise_equal(ds1, ds2));
}

// The loss head on bf16 logits (cast_logits_to_fp32 fused into the loss): bitwise what the f32
// kernels give on the logits widened first, and dlogits rounded after, for the fused kernel, its
// vocab-block gradient (offset) and the vocab-parallel pieces; rows wider than one SIMD block,
// a target outside the block, and one thread or many alike.
TEST(Bf16Kernels, CrossEntropyEqualsWidenedF32Kernels) {
  const int64_t N = 37, V = 1003, offset = 500;
  auto logits = random_bf16(N * V, 70, -8.f, 8.f);
  std::vector<float> wide(N * V), dxent(N);
  kern::convert_bf16_to_f32(logits.bits.data(), wide.data(), N * V);
  std::vector<int32_t> targets(N);
  for (int64_t n = 0; n < N; ++n) {
    targets[n] = static_cast<int32_t>((n * 7919) % (V + offset));
    dxent[n] = 0.25f + 0.01f * static_cast<float>(n);
  }
  targets[3] = static_cast<int32_t>(V);  // outside [0, V): NaN loss, nothing read
  std::vector<float> xent(N), lse(N), xent_b(N), lse_b(N);
  kern::softmax_cross_entropy_forward(wide.data(), targets.data(), xent.data(), lse.data(), N, V);
  auto forward = [&] {
    kern::softmax_cross_entropy_forward_bf16(logits.bits.data(), targets.data(), xent_b.data(),
                                             lse_b.data(), N, V);
  };
  forward();
  EXPECT_TRUE(test::bitwise_equal(xent, xent_b));
  EXPECT_TRUE(test::bitwise_equal(lse, lse_b));
  EXPECT_TRUE(std::isnan(xent_b[3]));
  test::run_single_threaded(forward);
  EXPECT_TRUE(test::bitwise_equal(lse, lse_b));

  for (const int64_t off : {int64_t{0}, offset}) {
    std::vector<float> d32(N * V);
    std::vector<uint16_t> want(N * V), got(N * V);
    kern::softmax_cross_entropy_backward(wide.data(), targets.data(), lse.data(), dxent.data(),
                                         d32.data(), N, V, off);
    kern::convert_f32_to_bf16(d32.data(), want.data(), N * V);
    kern::softmax_cross_entropy_backward_bf16(logits.bits.data(), targets.data(), lse.data(),
                                              dxent.data(), got.data(), N, V, off);
    EXPECT_EQ(got, want) << "offset " << off;
  }

  std::vector<float> mx(N), mx_b(N), se(N), se_b(N), pk(N), pk_b(N);
  kern::vocab_max(wide.data(), mx.data(), N, V);
  kern::vocab_max_bf16(logits.bits.data(), mx_b.data(), N, V);
  EXPECT_TRUE(test::bitwise_equal(mx, mx_b));
  kern::vocab_stats(wide.data(), mx.data(), targets.data(), offset, se.data(), pk.data(), N, V);
  kern::vocab_stats_bf16(logits.bits.data(), mx.data(), targets.data(), offset, se_b.data(),
                         pk_b.data(), N, V);
  EXPECT_TRUE(test::bitwise_equal(se, se_b));
  EXPECT_TRUE(test::bitwise_equal(pk, pk_b));
}

}  // namespace
}  // namespace eng
