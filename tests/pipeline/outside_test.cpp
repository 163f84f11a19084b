// tests/pipeline/outside_test.cpp: pipeline_parallel_layers P < num_decoder_layers L, as
// MaxText's decoders.py runs it: the first P layers in the pipeline (R = P / (S x lps)), the
// other L - P after it as scanned layers (params/decoder/layers_outside_pipeline/...) with
// `stage` acting as data for their activations. 5 training steps on stage = 2, 3 and 4, R = 1,
// 2 and 3, alone and with data, fsdp, tensor and ZeRO-1, with delay, ag_once and
// ag_per_repeat, auto and explicit: losses and final params equal the sequential one-device
// run (1e-6 relative); the global program's loss and gradient norm equal the sequential
// program's in the double-precision interpreter; the layers after the pipeline run on
// 1/(data x fsdp x stage) of the rows; bad input names both numbers.
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
constexpr int64_t kLayers = 8, kBatch = 8;

struct Outside {  // what a case sets beyond the tiny model (8 layers, batch 8)
  int64_t stages = 1, layers = -1, microbatches = -1, per_stage = 1;  // layers: P
  bool delay = false, ag_once = false, ag_per_repeat = false;
};

Config tiny(const Outside& s) {
  Config c = testing::tiny_llama_config({.model_name = "llama-tiny",
                                         .emb_dim = 16,
                                         .query_heads = 2,
                                         .kv_heads = 2,
                                         .head_dim = 8,
                                         .mlp_dim = 32,
                                         .layers = kLayers,
                                         .vocab_size = 128,
                                         .seq = 8,
                                         .per_device_batch = 1.0,
                                         .learning_rate = 1e-3,
                                         .steps = kSteps,
                                         .warmup_steps_fraction = 0.2,
                                         .adam_eps = 1e-4});
  auto set = [&](const char* key, const auto& v) { EXPECT_TRUE(c.set(key, v).ok()) << key; };
  set("dtype", "float32");  // pinned: the bfloat16 default rounds
  set("weight_dtype", "float32");
  set("ici_pipeline_parallelism", s.stages);
  if (s.stages == 1) set("scan_layers", false);  // the sequential reference: layers_<l>
  if (s.layers != -1) set("pipeline_parallel_layers", s.layers);
  if (s.microbatches > 0) set("num_pipeline_microbatches", s.microbatches);
  set("num_layers_per_pipeline_stage", s.per_stage);
  if (s.delay) set("pipeline_delay_activation_forwarding", true);
  if (s.ag_once) set("pipeline_fsdp_ag_once", true);
  if (s.ag_per_repeat) set("pipeline_fsdp_ag_per_repeat", true);
  return c;
}

const testing::TrainRun& sequential() {
  static const testing::TrainRun r = [] {
    Result<testing::TrainRun> x = testing::train_one_device(tiny({}), kBatch, kSteps);
    EXPECT_TRUE(x.ok()) << x.status().message();
    return x.ok() ? std::move(*x) : testing::TrainRun{};
  }();
  return r;
}

struct Case {
  std::vector<std::string> axes;
  std::vector<int64_t> sizes;
  Outside shape;
  bool zero1 = false;
};

int64_t size_of(const Case& c, const std::string& axis) {
  return testing::axis_size(c.axes, c.sizes, axis);
}

// The per-device batch rows of the rope outputs of the layers after the pipeline (the ropes
// of no pipeline iteration), or -1 when the program has none.
int64_t outside_rope_rows(const Program& p, int& count) {
  int64_t rows = -1;
  count = 0;
  for (const Instr& in : p.instrs()) {
    if (in.kind != OpKind::kRope || in.outputs.empty()) continue;
    const ValueInfo& v = p.value(in.outputs[0]);
    if (v.pipeline_iteration >= 0) continue;
    if (rows != -1) {
      EXPECT_EQ(v.shape[0], rows);
    }
    rows = v.shape[0];
    ++count;
  }
  return rows;
}

