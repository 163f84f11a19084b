// tests/remat/remat_test.cpp: remat policies (engine/ir/remat.h) and the temp-memory options
// (docs/memory.md): for every policy x mesh the compiler's peak per device equals what each
// simulated device measured; losses and parameters are bitwise equal across policies; temp
// bytes shrink none -> minimal -> full; the rematerialised program evaluates (reference
// interpreter) bitwise like the traced one; use_iota_embed falls back to the gather above
// its byte threshold.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "engine/compile/executable.h"
#include "engine/ir/interpret.h"
#include "engine/ir/remat.h"
#include "engine/runtime/executor.h"
#include "engine/runtime/runtime.h"
#include "engine/train/config.h"
#include "engine/train/data.h"
#include "engine/train/train_step.h"
#include "tests/common/tiny_config.h"
#include "tests/common/train_state.h"

namespace eng {
namespace {

constexpr int kSteps = 3;
const char* const kSaveNames = "decoder_layer_input,query_proj,key_proj,value_proj,out_proj";
const char* const kOffloadNames = "decoder_layer_input,query_proj,key_proj,value_proj";

Config small(int64_t layers, int64_t seq) {
  return testing::tiny_llama_config({.model_name = "llama-tiny",
                                     .emb_dim = 32,
                                     .query_heads = 2,
                                     .kv_heads = 2,
                                     .head_dim = 16,
                                     .mlp_dim = 64,
                                     .layers = layers,
                                     .vocab_size = 64,
                                     .seq = seq,
                                     .per_device_batch = 2.0,
                                     .learning_rate = 1e-3,
                                     .steps = kSteps,
                                     .adam_eps = 1e-4});
}

ResolvedConfig resolved(Config c, const std::string& policy, int64_t devices = 2) {
  EXPECT_TRUE(c.set("remat_policy", policy).ok());
  if (policy == "save_only_these_names") {
    EXPECT_TRUE(c.set("remat_save_names", kSaveNames).ok());
  }
  if (policy == "custom") {  // MaxText's recipes: the layer input and q/k/v offloaded
    EXPECT_TRUE(c.set("remat_save_names", "out_proj").ok());
    EXPECT_TRUE(c.set("remat_offload_names", kOffloadNames).ok());
  }
  Result<ResolvedConfig> r = resolve_config(c, devices);  // global batch 4 on every mesh
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

struct TrainRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> params;
  MemoryAnalysis memory;
  std::vector<int64_t> device_peaks;
  int64_t widen_bytes = 0;  // the executor's bf16 widening scratch per device
};

Result<TrainRun> train(const ResolvedConfig& cfg, const Mesh& mesh) {
  TrainStepLayout layout;
  Program p = build_train_step(cfg, &layout);
  ENG_ASSIGN_OR_RETURN(std::shared_ptr<const Executable> exe, compile(p, mesh, CompileOptions{}));
  Runtime rt(mesh);
  ENG_ASSIGN_OR_RETURN(std::vector<Array> state, testing::init_train_state(p, *exe, cfg, rt));
  ENG_RETURN_IF_ERROR(rt.prepare(*exe));
  ENG_ASSIGN_OR_RETURN(auto data, make_data_source(cfg));
  HostBatch batch;
  TrainRun run;
  std::vector<Array> outputs;
  const std::vector<Array*> args = testing::arg_pointers(state);
  for (int step = 0; step < kSteps; ++step) {
    data->next(batch);
    ENG_RETURN_IF_ERROR(testing::write_batch(rt, batch, layout, state));
    ENG_RETURN_IF_ERROR(rt.execute(*exe, args, outputs));
    float loss = 0;
    ENG_RETURN_IF_ERROR(rt.fetch(outputs[0], &loss));
    run.losses.push_back(loss);
  }
  run.memory = exe->memory();
  run.widen_bytes = widen_scratch_bytes(exe->program());
  for (int d = 0; d < rt.num_devices(); ++d) run.device_peaks.push_back(rt.device(d).peak_bytes());
  ENG_ASSIGN_OR_RETURN(run.params, testing::fetch_params(rt, p, layout, state));
  return run;
}

struct MeshCase {
  const char* name;
  std::vector<std::string> axes;
  std::vector<int64_t> sizes;
};

const MeshCase kMeshes[] = {
    {"one", {}, {}}, {"data2", {"data"}, {2}}, {"fsdp2", {"fsdp"}, {2}}, {"tensor2", {"tensor"}, {2}}};
const char* const kPolicies[] = {"none", "minimal", "full", "save_only_these_names",
                                 "qkv_proj_offloaded", "custom"};

Mesh make_mesh(const MeshCase& m) { return m.axes.empty() ? Mesh() : *Mesh::create(m.axes, m.sizes); }

class PolicyByMesh : public ::testing::TestWithParam<MeshCase> {};

TEST_P(PolicyByMesh, PlannedPeakEqualsMeasuredAndLossesAreBitwiseEqual) {
  const MeshCase& mc = GetParam();
  const Mesh mesh = make_mesh(mc);
  std::vector<TrainRun> runs;
  for (const char* policy : kPolicies) {
    Config f32 = small(2, 16);
    ASSERT_TRUE(f32.set("dtype", "float32").ok());  // bf16 adds the widening scratch (below)
    Result<TrainRun> r = train(resolved(f32, policy), mesh);
    ASSERT_TRUE(r.ok()) << policy << ": " << r.status().message();
    fmt::print("[remat] {} {}: temp {} peak {} B/device, losses {:.6f}..{:.6f}\n", mc.name, policy,
               r->memory.temp_bytes, r->memory.peak_bytes(), r->losses.front(), r->losses.back());
    // Offloaded values live in the host region after the arena: process memory here too.
    for (size_t d = 0; d < r->device_peaks.size(); ++d)
      EXPECT_EQ(r->device_peaks[d], r->memory.peak_bytes() + r->memory.host_temp_bytes)
          << policy << " device " << d;
    EXPECT_EQ(r->memory.host_temp_bytes > 0, std::string(policy).find("offload") != std::string::npos ||
                                                 std::string(policy) == "custom")
        << policy;
    runs.push_back(std::move(*r));
  }
  for (size_t k = 1; k < runs.size(); ++k) {
    EXPECT_EQ(runs[k].losses, runs[0].losses) << kPolicies[k] << " vs none";  // bitwise
    EXPECT_EQ(runs[k].params, runs[0].params) << kPolicies[k] << " vs none";
  }
  EXPECT_GT(runs[0].losses.front(), runs[0].losses.back());  // it trains
}

INSTANTIATE_TEST_SUITE_P(Meshes, PolicyByMesh, ::testing::ValuesIn(kMeshes),
                         [](const auto& info) { return std::string(info.param.name); });

// With bf16 (dtype's default) each device also holds the executor's widening scratch (f32
// copies for ops with only an f32 kernel, docs/precision.md), allocated when the executable
// is prepared and not part of the compiler's temps: measured = planned peak + that scratch.
TEST(RematBf16, MeasuredPeakIsPlannedPeakPlusWideningScratch) {
  for (const MeshCase& mc : kMeshes) {
    Result<TrainRun> r = train(resolved(small(2, 16), "full"), make_mesh(mc));
    ASSERT_TRUE(r.ok()) << mc.name << ": " << r.status().message();
    EXPECT_GT(r->widen_bytes, 0) << mc.name;
    for (size_t d = 0; d < r->device_peaks.size(); ++d)
      EXPECT_EQ(r->device_peaks[d], r->memory.peak_bytes() + r->widen_bytes)
          << mc.name << " device " << d;
    EXPECT_GT(r->losses.front(), r->losses.back()) << mc.name;
  }
}

int64_t temp_bytes(const std::string& policy, int64_t layers) {
  Program p = build_train_step(resolved(small(layers, 64), policy, 1), nullptr);
  auto exe = compile(p, Mesh(), CompileOptions{});
  EXPECT_TRUE(exe.ok()) << exe.status().message();
  return exe.ok() ? (*exe)->memory().temp_bytes : 0;
}

// Activations dominate (T=64, 6 layers): every policy saves strictly less than the previous.
TEST(Remat, TempBytesShrinkFromNoneToMinimalToFull) {
  const int64_t none = temp_bytes("none", 6), minimal = temp_bytes("minimal", 6),
                full = temp_bytes("full", 6);
  fmt::print("[remat] temp bytes, 6 layers: none {} minimal {} full {}\n", none, minimal, full);
  EXPECT_GT(none, minimal);
  EXPECT_GT(minimal, full);
  // The saving grows with depth: full keeps one layer's activations, none keeps all.
  EXPECT_GT(temp_bytes("none", 6) - temp_bytes("none", 3), temp_bytes("full", 6) - temp_bytes("full", 3));
}

std::vector<HostTensor> host_args(const Program& p, const ResolvedConfig& cfg) {
  std::vector<HostTensor> args;
  uint64_t seed = 1;
  for (const Argument& a : p.args()) {
    const ValueInfo& v = p.value(a.value);
    HostTensor t{v.shape, v.dtype, std::vector<double>(v.shape.numel())};
    std::vector<float> f(v.shape.numel());
    if (a.role == ArgRole::kParam) init_param(v, cfg.init_weights_seed, f.data());
    for (int64_t i = 0; i < v.shape.numel(); ++i) {
      if (a.role == ArgRole::kParam) t.data[i] = f[i];
      else if (a.role == ArgRole::kOptNu) t.data[i] = 1e-4;
      else if (a.role == ArgRole::kBatch) {
        if (v.name.find("position") != std::string::npos) t.data[i] = static_cast<double>(i % v.shape.dim(-1));
        else if (v.name.find("segmentation") != std::string::npos) t.data[i] = 1;
        else t.data[i] = static_cast<double>((seed = seed * 6364136223846793005ULL + 1) >> 58);
      }
    }
    args.push_back(std::move(t));
  }
  return args;
}

// Recomputation re-emits the same ops on the same inputs: the reference interpreter gives
// bitwise the same outputs (updated params, optimizer state, loss, grad norm) as without
// remat, so the gradient checks of tests/ir (finite differences) carry over.
TEST(Remat, RematerialisedProgramInterpretsLikeTheTracedOne) {
  const ResolvedConfig none = resolved(small(2, 8), "none", 1);
  Program traced = build_train_step(none, nullptr);
  auto want = interpret(traced, host_args(traced, none));
  ASSERT_TRUE(want.ok()) << want.status().message();
  for (const char* policy : {"minimal", "full", "save_only_these_names", "save_qkv_proj",
                             "qkv_proj_offloaded", "minimal_offloaded", "custom"}) {
    const ResolvedConfig cfg = resolved(small(2, 8), policy, 1);
    Program p = build_train_step(cfg, nullptr);
    EXPECT_GT(p.instrs().size(), traced.instrs().size()) << policy;  // something recomputed
    auto got = interpret(p, host_args(p, cfg));
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_EQ(got->size(), want->size());
    for (size_t j = 0; j < want->size(); ++j)
      EXPECT_EQ((*got)[j].data, (*want)[j].data) << policy << " output " << p.outputs()[j].name;
  }
}

TEST(Remat, NonePolicyRebuildsTheSameProgram) {
  Program traced = build_train_step(resolved(small(2, 8), "none", 1), nullptr);
  RematPolicy keep = *remat_policy("none", "");
  RematStats stats;
  Program same = rematerialize(traced, 0, keep, &stats);
  EXPECT_EQ(same.to_text(), traced.to_text());
  EXPECT_EQ(same.fingerprint(), traced.fingerprint());
  EXPECT_EQ(stats.recomputed_instrs, 0);
}

TEST(Remat, FullRecomputesEachLayerAndTempsSayRemat) {
  Program p = build_train_step(resolved(small(2, 64), "full", 1), nullptr);
  int recomputed = 0;
  for (const ValueInfo& v : p.values()) recomputed += v.recomputed;
  EXPECT_GT(recomputed, 0);
  auto exe = compile(p, Mesh(), CompileOptions{});
  ASSERT_TRUE(exe.ok());
  bool any_remat = false;
  for (const TempInfo& t : (*exe)->largest_temps(-1)) {
    const std::string d = producer_description((*exe)->program(), t.value);
    if (d.size() > 8 && d.substr(d.size() - 8) == " (remat)") any_remat = true;
  }
  EXPECT_TRUE(any_remat);
  // The sharded per-device program keeps the attribution.
  auto sharded = compile(p, *Mesh::create({"fsdp"}, {2}), CompileOptions{});
  ASSERT_TRUE(sharded.ok()) << sharded.status().message();
  int local_recomputed = 0;
  for (const ValueInfo& v : (*sharded)->program().values()) local_recomputed += v.recomputed;
  EXPECT_GT(local_recomputed, 0);
}

int count_op(const Program& p, OpKind k) {
  int n = 0;
  for (const Instr& in : p.instrs()) n += in.kind == k;
  return n;
}

struct Compiled {
  Program program;
  MemoryAnalysis memory;
  int64_t moved_to_host_bytes = 0;  // the kMoveToHost inputs' bytes
};

Compiled compiled(const std::string& policy, int64_t layers) {
  const ResolvedConfig cfg = resolved(small(layers, 64), policy, 1);
  Program p = build_train_step(cfg, nullptr);
  auto exe = compile(p, Mesh(), CompileOptions{});
  EXPECT_TRUE(exe.ok()) << exe.status().message();
  Compiled c{p, exe.ok() ? (*exe)->memory() : MemoryAnalysis{}};
  for (const Instr& in : p.instrs())
    if (in.kind == OpKind::kMoveToHost) c.moved_to_host_bytes += p.value(in.inputs[0]).bytes();
  return c;
}

// Host offload (jax's save_and_offload_only_these_names): each offloaded value is copied to
// host memory after its producer and back before its first backward reader; on the device it
// lives like a recomputed value, not like a saved one, and the host arena holds every layer's.
TEST(Remat, OffloadedValuesLeaveTheDeviceForTheHostArena) {
  const int64_t layers = 6;
  const Compiled off = compiled("qkv_proj_offloaded", layers);
  const Compiled saved = compiled("save_qkv_proj", layers);
  const Compiled full = compiled("full", layers);
  fmt::print("[remat] 6 layers: temp full {} save_qkv_proj {} qkv_proj_offloaded {} (+ host {})\n",
             full.memory.temp_bytes, saved.memory.temp_bytes, off.memory.temp_bytes,
             off.memory.host_temp_bytes);
  EXPECT_EQ(count_op(off.program, OpKind::kMoveToHost), 3 * layers);  // q, k, v per layer
  EXPECT_EQ(count_op(off.program, OpKind::kMoveToDevice), 3 * layers);
  EXPECT_EQ(count_op(saved.program, OpKind::kMoveToHost), 0);
  EXPECT_LT(off.memory.temp_bytes, saved.memory.temp_bytes);
  EXPECT_EQ(saved.memory.host_temp_bytes, 0);
  // q, k, v: (B=2, T=64, H=2, D=16) bf16 each; every layer's are on the host at the turn.
  const int64_t per_layer = 3 * 2 * 64 * 2 * 16 * 2;
  EXPECT_EQ(off.moved_to_host_bytes, per_layer * layers);
  EXPECT_EQ(off.memory.host_temp_bytes, per_layer * layers);  // 64-byte multiples: no padding
  EXPECT_EQ(off.memory.peak_bytes(),
            off.memory.argument_bytes + off.memory.output_bytes + off.memory.temp_bytes -
                off.memory.alias_bytes);  // host bytes are not in the device peak
  // The layer input offloaded too (MaxText's custom decoder_layer_input: 'offload').
  const Compiled custom = compiled("custom", layers);
  EXPECT_EQ(count_op(custom.program, OpKind::kMoveToHost), 4 * layers);
  EXPECT_GT(custom.memory.host_temp_bytes, off.memory.host_temp_bytes);
  EXPECT_NE(custom.memory.to_string().find("Estimated host temp size"), std::string::npos);
}

TEST(Remat, OffloadErrorsNameTheNames) {
  auto other_policy = remat_policy("full", "", "query_proj");  // read by custom alone
  ASSERT_TRUE(other_policy.ok());
  EXPECT_TRUE(other_policy->offload_names.empty());
  auto both = remat_policy("custom", "query_proj,out_proj", "query_proj");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("'query_proj' is both saved"), std::string::npos)
      << both.status().message();
  auto unknown = remat_policy("custom", "", "qkv");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("remat_offload_names: unknown checkpoint name 'qkv'"),
            std::string::npos)
      << unknown.status().message();
  auto named = remat_policy("minimal_offloaded", "");
  ASSERT_TRUE(named.ok());
  EXPECT_TRUE(named->save_names.empty());
  EXPECT_EQ(named->offload_names.size(), 7u);
}

