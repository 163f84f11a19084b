// tests/model/qwen3_test.cpp: MaxText's qwen3_moe decoder (the llama2 layer with use_qk_norm and
// the routed MoE under moe_block/): qwen3-235b-a22b's values, parameter counts (total and
// active), TFLOP count (no qk-norm term) and sharding table; qk norm's gradients against finite
// differences in double and its effect on the loss; qwen3-tiny trained on the fortunes corpus and
// its sharded runs (fsdp, tensor, expert; auto and explicit mode) equal to one device over 4
// steps; qk norm in a stage=2 pipeline; use_qk_norm on gpt3 is an error.
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "engine/ir/interpret.h"
#include "engine/model/llama.h"
#include "engine/train/config.h"
#include "engine/train/inspect.h"
#include "engine/train/train_step.h"
#include "engine/train/trainer.h"
#include "tests/ir/grad_check.h"
#include "tests/spmd/spmd_run.h"
#include "tests/common/text_corpus.h"

namespace eng {
namespace {

// configs/models/qwen3-235b-a22b.yml, key for key.
TEST(Qwen3, PresetIsMaxTextsYml) {
  ModelConfig m = model_preset("qwen3-235b-a22b").value();
  EXPECT_EQ(m.decoder_block, "qwen3_moe");
  EXPECT_EQ(m.emb_dim, 4096);
  EXPECT_EQ(m.mlp_dim, 1536);
  EXPECT_EQ(m.num_query_heads, 64);
  EXPECT_EQ(m.num_kv_heads, 4);
  EXPECT_EQ(m.num_decoder_layers, 94);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.vocab_size, 151936);
  EXPECT_EQ(m.normalization_layer_epsilon, 1e-6);
  EXPECT_TRUE(m.use_qk_norm);
  EXPECT_EQ(m.moe.num_experts, 128);
  EXPECT_EQ(m.moe.num_experts_per_tok, 8);
  EXPECT_EQ(m.moe.moe_mlp_dim, 1536);
  EXPECT_EQ(m.moe.load_balance_loss_weight, 0.001);
  EXPECT_TRUE(m.moe.norm_topk_prob);
  EXPECT_EQ(m.rope_max_timescale, 5000000.0);
  EXPECT_EQ(m.mlp_activations, (std::vector<std::string>{"silu", "linear"}));
  // Through the config (the preset's values are its overrides).
  Config c;
  ASSERT_TRUE(c.set("model_name", std::string("qwen3-235b-a22b")).ok());
  ASSERT_TRUE(c.set("sparse_matmul", false).ok());
  ASSERT_TRUE(c.set("capacity_factor", 1.25).ok());
  Result<ResolvedConfig> r = resolve_config(c, 1);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->model.use_qk_norm);
  EXPECT_TRUE(r->model.moe.norm_topk_prob);
  EXPECT_EQ(r->model.moe.load_balance_loss_weight, 0.001);
  EXPECT_EQ(r->model.normalization_layer_epsilon, 1e-6);
  EXPECT_EQ(r->model.decoder_block, "qwen3_moe");
}

// Per layer 2E (norms) + 2EHD + 2E Hkv D (attention) + 2D (query_norm, key_norm) + E x experts
// (router) + experts x 3 E M (wi_0, wi_1, wo); plus 2VE + E. Active: 8 of the 128 experts.
TEST(Qwen3, ParameterCountsAreMaxTexts) {
  ModelConfig m = model_preset("qwen3-235b-a22b").value();
  EXPECT_EQ(m.num_params(), int64_t{235093634560});
  EXPECT_NEAR(static_cast<double>(m.num_params()) / 1e9, 235.09, 0.005 * 235.09);
  EXPECT_EQ(m.num_active_params(), int64_t{22190763520});
  EXPECT_NEAR(static_cast<double>(m.num_active_params()) / 1e9, 22.19, 0.005 * 22.19);
  for (const char* name : {"qwen3-235b-a22b", "qwen3-tiny"}) {
    for (bool scan : {false, true}) {  // the count is the declared parameters' elements
      ModelConfig t = model_preset(name).value();
      t.scan_layers = scan;
      Builder b("count");
      LlamaParams p = declare_llama_params(b, t);
      int64_t total = 0;
      for (ValueId v : p.all) total += b.info(v).shape.numel();
      EXPECT_EQ(total, t.num_params()) << name << " scan " << scan;
    }
  }
}

