// tests/pipeline/circular_test.cpp: circular pipelines (num_pipeline_repeats R
// = 2) and delayed activation forwarding (d = 2) at the acceptance standard: 5
// training steps on stage = 2 and 4, M = S and 2S, alone and with data, fsdp,
// tensor and ZeRO-1, in auto and explicit mode, equal the sequential one-device
// run in losses and final params (1e-6 relative); the global program's loss and
// gradient norm equal the sequential program's in the double-precision
// reference interpreter; the program's permutes are the schedule's; bad
// pipeline input is a clear error naming both numbers.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/compile/spmd.h"
#include "engine/ir/interpret.h"
#include "tests/common/tiny_config.h"
#include "tests/pipeline/pipeline_run.h"

namespace eng {
namespace {

constexpr int kSteps = 5;

struct Shape8 {  // what a case sets beyond the tiny model (8 layers, batch 8)
  int64_t stages = 1, microbatches = -1, repeats = -1;
  bool delay = false;
  const char* gather = nullptr;  // pipeline_fsdp_ag_once or _per_repeat
};

Config tiny(const Shape8& s) {
  Config c = testing::tiny_llama_config({.model_name = "llama-tiny",
                                         .emb_dim = 16,
                                         .query_heads = 2,
                                         .kv_heads = 2,
                                         .head_dim = 8,
                                         .mlp_dim = 32,
                                         .layers = 8,
                                         .vocab_size = 128,
                                         .seq = 8,
                                         .per_device_batch = 1.0,
                                         .learning_rate = 1e-3,
                                         .steps = kSteps,
                                         .warmup_steps_fraction = 0.2,
                                         .adam_eps = 1e-4});
  EXPECT_TRUE(c.set("dtype", "float32").ok());  // pinned: bfloat16 may become the default
  EXPECT_TRUE(c.set("weight_dtype", "float32").ok());
  auto set = [&](const char* key, const auto& v) { EXPECT_TRUE(c.set(key, v).ok()) << key; };
  set("ici_pipeline_parallelism", s.stages);
  EXPECT_TRUE(testing::pin_pipeline_repeats(c).ok());
  if (s.stages == 1) set("scan_layers", false);  // the sequential reference: layers_<l>
  if (s.microbatches > 0) set("num_pipeline_microbatches", s.microbatches);
  if (s.repeats > 0) set("num_pipeline_repeats", s.repeats);
  if (s.delay) set("pipeline_delay_activation_forwarding", true);
  if (s.gather != nullptr) set(s.gather, true);
  return c;
}

const testing::TrainRun& sequential() {
  static const testing::TrainRun r = [] {
    Result<testing::TrainRun> x = testing::train_one_device(tiny({}), 8, kSteps);
    EXPECT_TRUE(x.ok()) << x.status().message();
    return x.ok() ? std::move(*x) : testing::TrainRun{};
  }();
  return r;
}

struct Case {
  std::vector<std::string> axes;
  std::vector<int64_t> sizes;
  Shape8 shape;
  bool zero1 = false;
};

int64_t size_of(const Case& c, const std::string& axis) {
  return testing::axis_size(c.axes, c.sizes, axis);
}

class Circular : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(Circular, EqualsSequentialOneDevice) {
  const auto& [c, explicit_mode] = GetParam();
  const testing::TrainRun& ref = sequential();
  ASSERT_EQ(ref.losses.size(), static_cast<size_t>(kSteps));
  Shape8 shape = c.shape;
  shape.stages = size_of(c, "stage");
  const Config config = tiny(shape);
  Result<ResolvedConfig> cfg = resolve_config(config, 8);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  const Mesh mesh = *Mesh::create(c.axes, c.sizes);
  Result<testing::TrainRun> r =
      testing::train_in_mode(config, *cfg, mesh, explicit_mode, c.zero1, kSteps);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const testing::RunDiff d = testing::compare_runs(*r, ref);
  const PipelineSchedule sch = pipeline_schedule(cfg->model);
  fmt::print("[circular] {} R={} M={} d={} {}{}: loss rel {:.2e}, param rel {:.2e}\n",
             mesh.to_string(), sch.shape().repeats, sch.shape().microbatches, sch.shape().delay,
             explicit_mode ? "explicit" : "auto", c.zero1 ? " zero1" : "", d.loss_rel, d.param_rel);
  EXPECT_LT(d.loss_rel, 1e-6);
  EXPECT_GE(d.param_rel, 0) << "param sets differ";
  EXPECT_LT(d.param_rel, 1e-6);
  EXPECT_LT(r->collective_mismatch, 1e-9);
  EXPECT_GT(ref.losses.front(), ref.losses.back());