TEST(Remat, PolicyErrorsNameTheKnownValues) {
  auto bad = remat_policy("fulll", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("minimal"), std::string::npos) << bad.status().message();
  auto bad_name = remat_policy("save_only_these_names", "query_proj, qkv");
  ASSERT_FALSE(bad_name.ok());
  EXPECT_NE(bad_name.status().message().find("'qkv'"), std::string::npos);
  auto ok = remat_policy("custom", " query_proj , mlpwo ");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->save_names, (std::vector<std::string>{"query_proj", "mlpwo"}));
  Config c = small(2, 8);
  ASSERT_TRUE(c.set("remat_policy", "nope").ok());
  EXPECT_FALSE(resolve_config(c, 1).ok());
}

bool has_op(const Program& p, OpKind k) {
  for (const Instr& in : p.instrs())
    if (in.kind == k) return true;
  return false;
}

// MaxText PR #3922 item 4: one-hot (B,T,V) f32 = 4*16*64*4 = 16 KiB here.
TEST(TempOptions, IotaEmbedFallsBackToGatherAboveTheThreshold) {
  for (int64_t threshold : {int64_t{16384}, int64_t{16383}}) {
    Config c = small(1, 16);
    ASSERT_TRUE(c.set("use_iota_embed", true).ok());
    ASSERT_TRUE(c.set("iota_embed_max_bytes", threshold).ok());
    Program p = build_train_step(resolved(c, "none"), nullptr);
    const bool one_hot = threshold >= 16384;
    EXPECT_EQ(has_op(p, OpKind::kOneHot), one_hot) << threshold;
    EXPECT_EQ(has_op(p, OpKind::kEmbedLookup), !one_hot) << threshold;
  }
}

