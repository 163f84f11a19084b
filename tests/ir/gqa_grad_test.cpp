// tests/ir/gqa_grad_test.cpp: grouped-query attention: repeat_kv's exact semantics (op.h),
// its VJP against central differences, and a tiny GQA llama layer (4 query heads sharing 2
// kv heads) with every parameter's gradient checked in double precision.
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

// grad_check's tiny layer with grouped-query attention, as the model traces it: key and
// value projections (E, Hkv, D), rope on the kv heads, repeat_kv onto the query heads.
ValueId tiny_gqa_llama(Builder& b, std::vector<ValueId>& wrt) {
  return tiny_llama_layer(b, wrt, {.query_heads = kQHeads, .kv_heads = kKvHeads});
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
