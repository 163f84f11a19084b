// tests/ir/gqa_grad_test.cpp: grouped-query attention: repeat_kv's exact semantics (op.h),
// its VJP against central differences, and a tiny GQA llama layer (4 query heads sharing 2
// kv heads) with every parameter's gradient checked in double precision.
#include <cmath>

#include <gtest/gtest.h>

#include "grad_check.h"

namespace eng::irtest {
namespace {

constexpr int64_t kQHeads = 4, kKvHeads = 2, kRepeats = kQHeads / kKvHeads;

TEST(RepeatKv, HeadHReadsKvHeadHOverRepeats) {
  Builder b("repeat_kv");
  ValueId x = b.argument("x", Shape{1, 2, 2, 3}, DType::kF32, {}, ArgRole::kBatch);
  ValueId y = b.repeat_kv(x, 3);
  EXPECT_EQ(b.info(y).shape, (Shape{1, 2, 6, 3}));
  b.output(y, "y");
  OpAttrs a;
  a.size = 3;
  b.output(b.emit(OpKind::kRepeatKvGrad, {y}, a)[0], "dx");
  Program p = std::move(b).finish();
  HostTensor xt;
  xt.shape = Shape{1, 2, 2, 3};
  for (int i = 0; i < 12; ++i) xt.data.push_back(i);
  Result<std::vector<HostTensor>> out = interpret(p, {xt});
  ASSERT_TRUE(out.ok()) << out.status().message();
  const std::vector<double>& yv = (*out)[0].data;
  for (int t = 0; t < 2; ++t)
    for (int h = 0; h < 6; ++h)
      for (int d = 0; d < 3; ++d)
        EXPECT_EQ(yv[(t * 6 + h) * 3 + d], xt.data[(t * 2 + h / 3) * 3 + d]) << t << h << d;
  for (int i = 0; i < 12; ++i) EXPECT_EQ((*out)[1].data[i], 3.0 * xt.data[i]);  // R copies summed
  EXPECT_NE(p.to_text().find("repeat_kv[repeats=3]"), std::string::npos) << p.to_text();
}

TEST(GradCheck, RepeatKv) {
  expect_gradients_match([](Builder& b, std::vector<ValueId>& wrt) {
    ValueId x = b.argument("kv", Shape{kB, kT, kKvHeads, kD}, DType::kF32, {}, ArgRole::kParam);
    wrt.push_back(x);
    return cross_entropy_head(b, b.repeat_kv(x, kRepeats));
  });
}

// model_grad_test's tiny llama with grouped-query attention, as the model traces it: key and
// value projections (E, Hkv, D), rope on the kv heads, repeat_kv onto the query heads.
ValueId tiny_gqa_llama(Builder& b, std::vector<ValueId>& wrt) {
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
  ValueId wq = param("self_attention/query/kernel", {kE, kQHeads, kD}, {"embed", "q_heads", "kv"});
  ValueId wk = param("self_attention/key/kernel", {kE, kKvHeads, kD},
                     {"embed", "kv_heads", "kv_head_dim"});
  ValueId wv = param("self_attention/value/kernel", {kE, kKvHeads, kD},
                     {"embed", "kv_heads", "kv_head_dim"});
  ValueId wo = param("self_attention/out/kernel", {kQHeads, kD, kE}, {"heads", "kv", "embed"});
  ValueId mlp_norm = param("post_self_attention_layer_norm/scale", {kE}, {"norm"});
  ValueId wi0 = param("mlp/wi_0/kernel", {kE, kF}, {"embed", "mlp"});
  ValueId wi1 = param("mlp/wi_1/kernel", {kE, kF}, {"embed", "mlp"});
  ValueId wo_mlp = param("mlp/wo/kernel", {kF, kE}, {"mlp", "embed"});
  ValueId final_norm = param("decoder_norm/scale", {kE}, {"norm"});
  ValueId logits_w = param("logits_dense/kernel", {kE, kV}, {"embed", "vocab"});
  ValueId ids = batch("ids"), positions = batch("positions"), targets = batch("targets");
  ValueId seg = batch("segmentation");

  ValueId x = b.embed_lookup(embedding, ids);  // (B, T, E)
  ValueId h = b.rmsnorm(x, attn_norm, 1e-5).first;
  ValueId q = b.rope(b.matmul(h, wq, 2, 1), positions, 1.0, 10000.0);  // (B, T, H, D)
  ValueId k = b.rope(b.matmul(h, wk, 2, 1), positions, 1.0, 10000.0);  // (B, T, Hkv, D)
  ValueId v = b.matmul(h, wv, 2, 1);
  k = b.repeat_kv(k, kRepeats);  // (B, T, H, D)
  v = b.repeat_kv(v, kRepeats);
  ValueId o = b.attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(kD))).first;
  x = b.add(x, b.matmul(o, wo, 2, 2));  // (B, T, E)
  h = b.rmsnorm(x, mlp_norm, 1e-5).first;
  ValueId m = b.swiglu(b.matmul(h, wi0, 2, 1), b.matmul(h, wi1, 2, 1));  // (B, T, F)
  x = b.add(x, b.matmul(m, wo_mlp, 2, 1));
  h = b.rmsnorm(x, final_norm, 1e-5).first;
  ValueId logits = b.matmul(h, logits_w, 2, 1);  // (B, T, V)
  return b.masked_mean_loss(b.softmax_cross_entropy(logits, targets).first, seg).first;
}

TEST(ModelGradCheck, TinyGqaLlamaEveryParameter) {
  Program p = build_with_gradients(tiny_gqa_llama);
  std::vector<GradError> errors = check_gradients(p, make_args(p), /*max_samples=*/16);
  ASSERT_EQ(errors.size(), 12u);
  for (const GradError& e : errors) {
    EXPECT_LT(e.rel_err, 1e-6) << e.name;
    EXPECT_GT(e.fd_norm, 1e-6) << e.name;
  }
  // The key/value gradients come back through repeat_kv_grad with the kv-head shapes.
  for (size_t o = 1; o < p.outputs().size(); ++o)
    EXPECT_EQ(p.value(p.outputs()[o].value).shape, p.value(p.args()[o - 1].value).shape);
  EXPECT_NE(p.to_text().find("repeat_kv_grad"), std::string::npos);
}

}  // namespace
}  // namespace eng::irtest