// MaxText PR #3922 items 5 and 8: attention never materialises a (T,T) mask or score
// tensor, and float32 gradients get no cast.
TEST(TempOptions, NoMaskTensorAndNoGradCast) {
  const int64_t T = 48;  // no other dim is 48
  Config f32 = small(2, T);
  ASSERT_TRUE(f32.set("dtype", "float32").ok());  // no convert at all (bf16 casts activations)
  Program p = build_train_step(resolved(f32, "none", 1), nullptr);
  EXPECT_FALSE(has_op(p, OpKind::kConvert));
  for (const ValueInfo& v : p.values()) {
    int t_dims = 0;
    for (int i = 0; i < v.shape.rank(); ++i) t_dims += v.shape[i] == T;
    EXPECT_LT(t_dims, 2) << v.type_string();
  }
  Config c = small(2, T);  // float16: a dtype the kernels cannot run (bfloat16 is tests/bf16's)
  ASSERT_TRUE(c.set("grad_dtype", "float16").ok());
  EXPECT_EQ(resolve_config(c, 1).status().code(), Code::kUnimplemented);
}

// remove_size_one_mesh_axis_from_type (MaxText default true): a size-1 axis never shows in
// a sharding, neither in the argument specs nor in the dumped program's types.
TEST(TempOptions, SizeOneMeshAxesAreDroppedFromTypes) {
  Program p = build_train_step(resolved(small(1, 16), "full"), nullptr);
  const Mesh mesh = *Mesh::create({"data", "fsdp", "tensor"}, {2, 1, 1});
  auto exe = compile(p, mesh, CompileOptions{});
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  for (const NamedSharding& s : (*exe)->argument_shardings()) {
    EXPECT_EQ(s.spec.to_string().find("fsdp"), std::string::npos) << s.spec.to_string();
    EXPECT_EQ(s.spec.to_string().find("tensor"), std::string::npos) << s.spec.to_string();
  }
  const Program& local = (*exe)->program();
  for (const ValueInfo& v : local.values())
    if (v.spec) {
      EXPECT_EQ(v.type_string(&mesh).find("fsdp"), std::string::npos) << v.type_string(&mesh);
    }
  Config c = small(1, 16);
  ASSERT_TRUE(c.set("remove_size_one_mesh_axis_from_type", false).ok());
  EXPECT_EQ(resolve_config(c, 1).status().code(), Code::kUnimplemented);
}

}  // namespace
}  // namespace eng