class LayersOutside : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(LayersOutside, EqualsSequentialOneDevice) {
  const auto& [c, explicit_mode] = GetParam();
  const testing::TrainRun& ref = sequential();
  ASSERT_EQ(ref.losses.size(), static_cast<size_t>(kSteps));
  Outside shape = c.shape;
  shape.stages = size_of(c, "stage");
  const Config config = tiny(shape);
  Result<ResolvedConfig> cfg = resolve_config(config, kBatch);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  const Mesh mesh = *Mesh::create(c.axes, c.sizes);
  Result<testing::TrainRun> r =
      testing::train_in_mode(config, *cfg, mesh, explicit_mode, c.zero1, kSteps);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const testing::RunDiff d = testing::compare_runs(*r, ref);
  const PipelineSchedule sch = pipeline_schedule(cfg->model);
  fmt::print("[outside] {} P={} R={} M={} lps={} d={}{}{}{} {}: loss rel {:.2e}, param rel "
             "{:.2e}\n",
             mesh.to_string(), cfg->model.pipelined_layers(), sch.shape().repeats,
             sch.shape().microbatches, sch.shape().layers_per_stage, sch.shape().delay,
             c.shape.ag_once ? " ag_once" : "", c.shape.ag_per_repeat ? " ag_per_repeat" : "",
             c.zero1 ? " zero1" : "", explicit_mode ? "explicit" : "auto", d.loss_rel,
             d.param_rel);
  EXPECT_EQ(cfg->model.pipelined_layers(), c.shape.layers);
  EXPECT_EQ(sch.shape().repeats * shape.stages * sch.shape().layers_per_stage, c.shape.layers);
  EXPECT_LT(d.loss_rel, 1e-6);
  EXPECT_GE(d.param_rel, 0) << "param sets differ";
  EXPECT_LT(d.param_rel, 1e-6);
  EXPECT_LT(r->collective_mismatch, 1e-9);
  EXPECT_GT(ref.losses.front(), ref.losses.back());

  // `stage` acts as data after the pipeline: each device runs those layers on its own
  // 1/(data x fsdp x stage) of the rows, not on the rows of every stage.
  int ropes = 0;
  const int64_t rows = outside_rope_rows(r->exe->program(), ropes);
  EXPECT_EQ(ropes, 2 * 3 * (kLayers - c.shape.layers))  // q and k: forward, remat, backward
      << "rope ops of the layers after the pipeline";
  EXPECT_EQ(rows, kBatch / (size_of(c, "data") * size_of(c, "fsdp") * shape.stages));
  EXPECT_EQ(pipeline_schedule(cfg->model).shape().delay, c.shape.delay ? 2 : 1);
}

const Outside kP4R1{.layers = 4, .per_stage = 2};     // S = 2: lps 2, R = 1
const Outside kP4R2{.layers = 4};                     // S = 2: lps 1, R = 2
const Outside kP6R3M4{.layers = 6, .microbatches = 4};  // S = 2: R = 3, circ storage
const Outside kP4S4{.layers = 4};                     // S = 4: lps 1, R = 1
const Outside kP4Delay{.layers = 4, .delay = true};   // S = 2: R = 2, d = 2, M = 4
const Outside kP4Once{.layers = 4, .ag_once = true};  // with fsdp: R = 2, gathered once
const Outside kP4PerRepeat{.layers = 4, .ag_per_repeat = true};

INSTANTIATE_TEST_SUITE_P(
    Meshes, LayersOutside,
    ::testing::Combine(::testing::Values(Case{{"stage"}, {2}, kP4R1}, Case{{"stage"}, {2}, kP4R2},
                                         Case{{"stage"}, {2}, kP6R3M4},
                                         Case{{"stage"}, {4}, kP4S4},
                                         Case{{"data", "stage"}, {2, 2}, kP4R2},
                                         Case{{"stage", "fsdp"}, {2, 2}, kP4R1},
                                         Case{{"stage", "fsdp"}, {2, 2}, kP4R2},
                                         Case{{"stage"}, {2}, kP4Delay},
                                         Case{{"stage", "fsdp"}, {2, 2}, kP4Once},
                                         Case{{"stage", "fsdp"}, {2, 2}, kP4PerRepeat},
                                         Case{{"stage", "tensor"}, {2, 2}, kP4R2},
                                         Case{{"data", "stage"}, {2, 2}, kP4R2, true}),
                       ::testing::Bool()));