// MaxText's calculate_tflops_training_per_device for qwen3_moe (its default branch: the gate and
// num_experts_per_tok experts' FFN, qkv and out projections, the logits, causal attention) has no
// term for the qk norm: neither has this one.
TEST(Qwen3, TflopsAreMaxTextsWithoutTheQkNorm) {
  ModelConfig m = model_preset("qwen3-235b-a22b").value();
  const double B = 1, S = 2048, E = 4096, H = 64, Hkv = 4, D = 128, M = 1536, L = 94, V = 151936;
  const double ffn = 2 * B * S * E * 128 + 8 * (2 * B * S * M * E * 2 + 2 * B * S * M * E);
  const double qkv = 2 * B * S * E * (H + 2 * Hkv) * D, proj = 2 * B * S * E * H * D;
  const double learnable = (ffn * L + (qkv + proj) * L + 2 * B * S * E * V) * 3 / 1e12;
  const double attention = 4 * B * S * S * H * D / 2 * L * 3 / 1e12;
  const TrainingTflops with = calculate_tflops_training_per_device(m, B, 2048);
  EXPECT_NEAR(with.learnable / learnable, 1.0, 1e-12);
  EXPECT_NEAR(with.attention / attention, 1.0, 1e-12);
  m.use_qk_norm = false;
  EXPECT_EQ(calculate_tflops_training_per_device(m, B, 2048).total, with.total);
}

// t:shardings(): MaxText's scanned paths (convert_qwen3_moe.py's tree) and logical axes.
TEST(Qwen3, ShardingsAreMaxTexts) {
  Config c;
  for (auto [k, v] : std::initializer_list<std::pair<const char*, ConfigValue>>{
           {"model_name", std::string("qwen3-235b-a22b")},
           {"per_device_batch_size", 1.0},
           {"max_target_length", int64_t{2048}},
           {"sparse_matmul", false},
           {"capacity_factor", 1.25}})
    ASSERT_TRUE(c.set(k, v).ok()) << k;
  Result<std::unique_ptr<Trainer>> t =
      Trainer::create(c, *Mesh::create({"fsdp", "expert"}, {16, 8}), {.shape_only = true});
  ASSERT_TRUE(t.ok()) << t.status().message();
  Result<ShardingTable> tab = trainer_shardings(**t);
  ASSERT_TRUE(tab.ok()) << tab.status().message();
  struct Row {
    const char* path;
    const char* type;
    const char* logical;
  };
  for (const Row& w : {
           Row{"params/decoder/layers/self_attention/query_norm/scale", "f32[128,94]",
               "('norm', 'layers')"},
           Row{"params/decoder/layers/self_attention/key_norm/scale", "f32[128,94]",
               "('norm', 'layers')"},
           Row{"params/decoder/layers/self_attention/key/kernel",
               "f32[4096@(fsdp,expert),94,4,128]",
               "('embed', 'layers', 'kv_heads', 'kv_head_dim')"},
           Row{"params/decoder/layers/moe_block/wi_0", "f32[128@expert,94,4096@fsdp,1536]",
               "('exp', 'layers', 'embed_moe', 'mlp_moe')"},
           Row{"params/decoder/layers/moe_block/wo", "f32[128@expert,94,1536,4096@fsdp]",
               "('exp', 'layers', 'mlp_moe', 'embed_moe')"},
           Row{"params/decoder/layers/moe_block/gate/kernel", "f32[4096@fsdp,94,128]",
               "('embed_moe', 'layers', None)"},
       }) {
    SCOPED_TRACE(w.path);
    const ShardingRow* r = tab->find(w.path);
    ASSERT_NE(r, nullptr);
    fmt::print("[qwen3] {} {} {}\n", w.path, r->type, r->logical_string());
    EXPECT_EQ(r->type, w.type);
    EXPECT_EQ(r->logical_string(), w.logical);
  }
  EXPECT_EQ(tab->find("params/decoder/layers/MoeBlock_0/wi_0"), nullptr);  // mixtral's name
  EXPECT_EQ((*t)->config().model.num_active_params(), int64_t{22190763520});
}

// A one-layer qwen3-style model in the grad checks' small shapes (E 6, 2 query heads sharing one
// kv head of D 4, a dense MLP): its loss, every parameter pushed onto wrt.
ModelConfig qk_model() {
  ModelConfig m;
  m.name = "qk-norm-check";
  m.decoder_block = "qwen3_moe";
  m.use_qk_norm = true;
  m.vocab_size = irtest::kV;
  m.emb_dim = irtest::kE;
  m.num_query_heads = 2;
  m.num_kv_heads = 1;
  m.head_dim = irtest::kD;
  m.mlp_dim = irtest::kF;
  m.num_decoder_layers = 1;
  m.normalization_layer_epsilon = 1e-6;
  return m;
}

