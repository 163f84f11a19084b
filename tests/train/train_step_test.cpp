// tests/train/train_step_test.cpp: the train_step program's layout and MaxText's TFLOPs formula.
#include <chrono>

#include <gtest/gtest.h>

#include "engine/compile/spmd.h"
#include "engine/train/train_step.h"

namespace eng {
namespace {

TEST(TflopsTest, MaxTextTinyConfigCheckValue) {
  // compile_cache_test's tiny model: B=1, S=64, E=16, Hq=Hkv=4, hd=64, mlp=16, L=1, V=32.
  ModelConfig m;
  m.vocab_size = 32;
  m.emb_dim = 16;
  m.num_query_heads = m.num_kv_heads = 4;
  m.head_dim = 64;
  m.mlp_dim = 16;
  m.num_decoder_layers = 1;
  TrainingTflops t = calculate_tflops_training_per_device(m, 1.0, 64);
  EXPECT_NEAR(t.learnable, 6.782976e-6, 1e-15);
  EXPECT_NEAR(t.attention, 6.291456e-6, 1e-15);
  EXPECT_NEAR(t.total, 1.3074432e-5, 1e-15);
}

TEST(TrainStepTest, OneProgramWithAliasedStateAndMaxTextMetrics) {
  Config c;
  ASSERT_TRUE(c.set("base_num_decoder_layers", int64_t{1}).ok());
  ResolvedConfig r = resolve_config(c, 1).value();
  TrainStepLayout layout;
  Program p = build_train_step(r, &layout);
  const int n = layout.num_params;
  EXPECT_EQ(n, 3 + 9);
  ASSERT_EQ(static_cast<int>(p.args().size()), 3 * n + 1 + 6);
  EXPECT_EQ(p.value(p.args()[n].value).name, "opt_state/mu/token_embedder/embedding");
  EXPECT_EQ(p.value(p.args()[layout.step_arg].value).name, "step");
  EXPECT_EQ(p.value(p.args()[layout.first_batch_arg].value).name, "inputs");
  EXPECT_EQ(p.value(p.args()[layout.first_batch_arg + 5].value).name, "targets_segmentation");
  for (int i = 0; i <= 3 * n; ++i) EXPECT_EQ(p.outputs()[i].aliased_arg, i);
  EXPECT_EQ(p.outputs()[layout.first_metric_output].name, "learning/loss");
  EXPECT_EQ(p.find_output("learning/current_learning_rate"),
            layout.first_metric_output + 5);
  int adamw = 0, grads = 0;
  for (const Instr& in : p.instrs()) {
    adamw += in.kind == OpKind::kAdamW;
    grads += in.kind == OpKind::kAttentionGrad;
  }
  EXPECT_EQ(adamw, n);
  EXPECT_EQ(grads, 1);
}

// The trainer finds batch arrays and metrics by name in the layout build_train_step returns.
TEST(TrainStepTest, LayoutNamesEveryBatchArrayAndMetric) {
  Config c;
  ASSERT_TRUE(c.set("base_num_decoder_layers", int64_t{1}).ok());
  ResolvedConfig r = resolve_config(c, 1).value();
  TrainStepLayout layout;
  Program p = build_train_step(r, &layout);
  ASSERT_EQ(layout.batch.size(), 6u);
  for (const char* name : {"inputs", "inputs_position", "inputs_segmentation", "targets",
                           "targets_position", "targets_segmentation"})
    EXPECT_EQ(layout.batch.find(name), p.find_arg(name)) << name;
  ASSERT_EQ(layout.metrics.size(), 6u);
  for (const char* name : {"learning/loss", "learning/total_weights", "learning/raw_grad_norm",
                           "learning/grad_norm", "learning/param_norm",
                           "learning/current_learning_rate"})
    EXPECT_EQ(layout.metrics.find(name), p.find_output(name)) << name;
  EXPECT_EQ(layout.metrics.find("learning/nope"), -1);
  EXPECT_EQ(layout.batch.find("params/decoder/decoder_norm/scale"), -1);  // a param, not batch
}

TEST(TrainStepTest, Llama7bTracesInWellUnderASecond) {
  Config c;
  ASSERT_TRUE(c.set("model_name", std::string("llama2-7b")).ok());
  ASSERT_TRUE(c.set("per_device_batch_size", 1.0).ok());
  ResolvedConfig r = resolve_config(c, 256).value();
  auto t0 = std::chrono::steady_clock::now();
  TrainStepLayout layout;
  Program p = build_train_step(r, &layout);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 2.0);
  int64_t params = 0;
  for (int i = 0; i < layout.num_params; ++i) params += p.value(p.args()[i].value).shape.numel();
  EXPECT_EQ(params, r.model.num_params());
}

// MaxText's configs/models/llama2-{7b,13b,70b}.yml override ['norm', 'fsdp']; pyconfig merges
// base.yml's rules, then the model's, then the user's (same-name rules removed, new ones
// appended). The norm scales follow fsdp on those presets, tensor elsewhere.
TEST(TrainStepTest, Llama2PresetsShardNormScalesOverFsdp) {
  const Mesh mesh = *Mesh::create({"fsdp", "tensor"}, {2, 2});
  auto norm_spec = [&](const std::string& model, const std::string& user_rules) {
    Config c;
    EXPECT_TRUE(c.set("model_name", model).ok());
    EXPECT_TRUE(c.set("per_device_batch_size", 1.0).ok());
    if (!user_rules.empty()) {
      EXPECT_TRUE(c.set("logical_axis_rules", user_rules).ok());
    }
    Result<CompileOptions> o = compile_options_from_config(c);
    EXPECT_TRUE(o.ok()) << o.status().message();
    Result<ResolvedConfig> r = resolve_config(c, 4);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!o.ok() || !r.ok()) return std::string();
    TrainStepLayout layout;
    const Program p = build_train_step(*r, &layout);
    auto shardings = argument_shardings(p, mesh, *o);
    EXPECT_TRUE(shardings.ok()) << shardings.status().message();
    if (!shardings.ok()) return std::string();
    for (size_t i = 0; i < p.args().size(); ++i)
      if (p.value(p.args()[i].value).name == "params/decoder/decoder_norm/scale")
        return (*shardings)[i].spec.to_string();
    return std::string("(no norm)");
  };
  for (const char* model : {"llama2-7b", "llama2-13b", "llama2-70b"}) {
    EXPECT_EQ(norm_spec(model, ""), "P('fsdp')") << model;
    const LogicalAxisRules rules = model_logical_axis_rules(model);
    ASSERT_EQ(rules.size(), 1) << model;
    EXPECT_EQ(rules[0].to_string(), "['norm', 'fsdp']");
  }
  EXPECT_EQ(norm_spec("llama-tiny", ""), "P('tensor')");  // base.yml's norm rule
  // The user's rules merge after the model's: the last word on `norm` is theirs.
  EXPECT_EQ(norm_spec("llama2-7b", "[['norm', ['tensor']]]"), "P('tensor')");
  // And the merged list has the model rule where MaxText puts it: base norm rule gone, appended.
  Config c;
  ASSERT_TRUE(c.set("model_name", std::string("llama2-7b")).ok());
  const LogicalAxisRules merged = compile_options_from_config(c)->rules;
  EXPECT_EQ(merged.size(), LogicalAxisRules::maxtext_default().size());
  EXPECT_EQ(merged[merged.size() - 1].to_string(), "['norm', 'fsdp']");
  ASSERT_EQ(merged.find("norm").size(), 1u);
}

}  // namespace
}  // namespace eng