// Only P must divide by the stages (MaxText checks P, not L): 8 layers on 3 stages with
// P = 6 (R = 2), batch 6, against the sequential run of the same batch.
TEST(LayersOutsideThreeStages, StagesNeedNotDivideAllLayers) {
  constexpr int64_t kDevices = 6;  // per_device_batch 1: global batch 6, 3 microbatches
  Result<testing::TrainRun> want = testing::train_one_device(tiny({}), kDevices, kSteps);
  ASSERT_TRUE(want.ok()) << want.status().message();
  const Config config = tiny({.stages = 3, .layers = 6});
  Result<ResolvedConfig> cfg = resolve_config(config, kDevices);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->model.pipeline_repeats, 2);
  for (const bool explicit_mode : {false, true}) {
    Result<testing::TrainRun> r = testing::train_in_mode(
        config, *cfg, *Mesh::create({"stage"}, {3}), explicit_mode, false, kSteps);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const testing::RunDiff d = testing::compare_runs(*r, *want);
    fmt::print("[outside] stage=3 L=8 P=6 R=2 {}: loss rel {:.2e}, param rel {:.2e}\n",
               explicit_mode ? "explicit" : "auto", d.loss_rel, d.param_rel);
    EXPECT_LT(d.loss_rel, 1e-6);
    EXPECT_GE(d.param_rel, 0) << "param sets differ";
    EXPECT_LT(d.param_rel, 1e-6);
    int ropes = 0;
    EXPECT_EQ(outside_rope_rows(r->exe->program(), ropes), kDevices / 3);
    EXPECT_EQ(ropes, 2 * 3 * 2);
  }
}

// In the double-precision reference interpreter, P < L programs give the sequential
// program's loss and raw gradient norm.
TEST(LayersOutsideInterpreter, GlobalProgramEqualsSequential) {
  const std::vector<double> seq = testing::interpreter_metrics(tiny({}));
  ASSERT_EQ(seq.size(), 2u);
  for (const Outside& s : {Outside{2, 4, -1, 2}, Outside{2, 4}, Outside{4, 4}, Outside{2, 6, 4}}) {
    const std::vector<double> pipe = testing::interpreter_metrics(tiny(s));
    ASSERT_EQ(pipe.size(), 2u);
    EXPECT_NEAR(pipe[0], seq[0], 1e-9 * seq[0]) << "S=" << s.stages << " P=" << s.layers;
    EXPECT_NEAR(pipe[1], seq[1], 1e-9 * seq[1]) << "S=" << s.stages << " P=" << s.layers;
  }
}

// MaxText's layout: the pipeline's stack holds P layers; the L - P others are one weight per
// kind under params/decoder/layers_outside_pipeline/ with the layer dim at param_scan_axis
// named "layers_outside_pipeline" (no rule: unsharded), replicated over `stage`.
TEST(LayersOutsideLayout, MaxTextsNamesAndShardings) {
  const Config config = tiny({.stages = 2, .layers = 4, .per_stage = 2});
  Result<ResolvedConfig> cfg = resolve_config(config, kBatch);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  TrainStepLayout layout;
  const Program p = build_train_step(*cfg, &layout);
  const Mesh mesh = *Mesh::create({"stage", "fsdp"}, {2, 2});
  Result<CompileOptions> o = compile_options_from_config(config);
  ASSERT_TRUE(o.ok()) << o.status().message();
  auto exe = compile(p, mesh, *o);
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  int outside = 0, pipelined = 0;
  for (int i = 0; i < layout.num_params; ++i) {
    const ValueInfo& v = p.value(p.args()[i].value);
    const std::string spec = (*exe)->argument_sharding(i).spec.to_string();
    if (auto sub = outside_pipeline_subpath(v.name)) {
      ++outside;
      EXPECT_EQ(v.shape[1], kLayers - 4) << v.name;  // param_scan_axis 1
      EXPECT_EQ(v.logical[1], kLayersOutsidePipeline) << v.name;
      EXPECT_EQ(spec.find("stage"), std::string::npos) << v.name << " " << spec;
      if (*sub == "mlp/wi_0/kernel") {
        EXPECT_EQ(spec, "P('fsdp', None, None)");
      }
    } else if (pipeline_param_subpath(v.name)) {
      ++pipelined;
      EXPECT_EQ(v.shape[0] * v.shape[1], 4) << v.name;  // (S, lps): P layers
      EXPECT_NE(spec.find("stage"), std::string::npos) << v.name << " " << spec;
    }
  }
  EXPECT_EQ(outside, 9);
  EXPECT_EQ(pipelined, 9);
  // The outside weights are replicated over `stage` and their activations split over it, so
  // their gradients are reduced over `stage` (with fsdp: reduce-scattered over fsdp too): the
  // plan reduces more over `stage` than the all-pipelined plan of the same model and mesh
  // (whose `stage` collectives are permutes and the loss head's reductions).
  const auto& bytes = (*exe)->cost().collective_bytes;
  for (const auto& [axes, n] : bytes) fmt::print("[outside cost] {}: {} bytes\n", axes, n);
  auto reduced_over_stage = [](const Executable& e) {
    int64_t n = 0;
    for (const Instr& in : e.program().instrs()) {
      const auto& axes = in.attrs.mesh_axes;
      if ((in.kind == OpKind::kAllReduce || in.kind == OpKind::kReduceScatter) &&
          std::find(axes.begin(), axes.end(), "stage") != axes.end())
        n += e.program().value(in.inputs[0]).bytes();
    }
    return n;
  };
  const Config all_config = tiny({.stages = 2, .per_stage = 2});
  Result<ResolvedConfig> all_cfg = resolve_config(all_config, kBatch);
  ASSERT_TRUE(all_cfg.ok()) << all_cfg.status().message();
  TrainStepLayout all_layout;
  auto all = compile(build_train_step(*all_cfg, &all_layout), mesh,
                     *compile_options_from_config(all_config));
  ASSERT_TRUE(all.ok()) << all.status().message();
  fmt::print("[outside cost] reduced over stage: P = 4 {} bytes, P = L {} bytes\n",
             reduced_over_stage(**exe), reduced_over_stage(**all));
  EXPECT_GT(reduced_over_stage(**exe), reduced_over_stage(**all));
  // MaxText's logical_axis_rules_pp_act_as_dp: `stage` just before `data`, nowhere else.
  const LogicalAxisRules& rules = o->rules;
  auto axes = [&](const std::string& name) {
    for (const LogicalAxisRule& r : rules.rules())
      if (r.logical == name) return r.mesh_axes;
    return std::vector<std::string>{"<none>"};
  };
  EXPECT_EQ(axes(pp_act_as_dp_name("activation_batch")),
            (std::vector<std::string>{"stage", "data", "fsdp", "fsdp_transpose", "expert"}));
  EXPECT_EQ(axes(pp_act_as_dp_name("layers")), std::vector<std::string>{});
  EXPECT_EQ(axes(pp_act_as_dp_name("activation_embed")), axes("activation_embed"));
}