ValueId qk_loss(Builder& b, std::vector<ValueId>& wrt) {
  const ModelConfig m = qk_model();
  LlamaParams p = declare_llama_params(b, m);
  BatchArgs batch = declare_batch(b, m, irtest::kB, irtest::kT);
  wrt = p.all;
  return trace_llama_loss(b, m, p, batch).loss;
}

// Every parameter's gradient, query_norm and key_norm included, equals central differences of
// the loss in double (the reference interpreter); the rmsnorms run on (B, T, heads, D).
TEST(Qwen3, QkNormGradientsMatchFiniteDifferences) {
  const Program p = irtest::build_with_gradients(qk_loss);
  // The query's (B, T, H, D) and the key's (B, T, Hkv, D) rmsnorm, rstd per row (B T heads).
  const std::string text = p.to_text();
  EXPECT_NE(text.find(":f32[2,5,2,4] bf:f32[20] = rmsnorm[eps=1e-06]"), std::string::npos) << text;
  EXPECT_NE(text.find(":f32[2,5,1,4] bi:f32[10] = rmsnorm[eps=1e-06]"), std::string::npos) << text;
  std::vector<irtest::GradError> errors = irtest::check_gradients(p, irtest::make_args(p), 16);
  bool saw_query_norm = false, saw_key_norm = false;
  for (const irtest::GradError& e : errors) {
    EXPECT_LT(e.rel_err, 1e-6) << e.name;
    EXPECT_GT(e.fd_norm, 1e-6) << e.name;
    saw_query_norm |= e.name.ends_with("self_attention/query_norm/scale");
    saw_key_norm |= e.name.ends_with("self_attention/key_norm/scale");
  }
  EXPECT_TRUE(saw_query_norm && saw_key_norm);
}

// Scaling a query_norm or key_norm scale changes the loss (the norms are in the path).
TEST(Qwen3, QkNormChangesTheOutput) {
  std::vector<ValueId> wrt;
  Builder b("qk");
  b.output(qk_loss(b, wrt), "loss");
  const Program p = std::move(b).finish();
  const std::vector<HostTensor> args = irtest::make_args(p);
  auto loss = [&](const std::string& suffix, double factor) {
    std::vector<HostTensor> a = args;
    for (size_t k = 0; k < a.size(); ++k)
      if (p.value(p.args()[k].value).name.ends_with(suffix))
        for (double& x : a[k].data) x *= factor;
    Result<std::vector<HostTensor>> out = interpret(p, a);
    EXPECT_TRUE(out.ok()) << out.status().message();
    return out.ok() ? (*out)[0].data[0] : 0.0;
  };
  const double base = loss("no such parameter", 1.0);
  EXPECT_GT(std::fabs(loss("query_norm/scale", 3.0) - base), 1e-4);
  EXPECT_GT(std::fabs(loss("key_norm/scale", 3.0) - base), 1e-4);
  // The norm makes the loss invariant to the scale of the query kernel (per head RMS).
  EXPECT_NEAR(loss("self_attention/query/kernel", 7.0), base, 1e-6);  // up to eps
}

