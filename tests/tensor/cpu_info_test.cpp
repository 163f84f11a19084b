// tests/tensor/cpu_info_test.cpp: the OpenBLAS core chosen from CPU features (pure, on made-up
// CPUs), the loaded core against that table on this machine, and the FMA peak's arithmetic.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "engine/tensor/blas.h"
#include "engine/tensor/cpu_info.h"
#include "engine/tensor/onednn_matmul.h"
#include "engine/tensor/simd.h"
#include "engine/tensor/system_info.h"

namespace eng {
namespace {

CpuInfo sse_cpu() {
  CpuInfo c;
  c.vendor = "GenuineIntel", c.model_name = "old", c.sse3 = true;
  return c;
}
CpuInfo avx2_cpu(const char* vendor) {
  CpuInfo c = sse_cpu();
  c.vendor = vendor, c.avx = c.avx2 = c.fma = c.f16c = true;
  return c;
}
CpuInfo avx512_cpu(bool bf16) {
  CpuInfo c = avx2_cpu("GenuineIntel");
  c.family = 6, c.model = 207;
  c.avx512f = c.avx512bw = c.avx512vl = c.avx512dq = true;
  c.avx512_bf16 = bf16;
  return c;
}

TEST(CpuInfo, BestCoreFollowsTheFeaturesNotTheModel) {
  EXPECT_EQ(best_openblas_core(sse_cpu()), "Prescott");
  EXPECT_EQ(best_openblas_core(avx2_cpu("GenuineIntel")), "Haswell");
  EXPECT_EQ(best_openblas_core(avx2_cpu("AuthenticAMD")), "Zen");
  EXPECT_EQ(best_openblas_core(avx512_cpu(false)), "SkylakeX");  // model 207: OpenBLAS says Prescott
  EXPECT_EQ(best_openblas_core(avx512_cpu(true)), "Cooperlake");
  CpuInfo partial = avx512_cpu(false);
  partial.avx512bw = false;  // AVX-512F alone (Knights Landing): not enough for SkylakeX
  EXPECT_EQ(best_openblas_core(partial), "Haswell");
}

TEST(CpuInfo, UserCoreKeptWhenAtLeastAsStrong) {
  Result<CoreChoice> c = choose_openblas_core(avx2_cpu("AuthenticAMD"), "Haswell", nullptr);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->core, "Haswell");  // same strength as Zen
  EXPECT_FALSE(c->replaced_env);
  c = choose_openblas_core(avx512_cpu(true), "cooperlake", "");  // OpenBLAS ignores case
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->core, "Cooperlake");
}

TEST(CpuInfo, WeakerOrUnknownOrUnrunnableUserCoreReplaced) {
  Result<CoreChoice> c = choose_openblas_core(avx512_cpu(false), "Haswell", nullptr);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->core, "SkylakeX");
  EXPECT_TRUE(c->replaced_env);
  EXPECT_NE(c->note.find("OPENBLAS_CORETYPE=Haswell replaced by SkylakeX"), std::string::npos) << c->note;
  c = choose_openblas_core(avx2_cpu("GenuineIntel"), "SkylakeX", nullptr);  // would die of SIGILL
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->core, "Haswell");
  EXPECT_TRUE(c->replaced_env);
  c = choose_openblas_core(avx2_cpu("GenuineIntel"), "Bogus", nullptr);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->core, "Haswell");
  EXPECT_NE(c->note.find("not an OpenBLAS core type"), std::string::npos) << c->note;
}

TEST(CpuInfo, ShardlabCoretypeWinsAndBadValuesAreErrors) {
  Result<CoreChoice> c = choose_openblas_core(avx512_cpu(true), "Cooperlake", "prescott");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->core, "Prescott");  // weaker, but asked for by name
  c = choose_openblas_core(avx512_cpu(true), nullptr, "Skylake");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("SHARDLAB_OPENBLAS_CORETYPE=Skylake"), std::string::npos);
  EXPECT_NE(c.status().message().find("accepted: Katmai"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("SkylakeX, Cooperlake"), std::string::npos);
  c = choose_openblas_core(avx2_cpu("AuthenticAMD"), nullptr, "SkylakeX");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("AVX-512"), std::string::npos) << c.status().message();
}

// The loaded core is as strong as the detection's own table says this CPU allows (holds on any
// machine: a failure means OpenBLAS runs slower kernels than this CPU can).
TEST(CpuInfo, LoadedCoreIsTheStrongestThisCpuRuns) {
  const BlasInfo& info = blas_info();
  const OpenblasCore* loaded = find_openblas_core(info.core);
  ASSERT_NE(loaded, nullptr) << "OpenBLAS reports a core outside the table: " << info.core;
  const OpenblasCore* best = find_openblas_core(best_openblas_core(cpu_info()));
  ASSERT_NE(best, nullptr);
  if (std::getenv("SHARDLAB_OPENBLAS_CORETYPE") == nullptr) {
    EXPECT_GE(loaded->strength, best->strength)
        << "loaded " << info.core << ", CPU " << cpu_info().model_name << " (" << cpu_info().flags()
        << ") runs " << best->name << "; " << info.env_note;
    EXPECT_FALSE(info.weaker_than_cpu);
  }
  EXPECT_TRUE(loaded->runs_on(cpu_info()));
}

TEST(CpuInfo, PeakArithmetic) {
  CpuInfo zen3 = avx2_cpu("AuthenticAMD");
  zen3.family = 25, zen3.model = 1;
  EXPECT_EQ(fp32_flops_per_cycle(zen3, 3), 32);  // 2 FMA x 8 lanes x 2
  CpuInfo zen4 = avx512_cpu(true);
  zen4.vendor = "AuthenticAMD", zen4.family = 25, zen4.model = 0x11;
  EXPECT_EQ(fp32_flops_per_cycle(zen4, 5), 32);  // 512-bit FMAs in two halves
  EXPECT_EQ(fp32_flops_per_cycle(avx512_cpu(false), 4), 64);
  EXPECT_EQ(fp32_flops_per_cycle(sse_cpu(), 1), 8);
  const double ghz = measure_clock_ghz(0.01);
  EXPECT_GT(ghz, 0.3);
  EXPECT_LT(ghz, 8.0);
}

// The dispatch says which path each kernel took, and it is the one this build and CPU allow.
TEST(SystemInfo, NamesThePathsThisBuildRuns) {
  std::map<std::string, std::string> info;
  for (const auto& [k, v] : system_info()) info[k] = v;
  std::printf("%s", system_info_text().c_str());
  for (const char* k : {"cpu", "cpu_flags", "blas_core", "blas_best", "blas_env", "simd",
                        "matmul_f32", "matmul_bf16", "attention_bf16"})
    EXPECT_FALSE(info[k].empty()) << k;
  EXPECT_EQ(info["simd"], ENG_AVX512 ? "avx512" : ENG_AVX2 ? "avx2" : "scalar");
  EXPECT_EQ(info["blas_core"], blas_info().core);
  const std::string bf16 = info["matmul_bf16"];
#if defined(__AVX512BF16__)
  const bool native = kern::cpu_has_avx512_bf16();
#else
  const bool native = false;
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  EXPECT_EQ(bf16.rfind(native ? "native" : "packed", 0), 0u) << bf16;
#else
  EXPECT_FALSE(native);
  EXPECT_EQ(bf16, "convert+sgemm");
#endif
}

}  // namespace
}  // namespace eng
