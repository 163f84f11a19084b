// tests/model/gpt3_test.cpp: MaxText's gpt3 decoder: gpt3-175b's parameter tree and count and its
// shape-only plan on its recipe's mesh; gpt3-tiny trained on the fortunes corpus (loss falls)
// and its sharded runs (fsdp, tensor, both) equal to one device over 4 steps.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "engine/model/gpt3.h"
#include "engine/train/config.h"
#include "engine/train/inspect.h"
#include "engine/train/trainer.h"
#include "tests/spmd/spmd_run.h"
#include "tests/common/text_corpus.h"

namespace eng {
namespace {

// gpt3-175b.yml: 12288 emb, 96 heads of 128, mlp 49152, 96 layers, vocab 50304, 16384
// positions. Per layer 9E (norm scales and biases, out and wo biases) + 4E^2 (qkv_proj, out)
// + 3HD (qkv bias) - counted once as 3E - + 2EM + M; plus VE + PE + 2E.
TEST(Gpt3, PresetsAndParameterCounts) {
  ModelConfig m = model_preset("gpt3-175b").value();
  EXPECT_EQ(m.decoder_block, "gpt3");
  EXPECT_EQ(m.emb_dim, 12288);
  EXPECT_EQ(m.num_query_heads, 96);
  EXPECT_EQ(m.num_kv_heads, 96);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.mlp_dim, 49152);
  EXPECT_EQ(m.num_decoder_layers, 96);
  EXPECT_EQ(m.vocab_size, 50304);
  EXPECT_EQ(m.trainable_position_size, 16384);
  EXPECT_EQ(m.mlp_activations, (std::vector<std::string>{"gelu"}));
  EXPECT_TRUE(m.logits_via_embedding && m.fused_qkv && m.use_iota_embed);
  EXPECT_TRUE(m.validate().ok()) << m.validate().message();
  EXPECT_EQ(m.num_params(), int64_t{174780997632});
  EXPECT_NEAR(static_cast<double>(m.num_params()) / 1e9, 175.0, 0.005 * 175.0);
  // MaxText's own smallest gpt3 (configs/models/gpt3-52k.yml): 52,464 parameters.
  EXPECT_EQ(model_preset("gpt3-52k").value().num_params(), 52464);
  // The count is the declared parameters' elements, scanned and not.
  for (bool scan : {false, true}) {
    ModelConfig t = model_preset("gpt3-tiny").value();
    t.scan_layers = scan;
    Builder b("count");
    Gpt3Params p = declare_gpt3_params(b, t);
    int64_t total = 0;
    for (ValueId v : p.all) total += b.info(v).shape.numel();
    EXPECT_EQ(total, t.num_params()) << scan;
  }
}

TEST(Gpt3, TinyDefaultsResolve) {  // batch 8 x 256, as llama-tiny
  Config c;
  ASSERT_TRUE(c.set("model_name", std::string("gpt3-tiny")).ok());
  Result<ResolvedConfig> r = resolve_config(c, 1);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->max_target_length, 256);
  EXPECT_EQ(r->global_batch_size, 8);
  EXPECT_TRUE(r->model.use_iota_embed);
}

