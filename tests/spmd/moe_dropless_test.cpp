// tests/spmd/moe_dropless_test.cpp: MaxText's dropless sparse dispatch (sparse_matmul=true,
// engine/model/moe.cpp's trace_dropless): the block equals a double-precision loop over tokens
// and experts; training equals the dense dispatch whose capacity drops nothing (same routing);
// sharded without expert parallelism (data, fsdp, tensor, fsdp x tensor; auto and explicit)
// equals one device in float32 over 4 steps, and so does expert parallelism (expert=2 alone and
// with fsdp, data or tensor: the ragged all-to-all over `expert`); in bf16 the grouped matmuls
// run widened.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "engine/ir/interpret.h"
#include "engine/model/moe.h"
#include "engine/train/config.h"
#include "engine/runtime/executor.h"
#include "engine/train/trainer.h"
#include "tests/common/tiny_config.h"
#include "tests/runtime/runtime_harness.h"
#include "tests/spmd/spmd_run.h"

namespace eng {
namespace {

constexpr int kSteps = 4;

// spmd_model's llama with 4 experts (top-2) in every layer and the load-balance loss on;
// dropless, or the dense dispatch with capacity_factor 4: ceil(32 x 2 / 4) x 4 = 64 slots per
// expert per sequence of 32 tokens, so nothing is dropped.
Config moe_config(bool dropless) {
  Config c = testing::tiny_llama_config(testing::spmd_model(kSteps));
  for (auto [k, v] : std::initializer_list<std::pair<const char*, ConfigValue>>{
           {"num_experts", int64_t{4}},
           {"num_experts_per_tok", int64_t{2}},
           {"sparse_matmul", dropless},
           {"capacity_factor", dropless ? -1.0 : 4.0},
           {"load_balance_loss_weight", 0.01}})
    EXPECT_TRUE(c.set(k, v).ok()) << k;
  return c;
}

ResolvedConfig resolved(bool dropless, const Mesh&) {
  Result<ResolvedConfig> r = resolve_config(moe_config(dropless), 8);  // global batch 8
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : ResolvedConfig{};
}

const testing::SpmdRun& one_device(bool dropless) {
  static testing::SpmdRun runs[2];
  static bool done[2] = {false, false};
  if (!done[dropless]) {
    Result<testing::SpmdRun> r =
        testing::run_train_steps(resolved(dropless, Mesh()), Mesh(), CompileOptions{}, kSteps);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (r.ok()) runs[dropless] = *r;
    done[dropless] = true;
  }
  return runs[dropless];
}

// The same routing, the same expert MLPs: only the dispatch differs (and the order of the
// sums, so 1e-5, not bitwise).
TEST(MoeDropless, EqualsTheDenseDispatchThatDropsNothing) {
  const testing::SpmdRun& sparse = one_device(true);
  const testing::SpmdRun& dense = one_device(false);
  ASSERT_EQ(sparse.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(dense.losses.size(), static_cast<size_t>(kSteps));
  fmt::print("[dropless] losses {:.6f}..{:.6f}, dense {:.6f}..{:.6f}\n", sparse.losses.front(),
             sparse.losses.back(), dense.losses.front(), dense.losses.back());
  EXPECT_LT(testing::max_loss_rel(sparse.losses, dense.losses), 1e-5);
  EXPECT_LT(testing::max_param_rel(sparse.params, dense.params), 1e-5);
  EXPECT_GT(sparse.losses.front(), sparse.losses.back());  // it trains
}

TEST(MoeDropless, ShardedWithoutExpertParallelismEqualsOneDevice) {
  std::vector<testing::MeshCase> cases;
  for (ShardMode mode : {ShardMode::kAuto, ShardMode::kExplicit}) {
    cases.push_back({{"data"}, {2}, mode});
    cases.push_back({{"fsdp"}, {2}, mode});
    cases.push_back({{"tensor"}, {2}, mode});
    cases.push_back({{"fsdp", "tensor"}, {2, 2}, mode});
  }
  testing::expect_sharded_equals_one_device(
      "dropless", cases, [](const Mesh& mesh) { return resolved(true, mesh); }, kSteps,
      one_device(true));
}

// The block alone (trace_moe_block on h) against a loop over tokens and experts in double:
// logits = h . gate, scores (softmax or none), the top-k largest (lower expert first on ties),
// weights = softmax over the top-k scores (then / their sum: norm_topk_prob), out = sum over
// the chosen e of w_e (silu(h . wi_0[e]) * (h . wi_1[e])) . wo[e]. The interpreter (double)
// matches to 1e-12, the executor (float32) to 1e-5 on one device and data=2 x tensor=2.
void expect_block_matches_loop(const std::string& score_func, bool norm_topk_prob) {
  constexpr int64_t B = 2, S = 5, M = 6, H = 4, E = 4, k = 2;
  ModelConfig m = *moe_model_preset("mixtral-tiny");
  m.emb_dim = M;
  m.moe.moe_mlp_dim = H;
  m.moe.sparse_matmul = true;
  m.moe.routed_score_func = score_func;
  m.moe.norm_topk_prob = norm_topk_prob;
  ASSERT_TRUE(validate_moe(m).ok()) << validate_moe(m).message();
  Builder b("moe_block");
  auto param = [&](const char* name, Shape s, std::vector<std::string> l) {
    return b.argument(name, std::move(s), DType::kF32, std::move(l), ArgRole::kParam);
  };
  const ValueId h = param("h", Shape{B, S, M}, {"activation_batch", "", "activation_embed"});
  LlamaLayerParams lp{};
  lp.gate = param("gate", Shape{M, E}, {"embed_moe", ""});
  lp.wi_0 = param("wi_0", Shape{E, M, H}, {"exp", "embed_moe", "mlp_moe"});
  lp.wi_1 = param("wi_1", Shape{E, M, H}, {"exp", "embed_moe", "mlp_moe"});
  lp.wo = param("wo", Shape{E, H, M}, {"exp", "mlp_moe", "embed_moe"});
  MoeOutputs outs;
  b.output(trace_moe_block(b, m, lp, h, false, outs), "out");
  const Program p = std::move(b).finish();

  std::mt19937_64 rng(17);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<HostTensor> args;
  for (const Argument& a : p.args()) {
    const ValueInfo& v = p.value(a.value);
    HostTensor t{v.shape, v.dtype, std::vector<double>(static_cast<size_t>(v.shape.numel()))};
    for (double& x : t.data) x = normal(rng);
    args.push_back(std::move(t));
  }
  const std::vector<double>&hv = args[0].data, &gv = args[1].data, &w0 = args[2].data,
                         &w1 = args[3].data, &wo = args[4].data;
  std::vector<double> want(B * S * M, 0.0);
  int64_t moved = 0;  // tokens whose top choice is not expert 0: the sort moves rows
  for (int64_t t = 0; t < B * S; ++t) {
    const double* x = &hv[t * M];
    std::vector<double> s(E, 0.0);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t q = 0; q < M; ++q) s[e] += x[q] * gv[q * E + e];
    if (score_func == "softmax") {
      const double mx = *std::max_element(s.begin(), s.end());
      double z = 0;
      for (double& v : s) z += (v = std::exp(v - mx));
      for (double& v : s) v /= z;
    }
    std::vector<int64_t> idx(E);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t c) { return s[a] > s[c]; });
    moved += idx[0] != 0;
    std::vector<double> wt(k);
    double z = 0;
    for (int64_t r = 0; r < k; ++r) z += (wt[r] = std::exp(s[idx[r]] - s[idx[0]]));
    for (double& v : wt) v /= z;
    if (norm_topk_prob) {
      const double sum = std::accumulate(wt.begin(), wt.end(), 0.0);
      for (double& v : wt) v /= sum;
    }
    for (int64_t r = 0; r < k; ++r) {
      const int64_t e = idx[r];
      for (int64_t j = 0; j < H; ++j) {
        double g = 0, u = 0;
        for (int64_t q = 0; q < M; ++q) {
          g += x[q] * w0[(e * M + q) * H + j];
          u += x[q] * w1[(e * M + q) * H + j];
        }
        const double a = g / (1.0 + std::exp(-g)) * u;
        for (int64_t q = 0; q < M; ++q) want[t * M + q] += wt[r] * a * wo[(e * H + j) * M + q];
      }
    }
  }
  EXPECT_GT(moved, 0);
  Result<std::vector<HostTensor>> got = interpret(p, args);
  ASSERT_TRUE(got.ok()) << got.status().message();
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs((*got)[0].data[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  EXPECT_LT(err, 1e-12 * scale) << score_func;
  for (const Mesh& mesh : {Mesh(), *Mesh::create({"data", "tensor"}, {2, 2})}) {
    const std::vector<std::vector<double>> run = testing::run_on_runtime(p, args, mesh);
    ASSERT_EQ(run.size(), 1u);
    double e32 = 0;
    for (size_t i = 0; i < want.size(); ++i) e32 = std::max(e32, std::fabs(run[0][i] - want[i]));
    EXPECT_LT(e32, 1e-5 * scale) << score_func << " on " << mesh.to_string();
  }
}

TEST(MoeDropless, BlockEqualsALoopOverTokensAndExperts) {
  expect_block_matches_loop("", false);
  expect_block_matches_loop("softmax", true);
}

// deepseek's layout (dense first layer, shared expert, sigmoid scores with the router bias and
// its update, scaled weights) through the dropless dispatch: equal to its dense dispatch with
// capacity_factor 2 (ceil(32 x 2 / 4) x 2 = 32 slots for 32 tokens: nothing dropped).
TEST(MoeDropless, DeepseekTinyEqualsItsDenseDispatch) {
  auto run = [](bool dropless) {
    Config c;
    for (auto [k, v] : std::initializer_list<std::pair<const char*, ConfigValue>>{
             {"model_name", std::string("deepseek-tiny")},
             {"sparse_matmul", dropless},
             {"capacity_factor", dropless ? -1.0 : 2.0},
             {"max_target_length", int64_t{32}},
             {"per_device_batch_size", 2.0},
             {"dtype", std::string("float32")},
             {"routed_bias_update_rate", 0.01},
             {"dataset_type", std::string("synthetic")}})
      EXPECT_TRUE(c.set(k, v).ok()) << k;
    Result<ResolvedConfig> r = resolve_config(c, 1);
    EXPECT_TRUE(r.ok()) << r.status().message();
    Result<testing::SpmdRun> got = testing::run_train_steps(*r, Mesh(), CompileOptions{}, 3);
    EXPECT_TRUE(got.ok()) << got.status().message();
    return got.ok() ? *got : testing::SpmdRun{};
  };
  const testing::SpmdRun sparse = run(true), dense = run(false);
  ASSERT_EQ(sparse.losses.size(), 3u);
  ASSERT_EQ(dense.losses.size(), 3u);
  EXPECT_LT(testing::max_loss_rel(sparse.losses, dense.losses), 1e-5);
  EXPECT_LT(testing::max_param_rel(sparse.params, dense.params), 1e-5);
}

// Expert parallelism (MaxText's sparse_matmul under shard_map: ragged all-to-all over
// `expert`): expert=2 alone and with fsdp, data or tensor, auto and explicit, equals one device
// in float32 over 4 steps. The partitioned program has the ragged all-to-alls over `expert`
// (forward dispatch and return, and their transposes in the backward pass) with c.cost's
// balanced bytes for them, each receive buffer among the temps (R = 2 x the device's rows:
// MaxText's worst case min(2, 4 experts / top-2)), and the experts' weights split over
// `expert` (each device multiplies its own two experts' rows). The communicator counts the rows
// actually moved (the routing decides), so moved bytes are only required to be positive here.
TEST(MoeDropless, ExpertParallelEqualsOneDevice) {
  const testing::SpmdRun& want = one_device(true);
  for (ShardMode mode : {ShardMode::kAuto, ShardMode::kExplicit})
    for (const testing::MeshCase& c : std::vector<testing::MeshCase>{
             {{"expert"}, {2}, mode},
             {{"fsdp", "expert"}, {2, 2}, mode},
             {{"data", "expert"}, {2, 2}, mode},
             {{"tensor", "expert"}, {2, 2}, mode}}) {
      const Mesh mesh = *Mesh::create(c.axes, c.sizes);
      CompileOptions o;
      o.shard_mode = mode;
      int ragged = 0;
      double moved = 0;
      auto inspect = [&](const Program&, const Executable& exe, Runtime& rt,
                         const std::vector<Array>&, const std::vector<Array>&) {
        const Program& lp = exe.program();
        for (const Instr& in : lp.instrs()) {
          if (in.kind != OpKind::kRaggedAllToAll) continue;
          ++ragged;
          EXPECT_EQ(in.attrs.mesh_axes, std::vector<std::string>{"expert"});
          if (lp.value(in.outputs[0]).shape[1] <= lp.value(in.inputs[0]).shape[1]) continue;
          // A dispatch: the buffer holds 2 x the rows sent, and it is a temp of the plan.
          EXPECT_EQ(lp.value(in.outputs[0]).shape[1], 2 * lp.value(in.inputs[0]).shape[1]);
          bool temp = false;
          for (const TempInfo& t : exe.largest_temps(1 << 20))
            temp = temp || t.value == in.outputs[0];
          EXPECT_TRUE(temp) << "receive buffer not among the temps";
        }
        EXPECT_GT(exe.cost().collective_bytes.count("expert"), 0u);
        for (int d = 0; d < rt.num_devices(); ++d) moved += rt.communicator().bytes_received(d)["expert"];
      };
      Result<testing::SpmdRun> got = testing::run_train_steps(resolved(true, mesh), mesh, o, kSteps, inspect);
      ASSERT_TRUE(got.ok()) << mesh.to_string() << ": " << got.status().message();
      const double loss_rel = testing::max_loss_rel(got->losses, want.losses);
      const double param_rel = testing::max_param_rel(got->params, want.params);
      fmt::print("[dropless ep] {} {}: loss rel {:.2e}, param rel {:.2e}, expert bytes moved {}\n",
                 mesh.to_string(), mode == ShardMode::kExplicit ? "explicit" : "auto", loss_rel,
                 param_rel, moved);
      EXPECT_LT(loss_rel, 1e-5) << mesh.to_string();
      EXPECT_LT(param_rel, 1e-5) << mesh.to_string();
      EXPECT_GE(ragged, 4) << mesh.to_string();  // per MoE layer: 2 forward, 2 backward
      EXPECT_GT(moved, 0) << mesh.to_string();
    }
}

// A shape-only trainer on `expert` = 2, with ici_expert_parallelism 2 or from the mesh alone,
// is built (the refusal is gone; tests/shell/moe_test.lua reads its plan's ragged all-to-all).
TEST(MoeDropless, ExpertParallelismFromTheKeysOrTheMeshAlonePlans) {
  const Mesh mesh = *Mesh::create({"expert"}, {2});
  Config keyed = moe_config(true);
  ASSERT_TRUE(keyed.set("ici_expert_parallelism", int64_t{2}).ok());
  for (const Config& c : {keyed, moe_config(true)}) {
    auto t = Trainer::create(c, mesh, {.shape_only = true});
    ASSERT_TRUE(t.ok()) << t.status().message();
  }
}

// The mesh's `expert` axis (no ici_expert_parallelism key) must divide num_experts: a clear
// error naming both numbers, for either dispatch, shape-only or not.
TEST(MoeDropless, ExpertAxisOfTheMeshNotDividingTheExpertsIsAClearError) {
  const Mesh mesh = *Mesh::create({"expert"}, {3});
  for (bool dropless : {true, false})
    for (bool shape_only : {true, false}) {
      auto t = Trainer::create(moe_config(dropless), mesh, {.shape_only = shape_only});
      ASSERT_FALSE(t.ok()) << "dropless " << dropless << " shape_only " << shape_only;
      EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().message();
      EXPECT_NE(t.status().message().find(
                    "the mesh's 'expert' axis of size 3 does not divide num_experts 4"),
                std::string::npos)
          << t.status().message();
    }
}

}  // namespace
}  // namespace eng
