// tests/tensor/blas_test.cpp: OpenBLAS is loaded with the fast kernels whatever the environment
// presets, single-threaded, and SHARDLAB_OPENBLAS_CORETYPE can still force a core type.
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "engine/tensor/blas.h"

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

TEST(Blas, HaswellPresetIsIgnored) {
  std::string out = run_tool(
      "env -u SHARDLAB_OPENBLAS_CORETYPE OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512");
  EXPECT_NE(field(out, "core"), "");
  EXPECT_EQ(field(out, "core").find("Haswell"), std::string::npos) << out;
  EXPECT_EQ(field(out, "threads"), "1") << out;
  EXPECT_EQ(field(out, "result_ok"), "true") << out;
  EXPECT_NE(field(out, "env").find("unset OPENBLAS_CORETYPE=Haswell"), std::string::npos) << out;
  EXPECT_EQ(field(out, "coretype_after_load"), "Haswell") << "children see the user's env";
}

TEST(Blas, ShardlabCoretypeForcesTheCore) {
  std::string out = run_tool("env OPENBLAS_CORETYPE=SkylakeX SHARDLAB_OPENBLAS_CORETYPE=Haswell");
  EXPECT_EQ(field(out, "core"), "Haswell") << out;
  EXPECT_EQ(field(out, "result_ok"), "true") << out;
}

TEST(Blas, InfoInProcess) {
  const BlasInfo& info = blas_info();
  EXPECT_FALSE(info.core.empty());
  EXPECT_NE(info.config.find("OpenBLAS"), std::string::npos) << info.config;
  EXPECT_EQ(info.num_threads, 1);
}

}  // namespace
}  // namespace eng
