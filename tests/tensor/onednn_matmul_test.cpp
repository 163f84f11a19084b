// tests/tensor/onednn_matmul_test.cpp: bf16 matmul plans (onednn_matmul.h) against a float64
// product of the same bf16 values, for every transpose, output dtype, accumulation, backend.
//
// Tolerance (per element, not a blanket rtol): the bf16 inputs are exact in f32 and so are
// their products (8 + 8 significant bits < 24), so the only error before the output rounding
// is f32 summation of K (+1 when accumulating) terms: |err| <= (K+1) * 2^-24 * sum_k |a_k b_k|
// for any summation order (Higham's gamma_K bound; oneDNN and sgemm block the sum differently).
// A bf16 output is the f32 sum rounded once: within one bf16 ulp (2^-7 |c|) of the oracle's
// correctly rounded value. Both bounds are what the arithmetic allows; a wrong index or a
// missing rounding exceeds them by orders of magnitude.
#include <cmath>
#include <cpuid.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "engine/tensor/cpu_info.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/onednn_matmul.h"
#include "engine/tensor/reference.h"
#include "engine/tensor/simd.h"
#include "tests/tensor/test_util.h"

namespace eng {
namespace {

using kern::Bf16MatmulPlan;
using kern::Bf16MatmulShape;
using kern::MatmulBackend;

std::vector<uint16_t> random_bf16(int64_t n, uint32_t seed) {
  auto f = test::random_floats(n, seed);
  std::vector<uint16_t> b(n);
  for (int64_t i = 0; i < n; ++i) b[i] = f32_to_bf16(f[i]);
  return b;
}

std::vector<double> widen(const std::vector<uint16_t>& b) {
  std::vector<double> d(b.size());
  for (size_t i = 0; i < b.size(); ++i) d[i] = bf16_to_f32(b[i]);
  return d;
}

struct Case {
  int64_t M, N, K, pad;
};

// Runs one plan and checks every element against the oracle within the bounds above.
void check(const Case& c, bool ta, bool tb, DType cd, bool acc, MatmulBackend be, uint32_t seed) {
  Bf16MatmulShape s{ta, tb, c.M, c.N, c.K, (ta ? c.M : c.K) + c.pad, (tb ? c.K : c.N) + c.pad,
                    c.N + c.pad, cd, acc};
  const std::string what = fmt::format("M={} N={} K={} ta={} tb={} c={} acc={} backend={}", c.M,
                                       c.N, c.K, ta, tb, dtype_name(cd), acc, static_cast<int>(be));
  auto plan = Bf16MatmulPlan::create(s, be);
  ASSERT_TRUE(plan.ok()) << what << ": " << plan.status().message();
  auto A = random_bf16((ta ? c.K : c.M) * s.lda, seed);
  auto B = random_bf16((tb ? c.N : c.K) * s.ldb, seed + 1);
  auto Ad = widen(A), Bd = widen(B);
  std::vector<double> absA(Ad.size()), absB(Bd.size());
  for (size_t i = 0; i < Ad.size(); ++i) absA[i] = std::abs(Ad[i]);
  for (size_t i = 0; i < Bd.size(); ++i) absB[i] = std::abs(Bd[i]);
  auto C0 = random_bf16(c.M * s.ldc, seed + 2);  // old C (bf16 values, also used as f32)
  std::vector<double> want = widen(C0), bound(c.M * s.ldc, 0.0);
  ref::matmul<double>(ta, tb, c.M, c.N, c.K, 1.0, Ad.data(), s.lda, Bd.data(), s.ldb,
                      acc ? 1.0 : 0.0, want.data(), s.ldc);
  ref::matmul<double>(ta, tb, c.M, c.N, c.K, 1.0, absA.data(), s.lda, absB.data(), s.ldb, 0.0,
                      bound.data(), s.ldc);
  std::vector<float> got(c.M * s.ldc);
  if (cd == DType::kF32) {
    for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_f32(C0[i]);
    (*plan)->run(A.data(), B.data(), got.data());
  } else {
    std::vector<uint16_t> Cb = C0;
    (*plan)->run(A.data(), B.data(), Cb.data());
    for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_f32(Cb[i]);
  }
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      const int64_t i = m * s.ldc + n;
      const double old = acc ? std::abs(bf16_to_f32(C0[i])) : 0.0;
      double tol = (c.K + 1) * std::ldexp(1.0, -24) * (bound[i] + old) + 1e-30;
      double w = want[i];
      if (cd == DType::kBF16) {
        w = ref::round_bf16(w);
        tol += std::ldexp(std::abs(w), -7);
      }
      ASSERT_LE(std::abs(got[i] - w), tol) << what << " at (" << m << ", " << n << ")";
    }
  for (int64_t m = 0; m < c.M; ++m)  // padding columns are never written
    for (int64_t n = c.N; n < s.ldc; ++n)
      ASSERT_EQ(got[m * s.ldc + n], bf16_to_f32(C0[m * s.ldc + n])) << what;
}

TEST(Bf16Matmul, EveryLayoutDtypeAndBackendMatchesFloat64) {
  const Case cases[] = {{1, 1, 1, 0}, {7, 13, 5, 3}, {33, 17, 65, 0}, {200, 300, 64, 5},
                        {24, 900, 130, 1}, {64, 96, 40, 2}, {3, 5, 0, 1},
                        {300, 600, 70, 1}};  // more than one 256 x 512 block of C each way
  uint32_t seed = 11;
  for (const Case& c : cases)
    for (MatmulBackend be : {MatmulBackend::kAuto, MatmulBackend::kOnednn, MatmulBackend::kConvertSgemm,
                             MatmulBackend::kPacked, MatmulBackend::kNative, MatmulBackend::kAmx}) {
      if (be != MatmulBackend::kAuto && be != MatmulBackend::kOnednn &&
          be != MatmulBackend::kConvertSgemm &&
          !Bf16MatmulPlan::create({false, false, 1, 1, 1, 1, 1, 1}, be).ok())
        continue;  // a build or CPU without the ISA (AVX2+FMA or AVX-512F; avx512_bf16; AMX)
      if (be == MatmulBackend::kOnednn && !cpu_info().avx512()) continue;  // oneDNN 2.6: no bf16 below avx512_core
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
          for (DType cd : {DType::kF32, DType::kBF16})
            for (bool acc : {false, true}) check(c, ta, tb, cd, acc, be, seed += 3);
    }
}

// The packed GEMM (bf16 widened in its packing) over several k blocks (K > 256), several row
// tasks and column tasks, partial panels and two passes of packed columns, against float64
// within the bound that convert+sgemm (the fallback it replaced) meets: the same f32 sums up to
// order.
TEST(Bf16Matmul, PackedAcrossKBlocksTasksAndPasses) {
  if (!Bf16MatmulPlan::create({false, false, 1, 1, 1, 1, 1, 1}, MatmulBackend::kPacked).ok())
    GTEST_SKIP() << "a build without AVX2+FMA or AVX-512F";
  uint32_t seed = 101;
  for (const Case& c : {Case{100, 70, 600, 3}, Case{97, 530, 257, 0}, Case{6, 32, 1000, 1}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        check(c, ta, tb, DType::kF32, ta == tb, MatmulBackend::kPacked, seed += 3);
        check(c, ta, tb, DType::kBF16, ta != tb, MatmulBackend::kPacked, seed += 3);
      }
  check({6, 4200, 1024, 0}, false, false, DType::kF32, false, MatmulBackend::kPacked, 7);  // 2 passes
  check({6, 4200, 1024, 0}, true, true, DType::kBF16, true, MatmulBackend::kPacked, 8);
}

// The AMX GEMM: K not a multiple of its 32-k tiles (A packed), rows past a whole 32-row block
// read in place (the copied tail), several row tasks and column chunks, partial panels, and two
// passes of packed columns, against float64; and the same bits on one thread as on the pool.
TEST(Bf16Matmul, AmxAcrossTilesTasksAndPasses) {
  if (!Bf16MatmulPlan::create({false, false, 1, 1, 1, 1, 1, 1}, MatmulBackend::kAmx).ok())
    GTEST_SKIP() << "no AMX-BF16 on this CPU (or a build without avx512_bf16)";
  uint32_t seed = 201;
  for (const Case& c : {Case{100, 70, 600, 3}, Case{97, 530, 256, 0}, Case{130, 1100, 64, 2},
                        Case{6, 32, 1000, 1}, Case{33, 31, 33, 0}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        check(c, ta, tb, DType::kF32, ta == tb, MatmulBackend::kAmx, seed += 3);
        check(c, ta, tb, DType::kBF16, ta != tb, MatmulBackend::kAmx, seed += 3);
      }
  check({40, 4200, 2048, 0}, false, false, DType::kF32, false, MatmulBackend::kAmx, 7);  // 2 passes
  check({40, 4200, 2048, 0}, true, true, DType::kBF16, true, MatmulBackend::kAmx, 8);
  // Transposed A over 16 MiB packed (200 x 65536): packed in two passes of 128 rows.
  check({200, 8, 65536, 0}, true, false, DType::kF32, false, MatmulBackend::kAmx, 9);
  Bf16MatmulShape s{false, false, 200, 700, 96, 96, 700, 700};
  auto plan = Bf16MatmulPlan::create(s, MatmulBackend::kAmx);
  ASSERT_TRUE(plan.ok());
  auto A = random_bf16(200 * 96, 3), B = random_bf16(96 * 700, 4);
  std::vector<float> c1(200 * 700), c2(200 * 700);
  (*plan)->run(A.data(), B.data(), c1.data());
  test::run_single_threaded([&] { (*plan)->run(A.data(), B.data(), c2.data()); });
  EXPECT_TRUE(test::bitwise_equal(c1, c2)) << (*plan)->describe();
}

// llama-small-like shapes (tokens x embed x mlp), the ones the benchmark measures.
TEST(Bf16Matmul, ModelShapesMatchFloat64) {
  check({256, 704, 256, 0}, false, false, DType::kBF16, false, MatmulBackend::kAuto, 5);
  check({256, 256, 704, 0}, false, true, DType::kF32, false, MatmulBackend::kAuto, 6);
  check({256, 704, 512, 0}, true, false, DType::kF32, true, MatmulBackend::kAuto, 7);  // dW
}

TEST(Bf16Matmul, OnThisMachineOnednnBuildsEveryLayout) {
  if (!cpu_info().avx512()) GTEST_SKIP() << "oneDNN 2.6 has no bf16 matmul below avx512_core";
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Bf16MatmulShape s{bool(ta), bool(tb), 256, 512, 128, ta ? 256 : 128, tb ? 128 : 512, 512};
      auto plan = Bf16MatmulPlan::create(s, MatmulBackend::kOnednn);
      ASSERT_TRUE(plan.ok()) << plan.status().message();
      EXPECT_EQ((*plan)->backend(), MatmulBackend::kOnednn);
      std::printf("ta=%d tb=%d: %s\n", ta, tb, (*plan)->describe().c_str());
      EXPECT_EQ((*plan)->describe().find("ref"), std::string::npos)
          << "oneDNN picked its reference (slow) kernel: " << (*plan)->describe();
    }
}

// The split is fixed at create(): running inside a parallel region (inline, one thread) gives
// the same bits as running spread over the pool.
TEST(Bf16Matmul, SameBitsOnOneThreadAsOnThePool) {
  Bf16MatmulShape s{false, true, 512, 384, 256, 256, 256, 384};
  auto plan = Bf16MatmulPlan::create(s);
  ASSERT_TRUE(plan.ok());
  auto A = random_bf16(512 * 256, 1), B = random_bf16(384 * 256, 2);
  std::vector<float> c1(512 * 384), c2(512 * 384);
  (*plan)->run(A.data(), B.data(), c1.data());
  test::run_single_threaded([&] { (*plan)->run(A.data(), B.data(), c2.data()); });
  EXPECT_TRUE(test::bitwise_equal(c1, c2)) << (*plan)->describe();
  if (default_pool().num_threads() > 1) {
    EXPECT_GT((*plan)->parts(), 1);
  }
}

TEST(Bf16Matmul, ShapesItCannotRunAreErrors) {
  Bf16MatmulShape s{false, false, 4, 4, 4, 4, 4, 4, DType::kI32};
  auto r = Bf16MatmulPlan::create(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("output dtype i32"), std::string::npos) << r.status().message();
  s = {false, false, 4, 8, 16, 15, 8, 8};
  r = Bf16MatmulPlan::create(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("lda=15 (row 16)"), std::string::npos) << r.status().message();
  s = {false, false, -1, 8, 16, 16, 8, 8};
  EXPECT_FALSE(Bf16MatmulPlan::create(s).ok());
}

TEST(Bf16Matmul, CpuFlagMatchesCompilerAndEnvironment) {
  const char* off = std::getenv("SHARDLAB_DISABLE_AVX512_BF16");
  if (off != nullptr && *off != '\0' && std::string(off) != "0") {
    EXPECT_FALSE(kern::cpu_has_avx512_bf16());
  } else {
    EXPECT_EQ(kern::cpu_has_avx512_bf16(), __builtin_cpu_supports("avx512bf16") != 0);
  }
  // kAuto prefers the allocation-free native GEMMs wherever they can run: AMX, then vdpbf16ps.
  auto plan = Bf16MatmulPlan::create({false, false, 64, 64, 64, 64, 64, 64});
  ASSERT_TRUE(plan.ok());
  const bool amx = Bf16MatmulPlan::create({false, false, 8, 8, 8, 8, 8, 8}, MatmulBackend::kAmx).ok();
  EXPECT_EQ((*plan)->backend() == MatmulBackend::kNative || (*plan)->backend() == MatmulBackend::kAmx,
            kern::cpu_has_avx512_bf16() && ENG_AVX512)
      << (*plan)->describe();
  EXPECT_EQ((*plan)->backend() == MatmulBackend::kAmx, amx) << (*plan)->describe();
  if (amx) {
    EXPECT_TRUE(kern::cpu_has_avx512_bf16());
    EXPECT_TRUE(__builtin_cpu_supports("avx512bf16"));
  }
  // AMX is used exactly where CPUID shows AMX-TILE and AMX-BF16 (leaf 7, EDX bits 24 and 22)
  // unless an environment variable turns it off (GCC 12's __builtin_cpu_supports has no AMX).
  unsigned a = 0, b = 0, c = 0, d = 0;
  __cpuid_count(7, 0, a, b, c, d);
  const bool cpuid_amx = (d >> 22 & 1) && (d >> 24 & 1);
  const char* no_amx = std::getenv("SHARDLAB_DISABLE_AMX");
  const bool disabled = (no_amx != nullptr && *no_amx != '\0' && std::string(no_amx) != "0") ||
                        (off != nullptr && *off != '\0' && std::string(off) != "0");
#if defined(__AVX512BF16__)
  if (!disabled && kern::cpu_has_avx512_bf16()) {  // the build has the GEMM, the CPU AVX-512
    EXPECT_EQ(amx, cpuid_amx);
  }
#else
  EXPECT_FALSE(amx);  // compiled only where the build has avx512_bf16
  (void)cpuid_amx;
#endif
  if (disabled) {
    EXPECT_FALSE(amx);
  }
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  // Without avx512_bf16, the packed f32 GEMM (never convert+sgemm) where the build has the ISA.
  if ((*plan)->backend() != MatmulBackend::kNative && (*plan)->backend() != MatmulBackend::kAmx) {
    EXPECT_EQ((*plan)->backend(), MatmulBackend::kPacked) << (*plan)->describe();
  }
#else
  EXPECT_EQ((*plan)->backend(), MatmulBackend::kConvertSgemm) << (*plan)->describe();
#endif
  EXPECT_EQ(Bf16MatmulPlan::create({false, false, 8, 8, 8, 8, 8, 8}, MatmulBackend::kNative).ok(),
            (*plan)->backend() == MatmulBackend::kNative || (*plan)->backend() == MatmulBackend::kAmx);
}

}  // namespace
}  // namespace eng