// qwen3-tiny, float32, sequences of 32, global batch 8, 4 steps (the spmd acceptance settings).
ResolvedConfig tiny_config(const std::string& dataset, int64_t steps, const Mesh& mesh,
                           double lr = 1e-3) {
  Config c;
  for (auto [k, v] : std::initializer_list<std::pair<const char*, ConfigValue>>{
           {"model_name", std::string("qwen3-tiny")},
           {"max_target_length", int64_t{32}},
           {"per_device_batch_size", 8.0 / static_cast<double>(mesh.num_devices())},
           {"dtype", std::string("float32")},
           {"steps", steps},
           {"learning_rate", lr},
           {"warmup_steps_fraction", 0.2},
           {"adam_eps", 1e-4},
           {"dataset", dataset}})
    EXPECT_TRUE(c.set(k, v).ok()) << k;
  Result<ResolvedConfig> r = resolve_config(c, mesh.num_devices());
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

constexpr const char* kFortunes = "/usr/share/games/fortunes/fortunes";

TEST(Qwen3, TinyTrainsOnFortunes) {
  if (!std::filesystem::exists(kFortunes))
    GTEST_SKIP() << kFortunes << " is missing (scripts/setup.sh installs the fortunes package)";
  const ResolvedConfig cfg = tiny_config(std::string("text:") + kFortunes, 30, Mesh(), 3e-3);
  EXPECT_EQ(cfg.model.moe.capacity_factor, 1.25);  // the preset's dense dispatch
  Result<testing::SpmdRun> r = testing::run_train_steps(cfg, Mesh(), CompileOptions{}, 30);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const float first = r->losses.front(), last = r->losses.back();
  fmt::print("[qwen3] qwen3-tiny on fortunes: loss {:.3f} -> {:.3f} in 30 steps\n", first, last);
  EXPECT_GT(first, 4.0f);  // about log(256) from the untrained model
  EXPECT_LT(last, first - 1.5f);
}


TEST(Qwen3, TinyShardedEqualsOneDevice) {
  constexpr int kSteps = 4;
  const Mesh one;
  const std::string data = "text:" + testing::varied_text_file("qwen3");
  Result<testing::SpmdRun> want =
      testing::run_train_steps(tiny_config(data, kSteps, one), one, CompileOptions{}, kSteps);
  ASSERT_TRUE(want.ok()) << want.status().message();
  EXPECT_GT(want->losses.front(), want->losses.back());  // it trains
  testing::expect_sharded_equals_one_device(
      "qwen3",
      {{{"fsdp"}, {4}}, {{"tensor"}, {2}}, {{"expert"}, {2}}, {{"fsdp", "expert"}, {2, 2}},
       {{"tensor"}, {2}, ShardMode::kExplicit}, {{"fsdp", "expert"}, {2, 2}, ShardMode::kExplicit}},
      [&](const Mesh& mesh) { return tiny_config(data, kSteps, mesh); }, kSteps, *want);
}

// use_qk_norm on a dense llama run as MaxText's pipeline over `stage` (the norms are stacked
// stage weights like the others) equals the sequential one-device run.
TEST(Qwen3, QkNormPipelineEqualsOneDevice) {
  constexpr int kSteps = 3;
  auto config = [&](const Mesh& mesh, int64_t stages) {
    Config c;
    for (auto [k, v] : std::initializer_list<std::pair<const char*, ConfigValue>>{
             {"model_name", std::string("llama-tiny")},
             {"use_qk_norm", true},
             {"base_emb_dim", int64_t{64}},
             {"base_num_query_heads", int64_t{4}},
             {"base_num_kv_heads", int64_t{2}},
             {"head_dim", int64_t{24}},
             {"base_mlp_dim", int64_t{128}},
             {"base_num_decoder_layers", int64_t{2}},
             {"max_target_length", int64_t{32}},
             {"per_device_batch_size", 8.0 / static_cast<double>(mesh.num_devices())},
             {"dtype", std::string("float32")},
             {"steps", int64_t{kSteps}},
             {"learning_rate", 1e-3},
             {"adam_eps", 1e-4},
             {"ici_pipeline_parallelism", stages},
             {"num_pipeline_microbatches", int64_t{2}}})
      EXPECT_TRUE(c.set(k, v).ok()) << k;
    Result<ResolvedConfig> r = resolve_config(c, mesh.num_devices());
    EXPECT_TRUE(r.ok()) << r.status().message();
    return *r;
  };
  Result<testing::SpmdRun> want =
      testing::run_train_steps(config(Mesh(), 1), Mesh(), CompileOptions{}, kSteps);
  ASSERT_TRUE(want.ok()) << want.status().message();
  const Mesh mesh = *Mesh::create({"stage"}, {2});
  const ResolvedConfig piped = config(mesh, 2);
  ASSERT_EQ(piped.model.pipeline_stages, 2);
  const Program p = build_train_step(piped, nullptr);  // (stages, layers per stage, D)
  const int qn = p.find_arg("params/decoder/layers/self_attention/query_norm/scale");
  ASSERT_GE(qn, 0);
  EXPECT_EQ(p.value(p.args()[qn].value).shape, Shape({2, 1, 24}));
  Result<testing::SpmdRun> got = testing::run_train_steps(piped, mesh, CompileOptions{}, kSteps);
  ASSERT_TRUE(got.ok()) << got.status().message();
  const double loss_rel = testing::max_loss_rel(got->losses, want->losses);
  fmt::print("[qwen3] qk norm, stage=2 pipeline: loss rel {:.2e}, losses {:.5f}..{:.5f}\n",
             loss_rel, got->losses.front(), got->losses.back());
  EXPECT_LT(loss_rel, 1e-5);
}

TEST(Qwen3, QkNormOnGpt3IsAnError) {
  Config c;
  ASSERT_TRUE(c.set("model_name", std::string("gpt3-tiny")).ok());
  ASSERT_TRUE(c.set("use_qk_norm", true).ok());
  Result<ResolvedConfig> r = resolve_config(c, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("use_qk_norm=true on decoder_block gpt3"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace eng
