// tests/ir/interpret_test.cpp: the reference interpreter: argument validation and the
// optimizer/metric ops against hand-written formulas.
#include <cmath>

#include <gtest/gtest.h>

#include "engine/ir/builder.h"
#include "engine/ir/interpret.h"

namespace eng {
namespace {

HostTensor tensor(Shape shape, std::vector<double> data, DType dtype = DType::kF32) {
  return HostTensor{std::move(shape), dtype, std::move(data)};
}
HostTensor scalar(double x, DType dtype = DType::kF32) { return tensor(Shape{}, {x}, dtype); }

Program small_matmul() {
  Builder b("mm");
  ValueId x = b.argument("inputs/x", Shape{2, 3}, DType::kF32, {}, ArgRole::kBatch);
  ValueId w = b.argument("params/w", Shape{3, 2}, DType::kF32, {}, ArgRole::kParam);
  b.output(b.matmul(x, w, 1, 1), "y");
  return std::move(b).finish();
}

TEST(Interpret, MatmulMatchesHandResult) {
  Program p = small_matmul();
  auto r = interpret(p, {tensor({2, 3}, {1, 2, 3, 4, 5, 6}), tensor({3, 2}, {1, 0, 0, 1, 1, 1})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].shape, (Shape{2, 2}));
  EXPECT_EQ((*r)[0].data, (std::vector<double>{4, 5, 10, 11}));
}

TEST(Interpret, WrongArgumentShapeNamesTheArgument) {
  Program p = small_matmul();
  auto r = interpret(
      p, {tensor({2, 3}, std::vector<double>(6)), tensor({2, 3}, std::vector<double>(6))});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("params/w"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("f32[3,2]"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("f32[2,3]"), std::string::npos) << r.status().message();
}

TEST(Interpret, WrongArgumentDtypeAndCountAreErrors) {
  Program p = small_matmul();
  auto wrong_dtype = interpret(p, {tensor({2, 3}, std::vector<double>(6), DType::kI32),
                                   tensor({3, 2}, std::vector<double>(6))});
  ASSERT_FALSE(wrong_dtype.ok());
  EXPECT_NE(wrong_dtype.status().message().find("inputs/x"), std::string::npos);
  auto wrong_count = interpret(p, {tensor({2, 3}, std::vector<double>(6))});
  ASSERT_FALSE(wrong_count.ok());
  EXPECT_NE(wrong_count.status().message().find("expected 2 arguments, got 1"), std::string::npos)
      << wrong_count.status().message();
  auto short_data = interpret(
      p, {tensor({2, 3}, std::vector<double>(5)), tensor({3, 2}, std::vector<double>(6))});
  ASSERT_FALSE(short_data.ok());
  EXPECT_NE(short_data.status().message().find("inputs/x"), std::string::npos);
}

TEST(Interpret, TargetOutOfRangeIsAnError) {
  Builder b("xent");
  ValueId logits = b.argument("logits", Shape{1, 2, 3}, DType::kF32, {}, ArgRole::kBatch);
  ValueId targets = b.argument("targets", Shape{1, 2}, DType::kI32, {}, ArgRole::kBatch);
  b.output(b.softmax_cross_entropy(logits, targets).first, "xent");
  Program p = std::move(b).finish();
  auto r = interpret(
      p, {tensor({1, 2, 3}, std::vector<double>(6)), tensor({1, 2}, {0, 3}, DType::kI32)});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("target 3 out of range [0, 3)"), std::string::npos)
      << r.status().message();
}

TEST(Interpret, MaskedMeanLossAndSeed) {
  Builder b("loss");
  ValueId xent = b.argument("xent", Shape{1, 4}, DType::kF32, {}, ArgRole::kBatch);
  ValueId seg = b.argument("segmentation", Shape{1, 4}, DType::kI32, {}, ArgRole::kBatch);
  auto [loss, weights] = b.masked_mean_loss(xent, seg);
  OpAttrs half;
  half.scale = 0.5;
  ValueId seed = b.emit(OpKind::kMaskedMeanLossGrad, {seg, weights}, half)[0];
  ValueId dxent = b.emit(OpKind::kMaskedMeanLossGrad, {seg, weights, loss})[0];
  b.output(loss, "loss");
  b.output(weights, "weights");
  b.output(seed, "seed");
  b.output(dxent, "dxent");
  Program p = std::move(b).finish();
  auto r = interpret(p, {tensor({1, 4}, {1, 2, 3, 4}), tensor({1, 4}, {1, 0, 2, 0}, DType::kI32)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const double tw = 2 + 1e-8, loss_v = 4 / tw;
  EXPECT_DOUBLE_EQ((*r)[0].data[0], loss_v);
  EXPECT_DOUBLE_EQ((*r)[1].data[0], 2.0);
  EXPECT_EQ((*r)[2].data, (std::vector<double>{0.5 / tw, 0, 0.5 / tw, 0}));
  EXPECT_EQ((*r)[3].data, (std::vector<double>{loss_v / tw, 0, loss_v / tw, 0}));
}

TEST(Interpret, OptimizerOpsFollowOptax) {
  Builder b("opt");
  ValueId p0 = b.argument("params/w", Shape{2}, DType::kF32, {}, ArgRole::kParam);
  ValueId g = b.argument("grad", Shape{2}, DType::kF32, {}, ArgRole::kBatch);
  ValueId mu = b.argument("opt/mu", Shape{2}, DType::kF32, {}, ArgRole::kOptMu);
  ValueId nu = b.argument("opt/nu", Shape{2}, DType::kF32, {}, ArgRole::kOptNu);
  ValueId step = b.argument("step", Shape{}, DType::kI32, {}, ArgRole::kStep);
  ValueId norm = b.global_norm({b.sum_squares(g), b.sum_squares(p0)});
  ValueId clip = b.clip_factor(norm, 1.0);
  ValueId lr = b.learning_rate(step, 0.1, 4, 10, 0.1);
  auto [p1, mu1, nu1] = b.adamw(p0, g, mu, nu, lr, clip, step, 0.9, 0.95, 1e-8, 0.01);
  b.output(norm, "norm");
  b.output(clip, "clip");
  b.output(lr, "lr");
  b.output(p1, "params/w", 0);
  b.output(mu1, "opt/mu", 2);
  b.output(nu1, "opt/nu", 3);
  b.output(b.increment(step), "step", 4);
  Program p = std::move(b).finish();
  std::vector<HostTensor> args{tensor({2}, {1, -2}), tensor({2}, {3, 4}), tensor({2}, {0.1, 0.2}),
                               tensor({2}, {0.01, 0.02}), scalar(2, DType::kI32)};
  auto r = interpret(p, args);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const double n = std::sqrt(25.0 + 5.0), c = 1.0 / n, rate = 0.1 * 2 / 4;
  EXPECT_DOUBLE_EQ((*r)[0].data[0], n);
  EXPECT_DOUBLE_EQ((*r)[1].data[0], c);
  EXPECT_DOUBLE_EQ((*r)[2].data[0], rate);
  const double count = 3, c1 = 1 - std::pow(0.9, count), c2 = 1 - std::pow(0.95, count);
  for (int i = 0; i < 2; ++i) {
    const double gi = c * args[1].data[i];
    const double m = 0.9 * args[2].data[i] + 0.1 * gi, v = 0.95 * args[3].data[i] + 0.05 * gi * gi;
    const double upd = (m / c1) / (std::sqrt(v / c2) + 1e-8) + 0.01 * args[0].data[i];
    EXPECT_NEAR((*r)[3].data[i], args[0].data[i] - rate * upd, 1e-15);
    EXPECT_NEAR((*r)[4].data[i], m, 1e-15);
    EXPECT_NEAR((*r)[5].data[i], v, 1e-15);
  }
  EXPECT_EQ((*r)[6].data[0], 3.0);
  EXPECT_EQ(args[0].data, (std::vector<double>{1, -2}));  // in place outputs leave args alone
}

TEST(Interpret, ConvertToBf16Rounds) {
  Builder b("convert");
  ValueId x = b.argument("x", Shape{2}, DType::kF32, {}, ArgRole::kBatch);
  b.output(b.convert(x, DType::kBF16), "bf16");
  b.output(b.convert(x, DType::kF32), "f32");
  Program p = std::move(b).finish();
  auto r = interpret(p, {tensor({2}, {1.0 + 1.0 / 512, 0.1})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].data[0], 1.0);  // 8 mantissa bits: 1 + 2^-9 rounds to even
  EXPECT_EQ((*r)[0].data[1], static_cast<double>(bf16_to_f32(f32_to_bf16(0.1f))));
  EXPECT_EQ((*r)[1].data[1], 0.1);  // f32 convert is an identity in the interpreter
}

}  // namespace
}  // namespace eng
