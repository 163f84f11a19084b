// tests/model/scan_test.cpp: scanned layers (scan_layers, param_scan_axis): the stacked
// layout trains bitwise like the unscanned one (same arithmetic, different layout) on one
// device and sharded; the program never holds a stacked-size temporary per layer.
#include <gtest/gtest.h>

#include <set>

#include <fmt/format.h>

#include "engine/compile/spmd.h"
#include "engine/model/llama.h"
#include "engine/train/inspect.h"
#include "engine/train/trainer.h"
#include "engine/train/config.h"
#include "engine/train/train_step.h"
#include "tests/common/tiny_config.h"
#include "tests/spmd/spmd_run.h"

namespace eng {
namespace {

constexpr int kSteps = 3;

ResolvedConfig config(bool scan, int64_t axis = 1, const std::string& remat = "full") {
  Config c = testing::tiny_llama_config(testing::spmd_model(kSteps));
  EXPECT_TRUE(c.set("scan_layers", scan).ok());
  EXPECT_TRUE(c.set("param_scan_axis", axis).ok());
  EXPECT_TRUE(c.set("remat_policy", remat).ok());
  Result<ResolvedConfig> r = resolve_config(c, 8);  // global batch 8 on every mesh
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

// The scanned run's parameters in the unscanned argument order: each stacked weight split
// into its layers' slices (slice l along `axis`).
std::vector<std::vector<float>> unstack(const Program& scanned, int64_t layers, int64_t axis,
                                        const std::vector<std::vector<float>>& params) {
  std::vector<std::vector<float>> out = {params[0]};
  for (int64_t l = 0; l < layers; ++l)
    for (size_t k = 1; k <= 9; ++k) {
      const Shape& s = scanned.value(scanned.args()[k].value).shape;
      const int64_t outer = s.prod(0, static_cast<int>(axis)), L = s[static_cast<int>(axis)];
      const int64_t inner = s.prod(static_cast<int>(axis) + 1, s.rank());
      std::vector<float> slice;
      for (int64_t o = 0; o < outer; ++o)
        slice.insert(slice.end(), params[k].begin() + (o * L + l) * inner,
                     params[k].begin() + (o * L + l + 1) * inner);
      out.push_back(std::move(slice));
    }
  for (size_t k = 10; k < params.size(); ++k) out.push_back(params[k]);
  return out;
}

struct Case {
  std::vector<std::pair<std::string, int64_t>> axes;  // empty: one device
  int64_t axis = 1;
  std::string remat = "full";
  ShardMode mode = ShardMode::kAuto;
  bool zero1 = false;  // shard_optimizer_over_data
};

std::string case_name(const Case& c) {
  std::string n;
  for (const auto& [a, s] : c.axes) n += fmt::format("{}{}_", a, s);
  return fmt::format("{}axis{}_{}_{}{}", n.empty() ? "one_device_" : n, c.axis, c.remat,
                     c.mode == ShardMode::kExplicit ? "explicit" : "auto",
                     c.zero1 ? "_zero1" : "");
}

class ScanParity : public ::testing::TestWithParam<Case> {};

// The main test: losses and updated parameters of scan_layers=true equal scan_layers=false
// bitwise, on one device and on data, fsdp and tensor meshes.
TEST_P(ScanParity, BitwiseEqualToUnscanned) {
  const Case& c = GetParam();
  Mesh mesh;
  if (!c.axes.empty()) {
    std::vector<std::string> names;
    std::vector<int64_t> sizes;
    for (const auto& [a, n] : c.axes) {
      names.push_back(a);
      sizes.push_back(n);
    }
    Result<Mesh> m = Mesh::create(names, sizes);
    ASSERT_TRUE(m.ok()) << m.status().message();
    mesh = *m;
  }
  CompileOptions opts;
  opts.shard_mode = c.mode;
  opts.shard_optimizer_over_data = c.zero1;
  const ResolvedConfig flat = config(false, c.axis, c.remat), scan = config(true, c.axis, c.remat);
  Result<testing::SpmdRun> a = testing::run_train_steps(flat, mesh, opts, kSteps);
  ASSERT_TRUE(a.ok()) << a.status().message();
  Result<testing::SpmdRun> b = testing::run_train_steps(scan, mesh, opts, kSteps);
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_EQ(a->losses.size(), b->losses.size());
  for (size_t s = 0; s < a->losses.size(); ++s)
    EXPECT_EQ(a->losses[s], b->losses[s]) << "step " << s;  // bitwise: float ==
  const Program scanned = build_train_step(scan, nullptr);
  const auto got = unstack(scanned, scan.model.num_decoder_layers, c.axis, b->params);
  ASSERT_EQ(got.size(), a->params.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), a->params[i].size()) << i;
    size_t diff = 0;
    for (size_t k = 0; k < got[i].size(); ++k) diff += got[i][k] != a->params[i][k];
    EXPECT_EQ(diff, 0u) << "parameter " << i << ": " << diff << " elements differ";
  }
  EXPECT_EQ(b->max_collective_mismatch, 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, ScanParity,
    ::testing::Values(Case{{}}, Case{{}, 0}, Case{{}, 1, "none"}, Case{{}, 1, "minimal"},
                      Case{{{"data", 2}}}, Case{{{"fsdp", 2}}}, Case{{{"tensor", 2}}},
                      Case{{{"fsdp", 4}}, 0}, Case{{{"fsdp", 2}, {"tensor", 2}}},
                      Case{{{"data", 2}, {"fsdp", 2}, {"tensor", 2}}},
                      Case{{{"fsdp", 2}, {"tensor", 2}}, 1, "full", ShardMode::kExplicit},
                      Case{{{"data", 2}, {"fsdp", 2}}, 1, "full", ShardMode::kAuto, true}),
    [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

}  // namespace
}  // namespace eng

namespace eng {
namespace {

Config llama2_7b(bool scan) {
  Config c;
  EXPECT_TRUE(c.set("model_name", std::string("llama2-7b")).ok());
  EXPECT_TRUE(c.set("per_device_batch_size", 1.0).ok());
  EXPECT_TRUE(c.set("max_target_length", int64_t{2048}).ok());
  EXPECT_TRUE(c.set("scan_layers", scan).ok());
  return c;
}

// The stacked gradients accumulate in place: every add_index_in_dim that adds into an
// accumulator writes the accumulator's own buffer, and the per-device program holds no
// more stacked-size buffers for them than the nine stacked gradients (fsdp=2).
TEST(ScanProgram, StackedGradientsAccumulateInPlace) {
  const ResolvedConfig scan = config(true);
  const Program p = build_train_step(scan, nullptr);
  const Mesh mesh = Mesh::create({"fsdp"}, {2}).value();
  auto exe = compile(p, mesh, CompileOptions{});
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  const Program& local = (*exe)->program();
  const auto& slots = (*exe)->slots();
  int adds = 0, accumulating = 0;
  for (const Instr& in : local.instrs()) {
    if (in.kind != OpKind::kAddIndexInDim) continue;
    ++adds;
    if (in.inputs.size() < 2) continue;
    ++accumulating;
    const BufferSlot& acc = slots[in.inputs[1]], &out = slots[in.outputs[0]];
    EXPECT_EQ(out.kind, BufferSlot::Kind::kTemp);
    EXPECT_EQ(out.offset, acc.offset) << "add_index_in_dim copied its accumulator";
  }
  const int64_t L = scan.model.num_decoder_layers;
  EXPECT_EQ(adds, 9 * L);
  EXPECT_EQ(accumulating, 9 * (L - 1));
  // The add_index_in_dim results live in nine buffers: one per stacked gradient.
  std::set<int64_t> stacked_offsets;
  for (const Instr& in : local.instrs())
    if (in.kind == OpKind::kAddIndexInDim) stacked_offsets.insert(slots[in.outputs[0]].offset);
  EXPECT_EQ(stacked_offsets.size(), 9u);
}

// t:shardings() on llama2-7b with scan_layers, fsdp=256 (shape-only): MaxText's paths,
// shapes, logical axes and the specs its rules give (`layers` -> stage, a size-1 axis here).
TEST(ScanShapeOnly, Llama2_7bShardingsOnFsdp256) {
  const Mesh mesh = Mesh::create({"fsdp"}, {256}).value();
  auto t = Trainer::create(llama2_7b(true), mesh, {.shape_only = true});
  ASSERT_TRUE(t.ok()) << t.status().message();
  Result<ShardingTable> tab = trainer_shardings(**t);
  ASSERT_TRUE(tab.ok()) << tab.status().message();
  const ShardingRow* wi = tab->find("params/decoder/layers/mlp/wi_0/kernel");
  ASSERT_NE(wi, nullptr);
  EXPECT_EQ(wi->shape, Shape({4096, 32, 11008}));
  EXPECT_EQ(wi->logical_string(), "('embed', 'layers', 'mlp')");
  EXPECT_EQ(wi->spec.to_string(), "P('fsdp', None, None)");
  EXPECT_EQ(wi->type, "f32[4096@fsdp,32,11008]");
  EXPECT_EQ(wi->local_shape, Shape({16, 32, 11008}));
  const ShardingRow* out = tab->find("params/decoder/layers/self_attention/out/kernel");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->shape, Shape({32, 32, 128, 4096}));
  EXPECT_EQ(out->logical_string(), "('heads', 'layers', 'kv', 'embed')");
  EXPECT_EQ(out->spec.to_string(), "P(None, None, None, 'fsdp')");
  const ShardingRow* norm = tab->find("params/decoder/layers/pre_self_attention_layer_norm/scale");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->logical_string(), "('norm', 'layers')");
  EXPECT_NE(tab->find("opt_state/mu/decoder/layers/mlp/wo/kernel"), nullptr);
  EXPECT_EQ(tab->find("params/decoder/layers_0/mlp/wi_0/kernel"), nullptr);
  // 3 + 9 params, their mu and nu, the step, six batch arrays.
  EXPECT_EQ(tab->rows.size(), 3u * 12 + 1 + 6);
}

// The `layers` rule (MaxText's ['layers', 'stage']) places the layer dim on stage when the
// mesh has one (argument placement only: training with both is refused below).
TEST(ScanShapeOnly, LayersRuleResolvesToStage) {
  Builder b("t");
  ModelConfig m = model_preset("llama-tiny").value();
  m.scan_layers = true;
  declare_llama_params(b, m);
  Program p = std::move(b).finish();
  const Mesh mesh = Mesh::create({"stage", "fsdp"}, {2, 2}).value();
  auto sh = argument_shardings(p, mesh, SpmdOptions{});
  ASSERT_TRUE(sh.ok()) << sh.status().message();
  EXPECT_EQ((*sh)[7].spec.to_string(), "P('fsdp', 'stage', None)");  // mlp/wi_0 (E, L, M)
}

// Memory of the llama2-7b plan on fsdp=256 with and without scan_layers.
TEST(ScanShapeOnly, Llama2_7bPlanMemoryMatchesUnscanned) {
  const Mesh mesh = Mesh::create({"fsdp"}, {256}).value();
  MemoryAnalysis mem[2];
  for (int scan = 0; scan < 2; ++scan) {
    auto t = Trainer::create(llama2_7b(scan == 1), mesh, {.shape_only = true});
    ASSERT_TRUE(t.ok()) << t.status().message();
    auto exe = (*t)->compile();
    ASSERT_TRUE(exe.ok()) << exe.status().message();
    mem[scan] = (*exe)->memory();
    fmt::print("[7b fsdp=256 scan_layers={}] argument {} temp {} output {} peak {} bytes\n",
               scan == 1, mem[scan].argument_bytes, mem[scan].temp_bytes,
               mem[scan].output_bytes, mem[scan].peak_bytes());
  }
  EXPECT_EQ(mem[1].argument_bytes, mem[0].argument_bytes);
  const double peak = static_cast<double>(mem[1].peak_bytes()) / mem[0].peak_bytes();
  const double temp = static_cast<double>(mem[1].temp_bytes) / mem[0].temp_bytes;
  fmt::print("scanned / unscanned: peak {:.4f}, temp {:.4f}\n", peak, temp);
  EXPECT_LT(std::abs(peak - 1), 0.05);
}

TEST(ScanConfig, PipelineStagesWithScanLayersIsAClearError) {
  Config c = testing::tiny_llama_config(testing::spmd_model(2));
  ASSERT_TRUE(c.set("scan_layers", true).ok());
  ASSERT_TRUE(c.set("ici_pipeline_parallelism", int64_t{2}).ok());
  Result<ResolvedConfig> r = resolve_config(c, 8);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("scan_layers=true with ici_pipeline_parallelism=2"),
            std::string::npos)
      << r.status().message();
  ASSERT_TRUE(c.set("scan_layers", false).ok());
  EXPECT_TRUE(resolve_config(c, 8).ok());
  ASSERT_TRUE(c.set("param_scan_axis", int64_t{2}).ok());
  r = resolve_config(c, 8);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("param_scan_axis must be 0 or 1"), std::string::npos);
}

}  // namespace
}  // namespace eng
