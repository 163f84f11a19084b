// tests/model/llama_test.cpp: presets, validation, parameter tree and initialisation.
#include <cmath>

#include <gtest/gtest.h>

#include "engine/model/llama.h"

namespace eng {
namespace {

TEST(LlamaTest, PresetsHaveTheReferenceShapes) {
  ModelConfig tiny = model_preset("llama-tiny").value();
  EXPECT_EQ(tiny.vocab_size, 256);
  EXPECT_EQ(tiny.emb_dim, 256);
  EXPECT_EQ(tiny.num_decoder_layers, 4);
  EXPECT_EQ(tiny.num_query_heads, 4);
  EXPECT_EQ(tiny.mlp_dim, 704);
  ModelConfig small = model_preset("llama-small").value();
  EXPECT_EQ(small.vocab_size, 8192);
  EXPECT_EQ(small.emb_dim, 512);
  ModelConfig big = model_preset("llama2-7b").value();
  EXPECT_EQ(big.emb_dim, 4096);
  EXPECT_EQ(big.mlp_dim, 11008);
  EXPECT_EQ(big.num_decoder_layers, 32);
  // llama2-7b has 6.74B parameters (untied embedding and logits).
  EXPECT_NEAR(static_cast<double>(big.num_params()), 6.738e9, 0.01e9);
}

TEST(LlamaTest, UnknownPresetListsTheKnownOnes) {
  Result<ModelConfig> r = model_preset("llama-huge");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("llama-huge"), std::string::npos);
  EXPECT_NE(r.status().message().find("llama-tiny"), std::string::npos);
}

TEST(LlamaTest, ValidateNamesTheBadValue) {
  ModelConfig m = model_preset("llama-tiny").value();
  m.emb_dim = -4;
  Status s = m.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("emb_dim must be positive, got -4"), std::string::npos);
  m = model_preset("llama-tiny").value();
  m.num_kv_heads = 2;  // grouped-query attention: 2 groups of 2 query heads
  EXPECT_TRUE(m.validate().ok());
  m.num_kv_heads = 3;
  EXPECT_EQ(m.validate().code(), Code::kInvalidArgument);
  EXPECT_NE(m.validate().message().find("num_kv_heads 3"), std::string::npos);
  m = model_preset("llama-tiny").value();
  m.head_dim = 7;
  EXPECT_NE(m.validate().message().find("head_dim 7"), std::string::npos);
}

TEST(LlamaTest, ParameterPathsAndLogicalAxesAreMaxTexts) {
  Builder b("fwd");
  ModelConfig m = model_preset("llama-tiny").value();
  LlamaParams p = declare_llama_params(b, m);
  EXPECT_EQ(static_cast<int64_t>(p.all.size()), 3 + 9 * m.num_decoder_layers);
  const ValueInfo& q = b.info(p.layers[0].query);
  EXPECT_EQ(q.name, "params/decoder/layers_0/self_attention/query/kernel");
  EXPECT_EQ(q.shape, (Shape{256, 4, 64}));
  EXPECT_EQ(q.logical, (std::vector<std::string>{"embed", "q_heads", "kv"}));
  const ValueInfo& emb = b.info(p.embedding);
  EXPECT_EQ(emb.name, "params/token_embedder/embedding");
  EXPECT_EQ(emb.logical, (std::vector<std::string>{"vocab", "embed_vocab"}));
  const ValueInfo& out = b.info(p.layers[3].out);
  EXPECT_EQ(out.shape, (Shape{4, 64, 256}));
  EXPECT_EQ(out.logical, (std::vector<std::string>{"heads", "kv", "embed"}));
  int64_t total = 0;
  for (ValueId v : p.all) total += b.info(v).shape.numel();
  EXPECT_EQ(total, m.num_params());
}

TEST(LlamaTest, InitIsDeterministicAndScaledByFanIn) {
  Builder b("fwd");
  ModelConfig m = model_preset("llama-tiny").value();
  LlamaParams p = declare_llama_params(b, m);
  const ValueInfo& wi = b.info(p.layers[0].wi_0);
  std::vector<float> a(wi.shape.numel()), c(wi.shape.numel()), d(wi.shape.numel());
  init_param(wi, 0, a.data());
  init_param(wi, 0, c.data());
  init_param(wi, 1, d.data());
  EXPECT_EQ(a, c);
  EXPECT_NE(a, d);
  double sq = 0;
  float mx = 0;
  for (float x : a) {
    sq += x * x;
    mx = std::max(mx, std::fabs(x));
  }
  const double var = sq / a.size();
  EXPECT_NEAR(var, 1.0 / 256, 0.1 / 256);               // variance 1 / fan_in
  EXPECT_LE(mx, 2.0 / 0.87962566 / std::sqrt(256.0) + 1e-6);  // truncated at 2 sigma
  const ValueInfo& scale = b.info(p.decoder_norm);
  std::vector<float> s(scale.shape.numel());
  init_param(scale, 0, s.data());
  for (float x : s) EXPECT_EQ(x, 1.0f);
  EXPECT_EQ(kernel_fan_in(b.info(p.layers[0].out)), 256);  // H * D
}

}  // namespace
}  // namespace eng
