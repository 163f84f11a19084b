// tests/model/deepseek_moe_test.cpp: MaxText's deepseek MoE layout on mixtral-tiny's layer
// (decoder_block deepseek with the llama2 layer's global attention; MLA: deepseek_mla_test):
// first_num_dense_layers dense layers (dense_layers) then MoE layers (moe_layers) whose
// DeepSeekMoeBlock_0 adds the shared experts' MLP to the routed experts, and routed_bias's
// gate/bias used for the top-k choice only. Parameter paths, shapes and logical axes scanned
// and not; the choice-only bias in the routing loop; the tiny model trains, scanned equals
// unscanned, and expert=2, expert=2 x fsdp=2, expert=2 x tensor=2 equal one device (float32,
// 4 steps); routed_bias_update_rate's rule update; bad settings are errors naming the values.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/model/llama.h"
#include "engine/tensor/moe.h"
#include "engine/train/config.h"
#include "engine/train/inspect.h"
#include "engine/train/train_step.h"
#include "engine/train/trainer.h"
#include "tests/spmd/spmd_run.h"
#include "tests/common/text_corpus.h"

namespace eng {
namespace {

using KV = std::initializer_list<std::pair<const char*, ConfigValue>>;

// mixtral-tiny's layer in small shapes: 3 layers (1 dense, 2 MoE), 4 experts top-2 of width
// 32, one shared expert, sigmoid scores scaled by 2.5, the router bias, the load-balance loss
// on (the bias's only gradient).
Config deepseek_tiny(const std::string& dataset, int64_t steps, double devices, KV extra = {}) {
  Config c;
  for (auto [k, v] : KV{{"model_name", std::string("mixtral-tiny")},
                        {"decoder_block", std::string("deepseek")},
                        {"base_emb_dim", int64_t{64}},
                        {"base_num_query_heads", int64_t{4}},
                        {"base_num_kv_heads", int64_t{4}},
                        {"head_dim", int64_t{16}},
                        {"base_mlp_dim", int64_t{96}},
                        {"base_moe_mlp_dim", int64_t{32}},
                        {"base_num_decoder_layers", int64_t{3}},
                        {"first_num_dense_layers", int64_t{1}},
                        {"shared_experts", int64_t{1}},
                        {"routed_bias", true},
                        {"routed_score_func", std::string("sigmoid")},
                        {"routed_scaling_factor", 2.5},
                        {"load_balance_loss_weight", 0.01},
                        {"max_target_length", int64_t{32}},
                        {"per_device_batch_size", 8.0 / devices},
                        {"dtype", std::string("float32")},
                        {"steps", steps},
                        {"learning_rate", 3e-3},
                        {"warmup_steps_fraction", 0.2},
                        {"adam_eps", 1e-4},
                        {"dataset", dataset}})
    EXPECT_TRUE(c.set(k, v).ok()) << k;
  for (auto [k, v] : extra) EXPECT_TRUE(c.set(k, v).ok()) << k;
  return c;
}

ResolvedConfig resolved(const Config& c, int64_t devices) {
  Result<ResolvedConfig> r = resolve_config(c, devices);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : ResolvedConfig{};
}

struct Want {
  const char* path;
  std::vector<int64_t> shape;
  std::vector<std::string> logical;
};

void expect_params(const ModelConfig& m, const std::vector<Want>& want, size_t count) {
  Builder b("params");
  LlamaParams p = declare_llama_params(b, m);
  int64_t total = 0;
  for (ValueId v : p.all) total += b.info(v).shape.numel();
  EXPECT_EQ(total, m.num_params());
  EXPECT_EQ(p.all.size(), count);
  for (const Want& w : want) {
    SCOPED_TRACE(w.path);
    bool found = false;
    for (ValueId v : p.all) {
      const ValueInfo& i = b.info(v);
      if (i.name != w.path) continue;
      found = true;
      EXPECT_EQ(i.shape, Shape(w.shape));
      EXPECT_EQ(i.logical, w.logical);
    }
    EXPECT_TRUE(found);
  }
}

// MaxText's deepseek.py / decoders.py tree (unscanned: dense_layers_{i}, moe_layers_{j}; scanned:
// dense_layers, moe_layers with the layer dim at param_scan_axis named after the group).
TEST(DeepSeekMoe, ParameterPathsShapesAndAxesAreMaxTexts) {
  ModelConfig m = resolved(deepseek_tiny("synthetic", 1, 1), 1).model;
  m.scan_layers = false;
  const std::string r = "params/decoder/moe_layers_1/DeepSeekMoeBlock_0/";
  // embedding + (9 dense) + 2 x (9 + gate, bias, 3 shared) + decoder_norm, logits_dense.
  expect_params(m,
                {{"params/decoder/dense_layers_0/mlp/wi_0/kernel", {64, 96}, {"embed", "mlp"}},
                 {"params/decoder/dense_layers_0/mlp/wo/kernel", {96, 64}, {"mlp", "embed"}},
                 {"params/decoder/moe_layers_0/self_attention/query/kernel",
                  {64, 4, 16},
                  {"embed", "q_heads", "kv"}},
                 {(r + "MoeBlock_0/wi_0").c_str(), {4, 64, 32}, {"exp", "embed_moe", "mlp_moe"}},
                 {(r + "MoeBlock_0/wo").c_str(), {4, 32, 64}, {"exp", "mlp_moe", "embed_moe"}},
                 {(r + "MoeBlock_0/gate/kernel").c_str(), {64, 4}, {"embed_moe", ""}},
                 {(r + "MoeBlock_0/gate/bias").c_str(), {4}, {""}},
                 {(r + "shared_experts/wi_0/kernel").c_str(), {64, 32}, {"embed", "mlp"}},
                 {(r + "shared_experts/wi_1/kernel").c_str(), {64, 32}, {"embed", "mlp"}},
                 {(r + "shared_experts/wo/kernel").c_str(), {32, 64}, {"mlp", "embed"}}},
                1 + 9 + 2 * 14 + 2);
  m.scan_layers = true;
  const std::string s = "params/decoder/moe_layers/DeepSeekMoeBlock_0/";
  expect_params(
      m,
      {{"params/decoder/dense_layers/mlp/wi_0/kernel",
        {64, 1, 96},
        {"embed", "dense_layers", "mlp"}},
       {"params/decoder/dense_layers/pre_self_attention_layer_norm/scale",
        {64, 1},
        {"norm", "dense_layers"}},
       {(s + "MoeBlock_0/wi_1").c_str(),
        {4, 2, 64, 32},
        {"exp", "moe_layers", "embed_moe", "mlp_moe"}},
       {(s + "MoeBlock_0/gate/bias").c_str(), {4, 2}, {"", "moe_layers"}},
       {(s + "shared_experts/wo/kernel").c_str(), {32, 2, 64}, {"mlp", "moe_layers", "embed"}},
       {"params/decoder/moe_layers/self_attention/out/kernel",
        {4, 2, 16, 64},
        {"heads", "moe_layers", "kv", "embed"}}},
      1 + 9 + 14 + 2);
  // No shared experts, no bias: the routed block alone.
  m.moe.shared_experts = 0;
  m.moe.routed_bias = false;
  expect_params(m, {}, 1 + 9 + 10 + 2);
  // Active parameters: the dense layer whole, 2 of 4 experts in each MoE layer.
  m.moe.shared_experts = 1;
  m.moe.routed_bias = true;
  EXPECT_EQ(m.num_params() - m.num_active_params(), 2 * (4 - 2) * 3 * 64 * 32);
}

// t:shardings() of a shape-only plan (sl.plan's path) on fsdp=2 x expert=2: the routed experts
// over `expert`, the shared experts and the dense MLP as the dense rules (`embed` over fsdp and
// expert), gate/bias whole, the group dims not sharded.
TEST(DeepSeekMoe, ShapeOnlyShardings) {
  Result<std::unique_ptr<Trainer>> t =
      Trainer::create(deepseek_tiny("synthetic", 1, 4), *Mesh::create({"fsdp", "expert"}, {2, 2}),
                      {.shape_only = true});
  ASSERT_TRUE(t.ok()) << t.status().message();
  Result<ShardingTable> tab = trainer_shardings(**t);
  ASSERT_TRUE(tab.ok()) << tab.status().message();
  const std::string r = "params/decoder/moe_layers/DeepSeekMoeBlock_0/";
  for (auto [path, type, logical] : std::initializer_list<std::array<std::string, 3>>{
           {r + "MoeBlock_0/wi_0", "f32[4@expert,2,64@fsdp,32]",
            "('exp', 'moe_layers', 'embed_moe', 'mlp_moe')"},
           {r + "MoeBlock_0/gate/bias", "f32[4,2]", "(None, 'moe_layers')"},
           {r + "shared_experts/wi_0/kernel", "f32[64@(fsdp,expert),2,32]",
            "('embed', 'moe_layers', 'mlp')"},
           {"params/decoder/dense_layers/mlp/wo/kernel", "f32[96,1,64@(fsdp,expert)]",
            "('mlp', 'dense_layers', 'embed')"}}) {
    SCOPED_TRACE(path);
    const ShardingRow* row = tab->find(path);
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(row->type, type);
    EXPECT_EQ(row->logical_string(), logical);
  }
}

// MaxText's calculate_routed_and_shared_ffn_tflops_per_device: the dense layers' ffn(mlp_dim),
// the MoE layers' gate + (k + shared_experts) x ffn(moe_mlp_dim).
TEST(DeepSeekMoe, TflopsAreMaxTextsRoutedAndShared) {
  const ModelConfig m = resolved(deepseek_tiny("synthetic", 1, 1), 1).model;
  const double B = 2, S = 32, E = 64, M = 96, H = 32, L = 3, V = 256, Hq = 4, D = 16;
  auto ffn = [&](double w) { return 2 * B * S * w * E * 2 + 2 * B * S * w * E; };
  const double mlp = ffn(M) * 1 + (2 * B * S * E * 4 + (2 + 1) * ffn(H)) * 2;
  const double qkv = 2 * B * S * E * (Hq + 2 * Hq) * D, proj = 2 * B * S * E * Hq * D;
  const double learnable = (mlp + (qkv + proj) * L + 2 * B * S * E * V) * 3 / 1e12;
  EXPECT_NEAR(calculate_tflops_training_per_device(m, B, 32).learnable / learnable, 1.0, 1e-12);
}

// The routing loop: the bias picks the experts, the weights are the unbiased scores
// (sigmoid, normalised over the chosen, times routed_scaling_factor); the load-balance
// probabilities are softmax(scores + bias).
TEST(DeepSeekMoe, RouterBiasChoosesButDoesNotWeigh) {
  moe::RouteParams p;
  p.k = 2;
  p.capacity = 1;
  p.score_func = 2;
  p.deepseek_weights = true;
  p.routed_scaling_factor = 2.5;
  const double logits[4] = {2.0, 1.0, 0.5, -3.0};
  const double bias[4] = {0.0, 0.0, 0.0, 10.0};
  auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  double combine[4] = {}, lb = 0, load[8] = {};
  moe::route(logits, static_cast<const double*>(nullptr), 1, 1, 4, p, combine, &lb, load);
  EXPECT_NEAR(combine[0], 2.5 * sig(2.0) / (sig(2.0) + sig(1.0)), 1e-12);
  EXPECT_NEAR(combine[1], 2.5 * sig(1.0) / (sig(2.0) + sig(1.0)), 1e-12);
  EXPECT_EQ(combine[3], 0.0);
  moe::route(logits, bias, 1, 1, 4, p, combine, &lb, load);  // expert 3 chosen, weighed unbiased
  EXPECT_NEAR(combine[0], 2.5 * sig(2.0) / (sig(2.0) + sig(-3.0)), 1e-12);
  EXPECT_EQ(combine[1], 0.0);
  EXPECT_NEAR(combine[3], 2.5 * sig(-3.0) / (sig(2.0) + sig(-3.0)), 1e-12);
  EXPECT_EQ(load[3], 1.0);
  // The bias's gradient comes from the load-balance loss only: none without it.
  double dcombine[4] = {1.0, 2.0, 3.0, 4.0}, dbias[4];
  moe::route_grad(logits, dcombine, bias, 1, 1, 4, p, static_cast<double*>(nullptr), dbias);
  for (double d : dbias) EXPECT_EQ(d, 0.0);
  p.lb_scale = 1.0;
  moe::route_grad(logits, dcombine, bias, 1, 1, 4, p, static_cast<double*>(nullptr), dbias);
  EXPECT_GT(std::fabs(dbias[3]), 1e-6);
}

// MaxText's get_topk for the deepseek decoder: norm_topk_prob is not read (the program is the
// same), the weights are deepseek's; the dense layer has no router.
TEST(DeepSeekMoe, DeepSeekWeightsIgnoreNormTopkProb) {
  const ResolvedConfig a = resolved(deepseek_tiny("synthetic", 1, 1), 1);
  const ResolvedConfig b =
      resolved(deepseek_tiny("synthetic", 1, 1, {{"norm_topk_prob", true}}), 1);
  const std::string text = build_train_step(a, nullptr).to_text();
  EXPECT_EQ(text, build_train_step(b, nullptr).to_text());
  EXPECT_NE(text.find("deepseek_weights=1"), std::string::npos);
  EXPECT_EQ(text.find("norm_topk_prob"), std::string::npos);
}

// The other decoders (mixtral's llama2 here) weigh by a softmax over the top-k scores whatever
// routed_score_func is, then norm_topk_prob, and never read routed_scaling_factor (MaxText's
// get_topk outside the deepseek branch).
TEST(DeepSeekMoe, OtherDecodersWeighBySoftmaxOverTheTopK) {
  Config c;
  for (auto [k, v] : KV{{"model_name", std::string("mixtral-tiny")},
                        {"base_num_decoder_layers", int64_t{1}},
                        {"routed_score_func", std::string("sigmoid")},
                        {"routed_scaling_factor", 2.5},
                        {"norm_topk_prob", true}})
    ASSERT_TRUE(c.set(k, v).ok()) << k;
  const std::string text = build_train_step(resolved(c, 1), nullptr).to_text();
  EXPECT_NE(text.find("moe_route[k=2 capacity=160 score_func=2 norm_topk_prob lb_scale=0]"),
            std::string::npos)
      << text.substr(text.find("moe_route["), 160);
  EXPECT_EQ(text.find("deepseek_weights"), std::string::npos);
  EXPECT_EQ(text.find("routed_scaling_factor"), std::string::npos);
}


TEST(DeepSeekMoe, TinyTrains) {
  const std::string data = "text:" + testing::varied_text_file("deepseek_moe");
  const ResolvedConfig cfg = resolved(deepseek_tiny(data, 20, 1), 1);
  Result<testing::SpmdRun> r = testing::run_train_steps(cfg, Mesh(), CompileOptions{}, 20);
  ASSERT_TRUE(r.ok()) << r.status().message();
  fmt::print("[deepseek_moe] loss {:.3f} -> {:.3f} in 20 steps\n", r->losses.front(),
             r->losses.back());
  EXPECT_GT(r->losses.front(), 4.0f);  // about log(256) untrained
  EXPECT_LT(r->losses.back(), r->losses.front() - 1.0f);
}

TEST(DeepSeekMoe, ScannedAndShardedEqualOneDevice) {
  constexpr int kSteps = 4;
  const std::string data = "text:" + testing::varied_text_file("deepseek_moe");
  const Mesh one;
  // One device, unscanned (dense_layers_0, moe_layers_0, moe_layers_1).
  Result<testing::SpmdRun> want = testing::run_train_steps(
      resolved(deepseek_tiny(data, kSteps, 1, {{"scan_layers", false}}), 1), one, CompileOptions{},
      kSteps);
  ASSERT_TRUE(want.ok()) << want.status().message();
  EXPECT_GT(want->losses.front(), want->losses.back());
  {  // scan_layers (the default): dense_layers and moe_layers scanned; the same losses
    Result<testing::SpmdRun> got = testing::run_train_steps(
        resolved(deepseek_tiny(data, kSteps, 1, {{"scan_layers", true}}), 1), one, CompileOptions{},
        kSteps);
    ASSERT_TRUE(got.ok()) << got.status().message();
    const double rel = testing::max_loss_rel(got->losses, want->losses);
    fmt::print("[deepseek_moe] scanned: loss rel {:.2e}\n", rel);
    EXPECT_LT(rel, 1e-5);
  }
  // Scanned (the default) on the meshes; the parameters compared in the scanned order.
  Result<testing::SpmdRun> scanned = testing::run_train_steps(
      resolved(deepseek_tiny(data, kSteps, 1), 1), one, CompileOptions{}, kSteps);
  ASSERT_TRUE(scanned.ok()) << scanned.status().message();
  testing::expect_sharded_equals_one_device(
      "deepseek_moe",
      {{{"expert"}, {2}}, {{"fsdp", "expert"}, {2, 2}}, {{"tensor", "expert"}, {2, 2}},
       {{"fsdp", "expert"}, {2, 2}, ShardMode::kExplicit}},
      [&](const Mesh& mesh) {
        return resolved(deepseek_tiny(data, kSteps, static_cast<double>(mesh.num_devices())),
                        mesh.num_devices());
      },
      kSteps, *want, &*scanned);
}

// routed_bias_update_rate (MaxText's calculate_load_balance_updates applied after the optimizer
// step): without the load-balance loss gate/bias has no gradient, so after one step each MoE
// layer's bias is exactly rate x sign(B S k / E - tokens_e), tokens_e the step's logged load.
// Then on fsdp=2 x expert=2 the 4-step run with the rule equals one device.
TEST(DeepSeekMoe, RoutedBiasUpdateRuleIsMaxTexts) {
  const std::string data = "text:" + testing::varied_text_file("deepseek_moe");
  constexpr double kRate = 0.01;
  const KV rule = {{"routed_bias_update_rate", kRate}, {"load_balance_loss_weight", 0.0}};
  const ResolvedConfig cfg = resolved(deepseek_tiny(data, 1, 1, rule), 1);
  ASSERT_TRUE(cfg.model.scan_layers);
  std::vector<std::vector<float>> tokens(2, std::vector<float>(4));  // per MoE layer, expert
  TrainStepLayout layout;
  const Program p = build_train_step(cfg, &layout);
  auto read_load = [&](const Program&, const Executable&, Runtime& rt, const std::vector<Array>&,
                       const std::vector<Array>& outputs) {  // the metrics, in metric_names order
    for (size_t j = 0; j < layout.metric_names.size() && j < outputs.size(); ++j)
      for (int l = 0; l < 2; ++l)
        for (int e = 0; e < 4; ++e)
          if (layout.metric_names[j] == fmt::format("moe/layer_{}/expert_{}/tokens", l, e)) {
            EXPECT_TRUE(rt.fetch(outputs[j], &tokens[l][e]).ok());
          }
  };
  Result<testing::SpmdRun> r =
      testing::run_train_steps(cfg, Mesh(), CompileOptions{}, 1, read_load);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const int bias = p.find_arg("params/decoder/moe_layers/DeepSeekMoeBlock_0/MoeBlock_0/gate/bias");
  ASSERT_GE(bias, 0);
  const std::vector<float>& got = r->params[static_cast<size_t>(bias)];  // (E 4, L 2)
  ASSERT_EQ(got.size(), 8u);
  const double mean = 8.0 * 32 * 2 / 4;  // B S k / E
  int moved = 0;
  for (int l = 0; l < 2; ++l) {
    float sum = 0;
    for (int e = 0; e < 4; ++e) {
      sum += tokens[l][e];
      const double want = kRate * (mean > tokens[l][e] ? 1 : mean < tokens[l][e] ? -1 : 0);
      EXPECT_EQ(got[static_cast<size_t>(e * 2 + l)], static_cast<float>(want))
          << "layer " << l << " expert " << e << " tokens " << tokens[l][e];
      moved += want != 0;
    }
    EXPECT_EQ(sum, 8 * 32 * 2);
  }
  EXPECT_GT(moved, 0);
  {  // unscanned: moe_layers_{l}/.../gate/bias (E) gets the same update
    const ResolvedConfig flat = resolved(deepseek_tiny(data, 1, 1,
                                                       {{"routed_bias_update_rate", kRate},
                                                        {"load_balance_loss_weight", 0.0},
                                                        {"scan_layers", false}}),
                                         1);
    Result<testing::SpmdRun> u = testing::run_train_steps(flat, Mesh(), CompileOptions{}, 1);
    ASSERT_TRUE(u.ok()) << u.status().message();
    const Program q = build_train_step(flat, nullptr);
    for (int l = 0; l < 2; ++l) {
      const int i = q.find_arg(
          fmt::format("params/decoder/moe_layers_{}/DeepSeekMoeBlock_0/MoeBlock_0/gate/bias", l));
      ASSERT_GE(i, 0);
      for (int e = 0; e < 4; ++e)
        EXPECT_EQ(u->params[static_cast<size_t>(i)][static_cast<size_t>(e)],
                  got[static_cast<size_t>(e * 2 + l)]);
    }
  }
  constexpr int kSteps = 4;
  const Mesh mesh = *Mesh::create({"fsdp", "expert"}, {2, 2});
  Result<testing::SpmdRun> want = testing::run_train_steps(
      resolved(deepseek_tiny(data, kSteps, 1, rule), 1), Mesh(), CompileOptions{}, kSteps);
  Result<testing::SpmdRun> sharded = testing::run_train_steps(
      resolved(deepseek_tiny(data, kSteps, 4, rule), 4), mesh, CompileOptions{}, kSteps);
  ASSERT_TRUE(want.ok() && sharded.ok());
  EXPECT_LT(testing::max_loss_rel(sharded->losses, want->losses), 1e-5);
  EXPECT_LT(testing::max_param_rel(sharded->params, want->params), 1e-5);
  EXPECT_EQ(sharded->max_collective_mismatch, 0);
}

Status resolve_with(KV kv, int64_t devices = 1) {
  return resolve_config(deepseek_tiny("synthetic", 1, static_cast<double>(devices), kv), devices)
      .status();
}

void expect_error(const Status& s, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(s.ok());
  for (const char* part : parts)
    EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
}

TEST(DeepSeekMoe, BadSettingsNameTheirValues) {
  expect_error(resolve_with({{"shared_experts", int64_t{-1}}}), {"shared_experts", "-1"});
  expect_error(resolve_with({{"first_num_dense_layers", int64_t{3}}}),
               {"first_num_dense_layers 3", "num_decoder_layers 3"});
  expect_error(resolve_with({{"first_num_dense_layers", int64_t{-2}}}),
               {"first_num_dense_layers -2"});
  expect_error(resolve_with({{"decoder_block", std::string("llama2")}}),
               {"shared_experts=1", "first_num_dense_layers=1", "routed_bias=true", "llama2"});
  expect_error(resolve_with({{"routed_bias_update_rate", 0.001}, {"routed_bias", false}}),
               {"routed_bias_update_rate=0.001", "routed_bias=false"});
  expect_error(resolve_with({{"routed_bias_update_rate", -0.5}}), {"routed_bias_update_rate=-0.5"});
  expect_error(resolve_with({{"num_experts", int64_t{1}}}), {"deepseek", "num_experts 1"});
  expect_error(resolve_with({{"decoder_block", std::string("deepseek4")}}), {"deepseek4"});
  // The pipeline (and so sl.plan with ici_pipeline_parallelism) refuses MoE layers.
  expect_error(resolve_with({{"ici_pipeline_parallelism", int64_t{2}},
                             {"base_num_decoder_layers", int64_t{4}},
                             {"per_device_batch_size", 4.0}},
                            2),
               {"num_experts=4", "ici_pipeline_parallelism=2"});
}

}  // namespace
}  // namespace eng