TEST(LayersOutsideErrors, BadInputNamesBothNumbers) {
  auto has = [&](const Config& c, const std::string& want) {
    Result<ResolvedConfig> r = resolve_config(c, kBatch);
    const std::string e = r.ok() ? std::string("(no error)") : std::string(r.status().message());
    EXPECT_NE(e.find(want), std::string::npos) << e;
  };
  has(tiny({.stages = 2, .layers = 9}),
      "pipeline_parallel_layers 9 is more than the 8 decoder layers");
  has(tiny({.stages = 2, .layers = 0}),
      "pipeline_parallel_layers must be a positive number of layers <= num_decoder_layers 8 "
      "(or -1: all), got 0");
  has(tiny({.stages = 2, .layers = -3}), "num_decoder_layers 8 (or -1: all), got -3");
  has(tiny({.stages = 2, .layers = 5}),
      "pipeline_parallel_layers 5 is not divisible by the 2 pipeline stages");
  has(tiny({.stages = 2, .layers = 4, .per_stage = 4}),
      "num_layers_per_pipeline_stage 4 x 2 stages does not divide pipeline_parallel_layers 4");
  Config c = tiny({.stages = 2, .layers = 4});
  ASSERT_TRUE(c.set("num_pipeline_repeats", int64_t{3}).ok());
  has(c, "num_pipeline_repeats 3 x 2 pipeline stages does not divide pipeline_parallel_layers 4");
  ASSERT_TRUE(c.set("num_pipeline_repeats", int64_t{1}).ok());
  has(c,
      "num_pipeline_repeats 1 disagrees with pipeline_parallel_layers 4 / "
      "(num_layers_per_pipeline_stage 1 x 2 stages) = 2 repeats");
  c = tiny({.stages = 2, .layers = 4});
  ASSERT_TRUE(c.set("scan_layers", false).ok());
  has(c, "pipeline_parallel_layers 4 < num_decoder_layers 8 runs the other layers scanned");
  // The ones that are fine: all layers (P = L) and P < L with scan_layers=true set.
  c = tiny({.stages = 2, .layers = 8});
  EXPECT_TRUE(resolve_config(c, kBatch).ok());
  c = tiny({.stages = 2, .layers = 4});
  ASSERT_TRUE(c.set("scan_layers", true).ok());
  Result<ResolvedConfig> r = resolve_config(c, kBatch);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model.pipelined_layers(), 4);
  EXPECT_EQ(r->model.pipeline_repeats, 2);
}

}  // namespace
}  // namespace eng
