// tests/model/zoo_test.cpp: MaxText's model zoo presets (configs/models/*.yml values), their
// parameter counts, the llama3.1 rope in the traced program, shape-only plans on each recipe's
// mesh (reference/hardware.md section 7) and the sharding table of llama3.1-70b.
#include <chrono>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "engine/model/llama.h"
#include "engine/train/config.h"
#include "engine/train/inspect.h"
#include "engine/train/trainer.h"

namespace eng {
namespace {

// MaxText's yml values, key for key (the keys this decoder reads).
struct Yml {
  const char* name;
  int64_t emb, heads, kv_heads, layers, mlp, head_dim, vocab;
  double rope_max_timescale;
};
constexpr Yml kYml[] = {
    {"llama3-8b", 4096, 32, 8, 32, 14336, 128, 128256, 500000},
    {"llama3.1-8b", 4096, 32, 8, 32, 14336, 128, 128256, 500000},
    {"llama3.1-70b", 8192, 64, 8, 80, 28672, 128, 128256, 500000},
    {"llama3.1-405b", 16384, 128, 8, 126, 53248, 128, 128256, 500000},
    {"mistral-7b", 4096, 32, 8, 32, 14336, 128, 32000, 1000000},
};

TEST(Zoo, PresetsMatchMaxTextsYml) {
  for (const Yml& y : kYml) {
    SCOPED_TRACE(y.name);
    Result<ModelConfig> m = model_preset(y.name);
    ASSERT_TRUE(m.ok()) << m.status().message();
    EXPECT_EQ(m->emb_dim, y.emb);
    EXPECT_EQ(m->num_query_heads, y.heads);
    EXPECT_EQ(m->num_kv_heads, y.kv_heads);
    EXPECT_EQ(m->num_decoder_layers, y.layers);
    EXPECT_EQ(m->mlp_dim, y.mlp);
    EXPECT_EQ(m->head_dim, y.head_dim);
    EXPECT_EQ(m->vocab_size, y.vocab);
    EXPECT_EQ(m->rope_max_timescale, y.rope_max_timescale);
    EXPECT_EQ(m->normalization_layer_epsilon, 1e-5);
    EXPECT_EQ(m->mlp_activations, (std::vector<std::string>{"silu", "linear"}));
    EXPECT_TRUE(m->validate().ok());
    // Through the config: the preset's values reach the resolved model.
    Config c;
    ASSERT_TRUE(c.set("model_name", std::string(y.name)).ok());
    Result<ResolvedConfig> r = resolve_config(c, 1);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->model.rope_max_timescale, y.rope_max_timescale);
    EXPECT_EQ(r->model.vocab_size, y.vocab);
    // None of these ymls has logical_axis_rules: base.yml's rules apply unchanged.
    EXPECT_TRUE(model_logical_axis_rules(y.name).rules().empty());
  }
}

// Totals from MaxText's shapes: per layer 2E (norms) + 2EHD (query, out) + 2E Hkv D (key,
// value) + 3EM (gated MLP); plus 2VE (embedding and logits, untied) + E (final norm).
TEST(Zoo, ParameterCountsAreMaxTexts) {
  struct Want {
    const char* name;
    int64_t exact;
    double billions;  // the published size
  };
  for (const Want& w : {Want{"llama3.1-8b", 8030261248, 8.03}, Want{"llama3-8b", 8030261248, 8.03},
                        Want{"llama3.1-70b", 70553706496, 70.55},
                        Want{"llama3.1-405b", 405853388800, 405.85},
                        Want{"mistral-7b", 7241732096, 7.24}}) {
    SCOPED_TRACE(w.name);
    ModelConfig m = model_preset(w.name).value();
    EXPECT_EQ(m.num_params(), w.exact);
    EXPECT_NEAR(static_cast<double>(m.num_params()) / 1e9, w.billions, 0.005 * w.billions);
    EXPECT_EQ(m.num_active_params(), m.num_params());  // dense: every weight, every token
    // The count equals the declared parameters' elements (scanned layout).
    Builder b("count");
    m.scan_layers = true;
    LlamaParams p = declare_llama_params(b, m);
    int64_t total = 0;
    for (ValueId v : p.all) total += b.info(v).shape.numel();
    EXPECT_EQ(total, m.num_params());
  }
}

TEST(Zoo, UnknownModelNamesTheNearestKnown) {
  Result<ModelConfig> r = model_preset("llama3-70b");
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find("unknown model 'llama3-70b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the nearest known are llama2-70b, llama3-8b, llama3.1-70b"),
            std::string::npos)
      << msg;
  Config c;
  Status s = c.set("model_name", std::string("mistral-8b"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the nearest known are mistral-7b"), std::string::npos)
      << s.message();
}

// The rope each model's attention runs: llama3.1* LLaMARotaryEmbedding (adjacent pairs, scaled),
// llama3-8b and mistral-7b RotaryEmbedding; rope_use_scale=false drops only the scaling, and
// rope_type=llama3.1 picks it for any model (MaxText's attentions.py).
TEST(Zoo, Llama31RopeIsMaxTextsLlamaRotaryEmbedding) {
  auto rope_line = [](const std::string& model, std::vector<std::pair<std::string, ConfigValue>> kv) {
    Config c;
    EXPECT_TRUE(c.set("model_name", model).ok());
    EXPECT_TRUE(c.set("base_num_decoder_layers", int64_t{1}).ok());
    EXPECT_TRUE(c.set("vocab_size", int64_t{256}).ok());
    EXPECT_TRUE(c.set("max_target_length", int64_t{16}).ok());
    EXPECT_TRUE(c.set("per_device_batch_size", 1.0).ok());
    for (auto& [k, v] : kv) EXPECT_TRUE(c.set(k, v).ok()) << k;
    Result<std::unique_ptr<Trainer>> t = Trainer::create(c, Mesh(), {.shape_only = true});
    EXPECT_TRUE(t.ok()) << t.status().message();
    if (!t.ok()) return std::string();
    const std::string text = (*t)->program().to_text();
    const size_t at = text.find("rope[");
    return at == std::string::npos ? std::string() : text.substr(at, text.find(']', at) - at + 1);
  };
  EXPECT_EQ(rope_line("llama3.1-8b", {}),
            "rope[min_timescale=1 max_timescale=500000 interleave llama31_scale]");
  EXPECT_EQ(rope_line("llama3.1-8b", {{"rope_use_scale", false}}),
            "rope[min_timescale=1 max_timescale=500000 interleave]");
  EXPECT_EQ(rope_line("llama3-8b", {}), "rope[min_timescale=1 max_timescale=500000]");
  EXPECT_EQ(rope_line("mistral-7b", {}), "rope[min_timescale=1 max_timescale=1e+06]");
  EXPECT_EQ(rope_line("llama2-7b", {{"rope_type", std::string("llama3.1")}}),
            "rope[min_timescale=1 max_timescale=10000 interleave llama31_scale]");
  Config c;
  ASSERT_TRUE(c.set("rope_type", std::string("yarn")).ok());
  Result<ResolvedConfig> r = resolve_config(c, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rope_type yarn is run only with attention_type mla"),
            std::string::npos)
      << r.status().message();
}

// Each preset compiles shape-only on its recipe's mesh (hardware.md section 7: ici_fsdp -1 on
// v6e-256, v6e-8 for mistral-7b, v5p-1024 = 512 chips for llama3.1-405b; llama3-8b has
// llama3.1-8b's shapes, so it is not planned twice) with the recipe's per_device_batch_size and
// sequence, in seconds.
TEST(Zoo, PresetsPlanShapeOnlyOnTheirRecipesMesh) {
  struct Recipe {
    const char* name;
    int64_t devices;
    double pdbs;
    int64_t seq;
  };
  for (const Recipe& rc : {Recipe{"llama3.1-8b", 256, 4, 8192},
                           Recipe{"llama3.1-70b", 256, 5, 8192},
                           Recipe{"llama3.1-405b", 512, 2, 8192}, Recipe{"mistral-7b", 8, 6, 8192}}) {
    SCOPED_TRACE(rc.name);
    Config c;
    ASSERT_TRUE(c.set("model_name", std::string(rc.name)).ok());
    ASSERT_TRUE(c.set("per_device_batch_size", rc.pdbs).ok());
    ASSERT_TRUE(c.set("max_target_length", rc.seq).ok());
    const Mesh mesh = *Mesh::create({"fsdp"}, {rc.devices});
    const auto t0 = std::chrono::steady_clock::now();
    Result<std::unique_ptr<Trainer>> t = Trainer::create(c, mesh, {.shape_only = true});
    ASSERT_TRUE(t.ok()) << t.status().message();
    auto exe = (*t)->compile();
    ASSERT_TRUE(exe.ok()) << exe.status().message();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t n = (*t)->config().model.num_params();
    const auto& mem = (*exe)->memory();
    fmt::print("[zoo] {} on fsdp={}: {:.2f}B params, compile {:.2f} s; {}\n", rc.name,
               rc.devices, n / 1e9, secs, mem.to_string());
    EXPECT_LT(secs, 30.0);
    // param + mu + nu in f32 over the fsdp devices, plus the batch.
    const double state = 3.0 * 4.0 * static_cast<double>(n) / static_cast<double>(rc.devices);
    EXPECT_GE(static_cast<double>(mem.argument_bytes), state);
    EXPECT_LT(static_cast<double>(mem.argument_bytes), state * 1.02);
    EXPECT_GT((*exe)->cost().collective_bytes.at("fsdp"), 0);
  }
}

// t:shardings() of llama3.1-70b: MaxText's scanned paths, shapes and logical axes (its
// print_shardings_params form), placed by base.yml's rules on fsdp=256.
TEST(Zoo, Llama31_70bShardingsAreMaxTexts) {
  Config c;
  ASSERT_TRUE(c.set("model_name", std::string("llama3.1-70b")).ok());
  ASSERT_TRUE(c.set("per_device_batch_size", 1.0).ok());
  ASSERT_TRUE(c.set("max_target_length", int64_t{8192}).ok());
  Result<std::unique_ptr<Trainer>> t =
      Trainer::create(c, *Mesh::create({"fsdp"}, {256}), {.shape_only = true});
  ASSERT_TRUE(t.ok()) << t.status().message();
  Result<ShardingTable> tab = trainer_shardings(**t);
  ASSERT_TRUE(tab.ok()) << tab.status().message();
  struct Row {
    const char* path;
    const char* type;
    const char* logical;
  };
  for (const Row& w : {
           Row{"params/token_embedder/embedding", "f32[128256,8192@fsdp]", "('vocab', 'embed_vocab')"},
           Row{"params/decoder/layers/self_attention/query/kernel", "f32[8192@fsdp,80,64,128]",
               "('embed', 'layers', 'q_heads', 'kv')"},
           Row{"params/decoder/layers/self_attention/key/kernel", "f32[8192@fsdp,80,8,128]",
               "('embed', 'layers', 'kv_heads', 'kv_head_dim')"},
           Row{"params/decoder/layers/self_attention/out/kernel", "f32[64,80,128,8192@fsdp]",
               "('heads', 'layers', 'kv', 'embed')"},
           Row{"params/decoder/layers/mlp/wi_0/kernel", "f32[8192@fsdp,80,28672]",
               "('embed', 'layers', 'mlp')"},
           Row{"params/decoder/layers/mlp/wo/kernel", "f32[28672,80,8192@fsdp]",
               "('mlp', 'layers', 'embed')"},
           Row{"params/decoder/layers/pre_self_attention_layer_norm/scale", "f32[8192,80]",
               "('norm', 'layers')"},
           Row{"params/decoder/decoder_norm/scale", "f32[8192]", "('norm',)"},
           Row{"params/decoder/logits_dense/kernel", "f32[8192@fsdp,128256]",
               "('embed_vocab', 'vocab')"},
       }) {
    SCOPED_TRACE(w.path);
    const ShardingRow* r = tab->find(w.path);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->type, w.type);
    EXPECT_EQ(r->logical_string(), w.logical);
  }
}

}  // namespace
}  // namespace eng
