// tests/tensor/blas_test.cpp: OpenBLAS is loaded with the fast kernels whatever the environment
// presets (a weaker OPENBLAS_CORETYPE is replaced), single-threaded, and
// SHARDLAB_OPENBLAS_CORETYPE can still force a core type (an unknown one is an error).
#include <cmath>
#include <cstdio>
#include <vector>
#include <string>

#include <gtest/gtest.h>

#include "engine/tensor/blas.h"
#include "engine/tensor/cpu_info.h"
#include "engine/tensor/reference.h"
#include "tests/tensor/test_util.h"

namespace eng {
namespace {

// Runs the helper under `env_prefix` (an `env ...` command prefix) and returns its stdout.
std::string run_tool(const std::string& env_prefix) {
  std::string cmd = env_prefix + " '" SHARDLAB_BLAS_INFO_TOOL "'";
  FILE* f = popen(cmd.c_str(), "r");
  EXPECT_NE(f, nullptr) << cmd;
  if (f == nullptr) return "";
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, f) != nullptr) out += buf;
  EXPECT_EQ(pclose(f), 0) << cmd;
  return out;
}

std::string field(const std::string& out, const std::string& key) {
  size_t at = out.find(key + "=");
  if (at == std::string::npos) return "";
  size_t end = out.find('\n', at);
  return out.substr(at + key.size() + 1, end - at - key.size() - 1);
}

// A preset weaker than the CPU's best (Prescott, weaker than anything with AVX) is replaced by
// the best core; OPENBLAS_L2_SIZE is dropped; children still see the user's environment.
TEST(Blas, WeakerPresetIsReplaced) {
  const std::string best(best_openblas_core(cpu_info()));
  if (best == "Prescott") GTEST_SKIP() << "this CPU's best core is Prescott";
  std::string out = run_tool(
      "env -u SHARDLAB_OPENBLAS_CORETYPE OPENBLAS_CORETYPE=Prescott OPENBLAS_L2_SIZE=512");
  EXPECT_EQ(field(out, "chosen"), best) << out;
  EXPECT_EQ(field(out, "core"), best) << out;
  EXPECT_EQ(field(out, "threads"), "1") << out;
  EXPECT_EQ(field(out, "result_ok"), "true") << out;
  EXPECT_NE(field(out, "env").find("OPENBLAS_CORETYPE=Prescott replaced by " + best),
            std::string::npos) << out;
  EXPECT_NE(field(out, "env").find("unset OPENBLAS_L2_SIZE=512"), std::string::npos) << out;
  EXPECT_EQ(field(out, "coretype_after_load"), "Prescott") << "children see the user's env";
}

// The machines' Haswell preset: kept where Haswell is as strong as the CPU's best (AVX2 CPUs),
// replaced on AVX-512 ones.
TEST(Blas, HaswellPresetKeptOnlyWhenAsStrong) {
  const OpenblasCore* best = find_openblas_core(best_openblas_core(cpu_info()));
  if (!find_openblas_core("Haswell")->runs_on(cpu_info())) GTEST_SKIP() << "no AVX2 here";
  std::string out = run_tool("env -u SHARDLAB_OPENBLAS_CORETYPE OPENBLAS_CORETYPE=Haswell");
  EXPECT_EQ(field(out, "core"), best->strength > 3 ? std::string(best->name) : "Haswell") << out;
}

TEST(Blas, UnknownShardlabCoretypeIsAnError) {
  std::string cmd = "env SHARDLAB_OPENBLAS_CORETYPE=Skylake '" SHARDLAB_BLAS_INFO_TOOL "' 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, f) != nullptr) out += buf;
  EXPECT_NE(pclose(f), 0) << out;
  EXPECT_NE(out.find("SHARDLAB_OPENBLAS_CORETYPE=Skylake: not an OpenBLAS 0.3.21 core type; "
                     "accepted: Katmai"), std::string::npos) << out;
}

TEST(Blas, ShardlabCoretypeForcesTheCore) {
  std::string out = run_tool("env OPENBLAS_CORETYPE=Haswell SHARDLAB_OPENBLAS_CORETYPE=Nehalem");
  EXPECT_EQ(field(out, "core"), "Nehalem") << out;
  EXPECT_EQ(field(out, "result_ok"), "true") << out;
}

// blas::sgemm on small shapes, every transpose, alpha and beta, against the float64 reference:
// among them the NN shapes it runs itself on SkylakeX/Cooperlake (columns mod 16 in 1-8,
// K >= 32, at most 10^6 products) instead of OpenBLAS's small-matrix kernel, which mallocs.
TEST(Blas, SmallProductsMatchTheReference) {
  const auto a = test::random_floats(400 * 80, 1), b = test::random_floats(400 * 80, 2);
  const auto c0 = test::random_floats(80 * 80, 3);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int64_t M : {1, 5, 17})
        for (int64_t N : {1, 4, 8, 24, 300})
          for (int64_t K : {3, 32, 70})
            for (float beta : {0.f, 0.5f}) {
              const int64_t lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3;
              std::vector<float> c(c0.begin(), c0.begin() + M * ldc);
              std::vector<double> ad(a.begin(), a.end()), bd(b.begin(), b.end());
              std::vector<double> want(c.begin(), c.end());
              blas::sgemm(ta, tb, M, N, K, 0.75f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
              ref::matmul<double>(ta, tb, M, N, K, 0.75, ad.data(), lda, bd.data(), ldb, beta,
                                  want.data(), ldc);
              for (int64_t m = 0; m < M; ++m)
                for (int64_t n = 0; n < N; ++n)
                  ASSERT_NEAR(c[m * ldc + n], want[m * ldc + n], 1e-4 * (1 + std::abs(want[m * ldc + n])))
                      << "ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N << " K=" << K
                      << " beta=" << beta;
            }
}

TEST(Blas, InfoInProcess) {
  const BlasInfo& info = blas_info();
  EXPECT_FALSE(info.core.empty());
  EXPECT_NE(info.config.find("OpenBLAS"), std::string::npos) << info.config;
  EXPECT_EQ(info.num_threads, 1);
}

}  // namespace
}  // namespace eng