  // The schedule's permutes along `stage`: forward one shift per iteration from
  // d on, plus one S-1 -> 0 move per (microbatch, repeat boundary) and one S-1 ->
  // owner move per finished microbatch; as many transposed in the backward; per
  // microbatch, its input placed on stage 0 and its cotangent sent to the S stages.
  const int64_t M = sch.shape().microbatches, R = sch.shape().repeats;
  int permutes = 0;
  for (const Instr& in : r->exe->program().instrs())
    if (in.kind == OpKind::kCollectivePermute) {
      EXPECT_EQ(in.attrs.mesh_axes, std::vector<std::string>{"stage"});
      ++permutes;
    }
  EXPECT_EQ(permutes, 2 * ((sch.iterations() - sch.shape().delay) + M * (R - 1) + M) +
                         (1 + sch.shape().stages) * M);
}

const Shape8 kS2R2M2{.microbatches = 2, .repeats = 2};
const Shape8 kS2R2M4{.microbatches = 4, .repeats = 2};
const Shape8 kS4R2M4{.microbatches = 4, .repeats = 2};
const Shape8 kS4R2M8{.microbatches = 8, .repeats = 2};
const Shape8 kR2Delay{.repeats = 2, .delay = true};  // M = 2S by default with delay
const Shape8 kR1Delay{.delay = true};
// Gathered weights with delay (M = 2S, so two repeat patterns per boundary): the stages select
// from their repeats' gathered layers.
const Shape8 kR2DelayOnce{.repeats = 2, .delay = true, .gather = "pipeline_fsdp_ag_once"};
const Shape8 kR2DelayPerRepeat{.repeats = 2, .delay = true, .gather = "pipeline_fsdp_ag_per_repeat"};

INSTANTIATE_TEST_SUITE_P(
    Meshes, Circular,
    ::testing::Combine(
        ::testing::Values(Case{{"stage"}, {2}, kS2R2M2}, Case{{"stage"}, {2}, kS2R2M4},
                          Case{{"stage"}, {4}, kS4R2M4}, Case{{"stage"}, {4}, kS4R2M8},
                          Case{{"stage"}, {2}, kR2Delay}, Case{{"stage"}, {4}, kR2Delay},
                          Case{{"stage"}, {2}, kR1Delay}, Case{{"data", "stage"}, {2, 2}, kS2R2M4},
                          Case{{"stage", "fsdp"}, {2, 2}, kR2Delay},
                          Case{{"stage", "fsdp"}, {2, 2}, kR2DelayOnce},
                          Case{{"stage", "fsdp"}, {2, 2}, kR2DelayPerRepeat},
                          Case{{"stage", "tensor"}, {2, 2}, kS2R2M2},
                          Case{{"data", "stage"}, {2, 2}, kS2R2M4, true}),
        ::testing::Bool()));

// In the double-precision reference interpreter, circular and delayed programs give the
// sequential program's loss and raw gradient norm.
TEST(CircularInterpreter, GlobalProgramEqualsSequential) {
  const std::vector<double> seq = testing::interpreter_metrics(tiny({}));
  ASSERT_EQ(seq.size(), 2u);
  for (const Shape8& s : {Shape8{4, 4, 2}, Shape8{2, 4, 2}, Shape8{4, 8, 2, true}}) {
    const std::vector<double> pipe = testing::interpreter_metrics(tiny(s));
    ASSERT_EQ(pipe.size(), 2u);
    EXPECT_NEAR(pipe[0], seq[0], 1e-9 * seq[0]) << "S=" << s.stages << " M=" << s.microbatches;
    EXPECT_NEAR(pipe[1], seq[1], 1e-9 * seq[1]) << "S=" << s.stages << " M=" << s.microbatches;
  }
}

// Each stage selects its current repeat's weights locally (index_per_row, as MaxText's
// per-stage dynamic slice): a circular pipeline moves no weight over `stage`, so everything
// it gathers or reduces over `stage` other than permutes, in bytes, is what the R = 1
// pipeline of the same model and microbatches moves (the count differs: scalar reductions;
// docs/sharding.md has the bytes the concat it replaced moved).
TEST(CircularWeights, RepeatSelectionMovesNoWeightOverStage) {
  struct NonPermute {
    int count = 0;
    double bytes = 0;
  };
  auto over_stage = [](const Shape8& s, const Mesh& mesh, int& selects) {
    Result<ResolvedConfig> cfg = resolve_config(tiny(s), 8);
    EXPECT_TRUE(cfg.ok()) << cfg.status().message();
    TrainStepLayout layout;
    const Program g = build_train_step(*cfg, &layout);
    selects = 0;
    for (const Instr& in : g.instrs())
      selects += in.kind == OpKind::kIndexPerRow || in.kind == OpKind::kAddIndexPerRow;
    auto exe = compile(g, mesh, CompileOptions{});
    EXPECT_TRUE(exe.ok()) << exe.status().message();
    NonPermute n;
    if (!exe.ok()) return n;
    const Program& p = (*exe)->program();
    for (const Instr& in : p.instrs()) {
      const auto& axes = in.attrs.mesh_axes;
      if (!is_collective(in.kind) || in.kind == OpKind::kCollectivePermute ||
          std::find(axes.begin(), axes.end(), "stage") == axes.end())
        continue;
      ++n.count;
      n.bytes += collective_bytes_received(p, in);
    }
    return n;
  };
  for (int64_t S : {2, 4}) {
    const Mesh mesh = *Mesh::create({"stage"}, {S});
    int selects1 = 0, selects2 = 0;
    const NonPermute r1 = over_stage({S, 2 * S, 1}, mesh, selects1);
    const NonPermute r2 = over_stage({S, 2 * S, 2}, mesh, selects2);
    EXPECT_EQ(selects1, 0);
    EXPECT_GT(selects2, 0) << "S=" << S;  // the repeat-boundary iterations select per stage
    EXPECT_DOUBLE_EQ(r2.bytes, r1.bytes) << "S=" << S;
    fmt::print("[circular weights] S={} M={}: non-permute collectives over stage R=1 {} ({} "
               "bytes), R=2 {} ({} bytes); per-row selects {}\n",
               S, 2 * S, r1.count, r1.bytes, r2.count, r2.bytes, selects2);
  }
}

// The circular layout: (R, S, lps, ...) with the repeats dim unsharded and the
// stages on `stage`, so each device holds its stage's layers of every repeat
// (1/S of them).
TEST(CircularLayout, RepeatsStagesLayersPerStage) {
  Result<ResolvedConfig> cfg = resolve_config(tiny({2, 2, 2}), 8);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  TrainStepLayout layout;
  const Program p = build_train_step(*cfg, &layout);
  const ValueInfo& wo = p.value(p.args()[3].value);  // params/decoder/layers/<sub>
  ASSERT_TRUE(pipeline_param_subpath(wo.name)) << wo.name;
  EXPECT_EQ(wo.shape[0], 2);  // R
  EXPECT_EQ(wo.shape[1], 2);  // S
  EXPECT_EQ(wo.shape[2], 2);  // lps = 8 / (2 x 2)
  EXPECT_EQ(wo.logical[0], "circular_repeats");
  EXPECT_EQ(wo.logical[1], "layers");
  EXPECT_EQ(pipeline_layer_dims(wo), 3);
}

// MaxText's defaults (base.yml num_layers_per_pipeline_stage 1, num_pipeline_repeats -1;
// types.py derives R = pipeline_parallel_layers / (stages x layers per stage)): a pipeline
// with no pipeline keys is circular with R = L / S and one layer per stage.
TEST(CircularDefaults, MaxTextsDefaultIsCircular) {
  Config c = tiny({});
  ASSERT_TRUE(c.set("num_layers_per_pipeline_stage", int64_t{1}).ok());  // the default again
  const Config defaults;
  EXPECT_EQ(defaults.get_int("num_layers_per_pipeline_stage"), 1);
  EXPECT_EQ(defaults.get_int("num_pipeline_repeats"), -1);
  for (int64_t S : {2, 4}) {
    ASSERT_TRUE(c.set("ici_pipeline_parallelism", S).ok());
    Result<ResolvedConfig> r = resolve_config(c, 8);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->model.pipeline_repeats, 8 / S) << "S=" << S;
    EXPECT_EQ(pipeline_schedule(r->model).shape().layers_per_stage, 1) << "S=" << S;
  }
}

TEST(CircularErrors, BadInputNamesBothNumbers) {
  auto err = [](const Config& c) {
    Result<ResolvedConfig> r = resolve_config(c, 8);
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  auto has = [&](const Config& c, const std::string& want) {
    const std::string e = err(c);
    EXPECT_NE(e.find(want), std::string::npos) << e;
  };
  has(tiny({.stages = 2, .repeats = 3}),
      "num_pipeline_repeats 3 x 2 pipeline stages does not divide "
      "num_decoder_layers 8");
  has(tiny({.stages = 4, .microbatches = 2, .repeats = 2}),
      "num_pipeline_microbatches 2 is not divisible by the 4 pipeline stages");
  has(tiny({.stages = 4, .microbatches = 4, .delay = true}),
      "num_pipeline_microbatches >= 2 x 4 stages, got 4");
  Config c = tiny({.stages = 2, .repeats = 2});
  ASSERT_TRUE(c.set("num_layers_per_pipeline_stage", int64_t{1}).ok());
  has(c,
      "num_pipeline_repeats 2 disagrees with num_decoder_layers 8 / "
      "(num_layers_per_pipeline_stage 1 x 2 stages) = 4 repeats");
  c = tiny({.stages = 2});
  ASSERT_TRUE(c.set("ici_fsdp_parallelism", int64_t{1}).ok());
  ASSERT_TRUE(c.set("pipeline_fsdp_ag_once", true).ok());
  has(c,
      "pipeline_fsdp_ag_once=true gathers the stage weights over fsdp, but "
      "ici_fsdp_parallelism 1 x ici_fsdp_transpose_parallelism 1 = 1 device");
  c = tiny({.stages = 2});
  ASSERT_TRUE(c.set("pipeline_fsdp_ag_once", true).ok());
  ASSERT_TRUE(c.set("pipeline_fsdp_ag_per_repeat", true).ok());
  has(c, "exclusive");
}

}  // namespace
}  // namespace eng
