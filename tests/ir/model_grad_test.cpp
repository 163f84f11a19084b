// tests/ir/model_grad_test.cpp: a whole tiny llama-like decoder layer, every parameter's
// gradient against central differences in double precision.
#include <cmath>

#include <gtest/gtest.h>

#include "grad_check.h"

namespace eng::irtest {
namespace {

// embedding -> rmsnorm -> q/k/v (E,H,D) -> rope -> causal attention -> out (H,D,E) -> residual
// -> rmsnorm -> swiglu MLP -> residual -> final norm -> logits -> masked mean loss.
ValueId tiny_llama(Builder& b, std::vector<ValueId>& wrt) {
  auto param = [&](const char* name, Shape shape, std::vector<std::string> logical) {
    ValueId v =
        b.argument(name, std::move(shape), DType::kF32, std::move(logical), ArgRole::kParam);
    wrt.push_back(v);
    return v;
  };
  auto batch = [&](const char* name) {
    return b.argument(name, Shape{kB, kT}, DType::kI32, {"activation_batch", "activation_length"},
                      ArgRole::kBatch);
  };
  ValueId embedding = param("token_embedder/embedding", {kV, kE}, {"vocab", "embed"});
  ValueId attn_norm = param("pre_self_attention_layer_norm/scale", {kE}, {"norm"});
  ValueId wq = param("self_attention/query/kernel", {kE, kH, kD}, {"embed", "q_heads", "kv"});
  ValueId wk =
      param("self_attention/key/kernel", {kE, kH, kD}, {"embed", "kv_heads", "kv_head_dim"});
  ValueId wv =
      param("self_attention/value/kernel", {kE, kH, kD}, {"embed", "kv_heads", "kv_head_dim"});
  ValueId wo = param("self_attention/out/kernel", {kH, kD, kE}, {"heads", "kv", "embed"});
  ValueId mlp_norm = param("post_self_attention_layer_norm/scale", {kE}, {"norm"});
  ValueId wi0 = param("mlp/wi_0/kernel", {kE, kF}, {"embed", "mlp"});
  ValueId wi1 = param("mlp/wi_1/kernel", {kE, kF}, {"embed", "mlp"});
  ValueId wo_mlp = param("mlp/wo/kernel", {kF, kE}, {"mlp", "embed"});
  ValueId final_norm = param("decoder_norm/scale", {kE}, {"norm"});
  ValueId logits_w = param("logits_dense/kernel", {kE, kV}, {"embed", "vocab"});
  ValueId ids = batch("ids"), positions = batch("positions"), targets = batch("targets");
  ValueId seg = batch("segmentation");
  const std::vector<std::string> act{"activation_batch", "activation_length", "activation_embed"};

  ValueId x = b.constraint(b.embed_lookup(embedding, ids), act);  // (B, T, E)
  ValueId h = b.rmsnorm(x, attn_norm, 1e-5).first;
  ValueId q = b.rope(b.matmul(h, wq, 2, 1), positions, 1.0, 10000.0);  // (B, T, H, D)
  ValueId k = b.rope(b.matmul(h, wk, 2, 1), positions, 1.0, 10000.0);
  ValueId v = b.matmul(h, wv, 2, 1);
  ValueId o = b.attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(kD))).first;
  x = b.add(x, b.matmul(o, wo, 2, 2));  // (B, T, E)
  h = b.rmsnorm(x, mlp_norm, 1e-5).first;
  ValueId m = b.swiglu(b.matmul(h, wi0, 2, 1), b.matmul(h, wi1, 2, 1));  // (B, T, F)
  x = b.constraint(b.add(x, b.matmul(m, wo_mlp, 2, 1)), act);
  h = b.rmsnorm(x, final_norm, 1e-5).first;
  ValueId logits = b.matmul(h, logits_w, 2, 1);  // (B, T, V)
  return b.masked_mean_loss(b.softmax_cross_entropy(logits, targets).first, seg).first;
}

TEST(ModelGradCheck, TinyLlamaEveryParameter) {
  Program p = build_with_gradients(tiny_llama);
  ASSERT_EQ(p.outputs().size(), 13u);
  std::vector<GradError> errors = check_gradients(p, make_args(p), /*max_samples=*/16);
  ASSERT_EQ(errors.size(), 12u);
  for (const GradError& e : errors) {
    EXPECT_LT(e.rel_err, 1e-6) << e.name;
    EXPECT_GT(e.fd_norm, 1e-6) << e.name;
  }
}

TEST(ModelGradCheck, GradientsHaveTheParameterTypes) {
  Program p = build_with_gradients(tiny_llama);
  for (size_t o = 1; o < p.outputs().size(); ++o) {
    const ValueInfo& g = p.value(p.outputs()[o].value);
    const ValueInfo& w = p.value(p.args()[o - 1].value);
    EXPECT_EQ(g.shape, w.shape) << w.name;
    EXPECT_EQ(g.dtype, w.dtype) << w.name;
    EXPECT_EQ(g.logical, w.logical) << w.name;
  }
}

}  // namespace
}  // namespace eng::irtest