TEST(Gpt3, BadKeysAreClearErrors) {
  ModelConfig m = model_preset("gpt3-tiny").value();
  m.num_kv_heads = 2;
  EXPECT_NE(m.validate().message().find("gpt3 needs num_kv_heads == num_query_heads"),
            std::string::npos)
      << m.validate().message();
  Config c;
  ASSERT_TRUE(c.set("model_name", std::string("gpt3-tiny")).ok());
  ASSERT_TRUE(c.set("max_target_length", int64_t{2048}).ok());
  Result<ResolvedConfig> r = resolve_config(c, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("max_target_length 2048 exceeds model gpt3-tiny's "
                                      "trainable_position_size 1024"),
            std::string::npos)
      << r.status().message();
  Config p;
  ASSERT_TRUE(p.set("model_name", std::string("gpt3-tiny")).ok());
  ASSERT_TRUE(p.set("rope_type", std::string("llama3.1")).ok());
  r = resolve_config(p, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no effect on gpt3"), std::string::npos)
      << r.status().message();
}

// gpt3-175b on its v5p-1024 recipe's mesh (configs/tpu/v5p/gpt3_175b: ici_fsdp 64 x ici_tensor
// 8, per_device_batch_size 4, base.yml's sequence 2048), shape-only; MaxText's paths and
// logical axes in t:shardings().
TEST(Gpt3, Gpt3_175bPlansShapeOnly) {
  Config c;
  ASSERT_TRUE(c.set("model_name", std::string("gpt3-175b")).ok());
  ASSERT_TRUE(c.set("per_device_batch_size", 4.0).ok());
  ASSERT_TRUE(c.set("max_target_length", int64_t{2048}).ok());
  const Mesh mesh = *Mesh::create({"fsdp", "tensor"}, {64, 8});
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::unique_ptr<Trainer>> t = Trainer::create(c, mesh, {.shape_only = true});
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto exe = (*t)->compile();
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("[gpt3] gpt3-175b on fsdp=64 x tensor=8: compile {:.2f} s; {}\n", secs,
             (*exe)->memory().to_string());
  EXPECT_LT(secs, 30.0);
  EXPECT_GT((*exe)->cost().collective_bytes.at("fsdp"), 0);
  EXPECT_GT((*exe)->cost().collective_bytes.at("tensor"), 0);
  Result<ShardingTable> tab = trainer_shardings(**t);
  ASSERT_TRUE(tab.ok()) << tab.status().message();
  struct Row {
    const char* path;
    const char* shape_logical;
  };
  for (const Row& w : {
           Row{"params/token_embedder/embedding", "('vocab', 'embed_vocab')"},
           Row{"params/position_embedder/embedding", "('vocab', 'embed_vocab')"},
           Row{"params/decoder/layers/self_attention/qkv_proj/kernel",
               "('embed', 'layers', 'qkv', 'heads', 'kv')"},
           Row{"params/decoder/layers/self_attention/qkv_proj/bias",
               "('qkv', 'layers', 'heads', 'kv')"},
           Row{"params/decoder/layers/self_attention/out/kernel", "('heads', 'layers', 'kv', 'embed')"},
           Row{"params/decoder/layers/self_attention/out/bias", "('embed', 'layers')"},
           Row{"params/decoder/layers/pre_self_attention_norm/scale", "('norm', 'layers')"},
           Row{"params/decoder/layers/mlp/mlp_layer_norm/bias", "('norm', 'layers')"},
           Row{"params/decoder/layers/mlp/wi/kernel", "('embed', 'layers', 'mlp')"},
           Row{"params/decoder/layers/mlp/wi/bias", "('mlp', 'layers')"},
           Row{"params/decoder/layers/mlp/wo/kernel", "('mlp', 'layers', 'embed')"},
           Row{"params/decoder/decoder_norm/bias", "('norm',)"},
       }) {
    const ShardingRow* r = tab->find(w.path);
    ASSERT_NE(r, nullptr) << w.path;
    EXPECT_EQ(r->logical_string(), w.shape_logical) << w.path;
  }
  EXPECT_EQ(tab->find("params/decoder/layers/self_attention/qkv_proj/kernel")->type,
            "f32[12288@fsdp,96,3,96@tensor,128]");
  EXPECT_EQ(tab->find("params/decoder/logits_dense/kernel"), nullptr);  // logits via the embedding
}

// gpt3-tiny, float32, one sequence of 32 per device, 4 steps (the spmd acceptance settings).
ResolvedConfig tiny_config(const std::string& dataset, int64_t steps, int64_t devices,
                           double lr = 1e-3) {
  Config c;
  EXPECT_TRUE(c.set("model_name", std::string("gpt3-tiny")).ok());
  EXPECT_TRUE(c.set("max_target_length", int64_t{32}).ok());
  EXPECT_TRUE(c.set("per_device_batch_size", 8.0 / static_cast<double>(devices)).ok());
  EXPECT_TRUE(c.set("dtype", std::string("float32")).ok());
  EXPECT_TRUE(c.set("steps", steps).ok());
  EXPECT_TRUE(c.set("learning_rate", lr).ok());
  EXPECT_TRUE(c.set("warmup_steps_fraction", 0.2).ok());
  EXPECT_TRUE(c.set("adam_eps", 1e-4).ok());
  if (!dataset.empty()) {
    EXPECT_TRUE(c.set("dataset", dataset).ok());
  }
  Result<ResolvedConfig> r = resolve_config(c, devices);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

constexpr const char* kFortunes = "/usr/share/games/fortunes/fortunes";

TEST(Gpt3, TinyTrainsOnFortunes) {
  if (!std::filesystem::exists(kFortunes))
    GTEST_SKIP() << kFortunes << " is missing (scripts/setup.sh installs the fortunes package)";
  const ResolvedConfig cfg = tiny_config(std::string("text:") + kFortunes, 30, 1, 3e-3);
  Result<testing::SpmdRun> r = testing::run_train_steps(cfg, Mesh(), CompileOptions{}, 30);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const float first = r->losses.front(), last = r->losses.back();
  fmt::print("[gpt3] gpt3-tiny on fortunes: loss {:.3f} -> {:.3f} in 30 steps\n", first, last);
  EXPECT_GT(first, 4.0f);  // about log(256) from the untrained model
  EXPECT_LT(last, first - 1.5f);
}


TEST(Gpt3, TinyShardedEqualsOneDevice) {
  constexpr int kSteps = 4;
  const Mesh one;
  const std::string data = "text:" + testing::varied_text_file("gpt3");
  const ResolvedConfig one_cfg = tiny_config(data, kSteps, 1);
  Result<testing::SpmdRun> want = testing::run_train_steps(one_cfg, one, CompileOptions{}, kSteps);
  ASSERT_TRUE(want.ok()) << want.status().message();
  for (const auto& [axes, sizes] :
       std::vector<std::pair<std::vector<std::string>, std::vector<int64_t>>>{
           {{"fsdp"}, {4}}, {{"tensor"}, {2}}, {{"fsdp", "tensor"}, {2, 2}}, {{"data"}, {2}}}) {
    const Mesh mesh = *Mesh::create(axes, sizes);
    const ResolvedConfig cfg = tiny_config(data, kSteps, mesh.num_devices());
    Result<testing::SpmdRun> got = testing::run_train_steps(cfg, mesh, CompileOptions{}, kSteps);
    ASSERT_TRUE(got.ok()) << mesh.to_string() << ": " << got.status().message();
    const double loss_rel = testing::max_loss_rel(got->losses, want->losses);
    const double param_rel = testing::max_param_rel(got->params, want->params);
    // The parameter farthest from the one-device run, by name.
    const Program prog = build_train_step(cfg, nullptr);
    size_t worst = 0;
    double worst_rel = -1;
    for (size_t i = 0; i < want->params.size(); ++i) {
      const double rel = testing::max_param_rel({got->params[i]}, {want->params[i]});
      if (rel > worst_rel) worst_rel = rel, worst = i;
    }
    fmt::print("[gpt3] {}: loss rel {:.2e}, param rel {:.2e} (largest: {})\n", mesh.to_string(),
               loss_rel, param_rel, prog.value(prog.args()[worst].value).name);
    EXPECT_LT(loss_rel, 1e-5) << mesh.to_string();
    EXPECT_LT(param_rel, 1e-5) << mesh.to_string();
    EXPECT_EQ(got->max_collective_mismatch, 0) << mesh.to_string();
  }
}

}  // namespace
}  // namespace eng
