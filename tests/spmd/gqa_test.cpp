// tests/spmd/gqa_test.cpp: grouped-query attention under SPMD. A small GQA llama (4 query
// heads over 2 kv heads) trains, and its sharded runs (tensor=2: the kv heads split like the
// query heads; data=2; fsdp x tensor; the pipeline over stage=2) equal the one-device run
// within 1e-5, in auto and explicit mode; more tensor shards than kv heads is JAX's indivisible-argument error. And
// MaxText's llama2-70b (64 query heads, 8 kv heads) compiles shape-only on 256 devices (fsdp, fsdp x tensor=8)
// with its per-device memory and collective bytes; its parameter count is MaxText's.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "engine/compile/executable.h"
#include "engine/train/config.h"
#include "engine/train/train_step.h"
#include "tests/common/tiny_config.h"
#include "tests/spmd/spmd_run.h"

namespace eng {
namespace {

constexpr int kSteps = 4;

// The spmd matrix's model (matrix_test.cpp) with 2 kv heads for its 4 query heads.
// stages > 1: MaxText's pipeline over `stage` (its body is the same decoder layer).
ResolvedConfig gqa_config(int64_t stages = 1, int64_t microbatches = 1) {
  testing::TinyLlama model = testing::spmd_model(kSteps);
  model.kv_heads = 2;
  Config c = testing::tiny_llama_config(model);
  if (stages > 1) {
    EXPECT_TRUE(c.set("ici_pipeline_parallelism", stages).ok());
    EXPECT_TRUE(c.set("num_pipeline_microbatches", microbatches).ok());
  }
  Result<ResolvedConfig> r = resolve_config(c, 8);  // global batch 8 on every mesh
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

struct GqaRun : testing::SpmdRun {
  std::string program_text;
};

Result<GqaRun> train(const Mesh& mesh, const CompileOptions& opts,
                     const ResolvedConfig& cfg = gqa_config()) {
  GqaRun run;
  auto keep_text = [&](const Program& p, const Executable&, Runtime&, const std::vector<Array>&,
                       const std::vector<Array>&) { run.program_text = p.to_text(); };
  ENG_ASSIGN_OR_RETURN(static_cast<testing::SpmdRun&>(run),
                       testing::run_train_steps(cfg, mesh, opts, kSteps, keep_text));
  return run;
}

const GqaRun& reference() {
  static const GqaRun r = [] {
    Result<GqaRun> x = train(Mesh(), CompileOptions{});
    EXPECT_TRUE(x.ok()) << x.status().message();
    return x.ok() ? *x : GqaRun{};
  }();
  return r;
}

TEST(Gqa, OneDeviceTrainsWithRepeatedKvHeads) {
  const GqaRun& ref = reference();
  ASSERT_EQ(ref.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_GT(ref.losses.front(), ref.losses.back());
  EXPECT_NE(ref.program_text.find("repeat_kv[repeats=2]"), std::string::npos);
  EXPECT_NE(ref.program_text.find("repeat_kv_grad[repeats=2]"), std::string::npos);
}

struct Case {
  std::vector<std::string> axes;
  std::vector<int64_t> sizes;
};

class GqaMatrix : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(GqaMatrix, EqualsOneDevice) {
  const auto& [c, explicit_mode] = GetParam();
  const GqaRun& ref = reference();
  ASSERT_EQ(ref.losses.size(), static_cast<size_t>(kSteps));
  Mesh mesh = *Mesh::create(c.axes, c.sizes);
  CompileOptions o;
  o.shard_mode = explicit_mode ? ShardMode::kExplicit : ShardMode::kAuto;
  Result<GqaRun> r = train(mesh, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const double loss_rel = testing::max_loss_rel(r->losses, ref.losses);
  ASSERT_EQ(r->params.size(), ref.params.size());
  const double param_rel = testing::max_param_rel(r->params, ref.params);
  fmt::print("[gqa] {} {}: loss rel {:.2e}, param rel {:.2e}, losses {:.5f}..{:.5f}\n",
             mesh.to_string(), explicit_mode ? "explicit" : "auto", loss_rel, param_rel,
             r->losses.front(), r->losses.back());
  EXPECT_LT(loss_rel, 1e-5);
  EXPECT_LT(param_rel, 1e-5);
  EXPECT_EQ(r->max_collective_mismatch, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, GqaMatrix,
    ::testing::Combine(::testing::Values(Case{{"tensor"}, {2}}, Case{{"data"}, {2}},
                                         Case{{"fsdp", "tensor"}, {2, 2}}),
                       ::testing::Bool()));

// The pipeline body (trace_decoder_layer under vmap) with GQA: stage=2, 2 microbatches; the
// losses equal the sequential one-device run (the weights are stacked per stage there).
TEST(Gqa, PipelineStage2EqualsOneDevice) {
  const GqaRun& ref = reference();
  ASSERT_EQ(ref.losses.size(), static_cast<size_t>(kSteps));
  Result<GqaRun> r = train(*Mesh::create({"stage"}, {2}), CompileOptions{}, gqa_config(2, 2));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NE(r->program_text.find("repeat_kv[vmap=2 repeats=2]"), std::string::npos);
  const double loss_rel = testing::max_loss_rel(r->losses, ref.losses);
  fmt::print("[gqa] pipeline stage=2 M=2: loss rel {:.2e}\n", loss_rel);
  EXPECT_LT(loss_rel, 1e-5);
  EXPECT_EQ(r->max_collective_mismatch, 0);
}

// kv_heads -> tensor (MaxText rule 22) on 2 kv heads over tensor=4: the key kernel's dim 1
// is not divisible, as pjit would report for MaxText (kv heads must be divisible by tensor).
TEST(Gqa, MoreTensorShardsThanKvHeadsIsAnError) {
  Result<GqaRun> r = train(*Mesh::create({"tensor"}, {4}), CompileOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("self_attention/key/kernel"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("not divisible by 4"), std::string::npos)
      << r.status().message();
}

TEST(Gqa, Llama2_70bParameterCountIsMaxTexts) {
  Result<ModelConfig> m = model_preset("llama2-70b");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->num_query_heads, 64);
  EXPECT_EQ(m->num_kv_heads, 8);
  EXPECT_TRUE(m->validate().ok());
  // Per layer: 2 norms (2E) + query and out (2 E H D) + key and value (2 E Hkv D) + the
  // gated MLP (3 E M) = 855,654,400; x 80 layers, + embedding and logits (2 V E) + the final
  // norm (E) = 68,976,648,192: MaxText's llama2-70b (68.98B; "70B").
  EXPECT_EQ(m->num_params(), int64_t{68976648192});
  EXPECT_NEAR(static_cast<double>(m->num_params()) / 1e9, 68.98, 0.1);
}

TEST(ShapeOnly, Llama2_70bOn256Devices) {
  Config c;
  ASSERT_TRUE(c.set("model_name", "llama2-70b").ok());
  ASSERT_TRUE(c.set("per_device_batch_size", 1.0).ok());
  Result<ResolvedConfig> r = resolve_config(c, 256);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model.num_kv_heads, 8);
  TrainStepLayout layout;
  const Program p = build_train_step(*r, &layout);
  for (auto [fsdp, tensor] : {std::pair<int64_t, int64_t>{256, 1}, {32, 8}}) {
    const Mesh mesh = *Mesh::create({"data", "fsdp", "tensor"}, {1, fsdp, tensor});
    Result<testing::ShapeOnlyCompile> exe = testing::compile_shape_only(p, mesh, "70b");
    ASSERT_TRUE(exe.ok()) << exe.status().message();
    const auto& mem = exe->exe->memory();
    EXPECT_LT(exe->secs, 30.0);
    // 68.98B params x 3 (param, mu, nu) x 4 bytes / 256 devices ~ 3.0 GiB of state per device.
    EXPECT_GT(mem.argument_bytes, int64_t{3} << 30);
    EXPECT_LT(mem.argument_bytes, int64_t{4} << 30);
    EXPECT_GT(exe->exe->cost().collective_bytes.at("fsdp"), 0);
    if (tensor > 1) {
      EXPECT_GT(exe->exe->cost().collective_bytes.at("tensor"), 0);
    }
  }
}

}  // namespace
}  // namespace eng
