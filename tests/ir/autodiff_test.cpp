// tests/ir/autodiff_test.cpp: every differentiable op's VJP against central differences, and
// the structure of what append_gradients emits (seed, accumulation, constraints).
#include <cmath>

#include <gtest/gtest.h>

#include "grad_check.h"

namespace eng::irtest {
namespace {

ValueId param(Builder& b, std::vector<ValueId>& wrt, std::string name, Shape shape) {
  ValueId v = b.argument(std::move(name), std::move(shape), DType::kF32, {}, ArgRole::kParam);
  wrt.push_back(v);
  return v;
}

ValueId batch_i32(Builder& b, std::string name, Shape shape) {
  return b.argument(std::move(name), std::move(shape), DType::kI32, {}, ArgRole::kBatch);
}

// A matmul variant: out = a . b with the given shapes and attributes, differentiated wrt both.
void check_matmul(Shape sa, Shape sb, int a_split, int b_split, bool trans_a, bool trans_b) {
  expect_gradients_match([&](Builder& b, std::vector<ValueId>& wrt) {
    ValueId a = param(b, wrt, "a", sa);
    ValueId w = param(b, wrt, "b", sb);
    return cross_entropy_head(b, b.matmul(a, w, a_split, b_split, trans_a, trans_b));
  });
}

TEST(GradCheck, MatmulMultiDimRows) {  // x (B,T,E) . wq (E,H,D) -> (B,T,H,D)
  check_matmul({kB, kT, kE}, {kE, kH, kD}, 2, 1, false, false);
}

TEST(GradCheck, MatmulMultiDimContraction) {  // y (B,T,H,D) . wo (H,D,E) -> (B,T,E)
  check_matmul({kB, kT, kH, kD}, {kH, kD, kE}, 2, 2, false, false);
}

TEST(GradCheck, MatmulTransA) {  // a (H,D,B,T)^T . (H,D,E) -> (B,T,E)
  check_matmul({kH, kD, kB, kT}, {kH, kD, kE}, 2, 2, true, false);
}

TEST(GradCheck, MatmulTransB) {  // (B,T,H,D) . b (E,H,D)^T -> (B,T,E)
  check_matmul({kB, kT, kH, kD}, {kE, kH, kD}, 2, 1, false, true);
}

TEST(GradCheck, MatmulTransBMultiDimCols) {  // (B,T,E) . b (H,D,E)^T -> (B,T,H,D)
  check_matmul({kB, kT, kE}, {kH, kD, kE}, 2, 2, false, true);
}

TEST(GradCheck, MatmulTransBoth) {  // a (H,D,B,T)^T . b (E,H,D)^T -> (B,T,E)
  check_matmul({kH, kD, kB, kT}, {kE, kH, kD}, 2, 1, true, true);
}

void check_rope(bool inverse) {
  expect_gradients_match([&](Builder& b, std::vector<ValueId>& wrt) {
    ValueId x = param(b, wrt, "x", {kB, kT, kH, kD});
    ValueId pos = batch_i32(b, "positions", {kB, kT});
    return cross_entropy_head(b, b.rope(x, pos, 1.0, 10000.0, inverse));
  });
}

TEST(GradCheck, Rope) { check_rope(false); }
TEST(GradCheck, RopeInverse) { check_rope(true); }

TEST(GradCheck, CausalAttention) {
  expect_gradients_match([](Builder& b, std::vector<ValueId>& wrt) {
    ValueId q = param(b, wrt, "q", {kB, kT, kH, kD});
    ValueId k = param(b, wrt, "k", {kB, kT, kH, kD});
    ValueId v = param(b, wrt, "v", {kB, kT, kH, kD});
    return cross_entropy_head(b, b.attention(q, k, v, 1.0 / std::sqrt(double(kD))).first);
  });
}

TEST(GradCheck, RmsNorm) {
  expect_gradients_match([](Builder& b, std::vector<ValueId>& wrt) {
    ValueId x = param(b, wrt, "x", {kB, kT, kE});
    ValueId scale = param(b, wrt, "norm_scale", {kE});
    return cross_entropy_head(b, b.rmsnorm(x, scale, 1e-5).first);
  });
}

TEST(GradCheck, Swiglu) {
  expect_gradients_match([](Builder& b, std::vector<ValueId>& wrt) {
    ValueId g = param(b, wrt, "g", {kB, kT, kF});
    ValueId u = param(b, wrt, "u", {kB, kT, kF});
    return cross_entropy_head(b, b.swiglu(g, u));
  });
}

TEST(GradCheck, EmbedLookup) {
  expect_gradients_match([](Builder& b, std::vector<ValueId>& wrt) {
    ValueId table = param(b, wrt, "table", {kV, kE});
    ValueId ids = batch_i32(b, "ids", {kB, kT});
    return cross_entropy_head(b, b.embed_lookup(table, ids));
  });
}

TEST(GradCheck, OneHotMatmul) {  // the use_iota_embed path: one_hot(ids) . table
  expect_gradients_match([](Builder& b, std::vector<ValueId>& wrt) {
    ValueId table = param(b, wrt, "table", {kV, kE});
    ValueId ids = batch_i32(b, "ids", {kB, kT});
    return cross_entropy_head(b, b.matmul(b.one_hot(ids, kV), table, 2, 1));
  });
}

TEST(GradCheck, SoftmaxCrossEntropy) {
  expect_gradients_match([](Builder& b, std::vector<ValueId>& wrt) {
    ValueId logits = param(b, wrt, "logits", {kB, kT, kV});
    ValueId targets = batch_i32(b, "targets", {kB, kT});
    ValueId seg = batch_i32(b, "segmentation", {kB, kT});
    return b.masked_mean_loss(b.softmax_cross_entropy(logits, targets).first, seg).first;
  });
}

TEST(GradCheck, MaskedMeanLoss) {  // linear in xent: the gradient is the mask over the count
  expect_gradients_match([](Builder& b, std::vector<ValueId>& wrt) {
    ValueId xent = param(b, wrt, "xent", {kB, kT});
    ValueId seg = batch_i32(b, "segmentation", {kB, kT});
    return b.masked_mean_loss(xent, seg).first;
  });
}

TEST(GradCheck, ElementwiseChain) {  // add, mul, scale, convert(f32), constraint
  expect_gradients_match([](Builder& b, std::vector<ValueId>& wrt) {
    ValueId x = param(b, wrt, "x", {kB, kT, kE});
    ValueId y = param(b, wrt, "y", {kB, kT, kE});
    ValueId z = b.mul(b.add(x, y), y);
    z = b.convert(b.scale(z, 0.7), DType::kF32);
    z = b.constraint(z, {"activation_batch", "activation_length", "activation_embed"});
    return cross_entropy_head(b, z);
  });
}

TEST(GradCheck, ValueUsedTwice) {
  expect_gradients_match([](Builder& b, std::vector<ValueId>& wrt) {
    ValueId x = param(b, wrt, "x", {kB, kT, kE});
    ValueId w1 = param(b, wrt, "w1", {kE, kE});
    ValueId w2 = param(b, wrt, "w2", {kE, kE});
    ValueId h = b.add(b.matmul(x, w1, 2, 1), b.matmul(x, w2, 2, 1));
    return cross_entropy_head(b, b.add(b.mul(h, h), x));  // x used three times, h twice
  });
}

TEST(GradCheck, LossScaledByConstant) {
  expect_gradients_match([](Builder& b, std::vector<ValueId>& wrt) {
    ValueId x = param(b, wrt, "x", {kB, kT, kE});
    return b.scale(cross_entropy_head(b, x), 0.25);
  });
}

TEST(GradCheck, LossAddedToItsScaledSelf) {  // constant parts of a cotangent accumulate
  expect_gradients_match([](Builder& b, std::vector<ValueId>& wrt) {
    ValueId x = param(b, wrt, "x", {kB, kT, kE});
    ValueId loss = cross_entropy_head(b, x);
    return b.add(b.scale(loss, 0.25), loss);
  });
}

TEST(GradCheck, LossSquared) {  // a tensor cotangent reaches masked_mean_loss: its dloss form
  expect_gradients_match([](Builder& b, std::vector<ValueId>& wrt) {
    ValueId x = param(b, wrt, "x", {kB, kT, kE});
    ValueId loss = cross_entropy_head(b, x);
    return b.add(b.mul(loss, loss), loss);
  });
}

// ---- structure of the emitted backward ------------------------------------------------------

// The instructions append_gradients emitted (those after the forward's n_forward).
std::vector<Instr> backward_of(const Program& p, size_t n_forward) {
  return std::vector<Instr>(p.instrs().begin() + static_cast<long>(n_forward), p.instrs().end());
}

TEST(Autodiff, SeedIsMaskedMeanLossGradWithoutDloss) {
  Builder b("seed");
  ValueId x = b.argument("x", Shape{kB, kT}, DType::kF32, {}, ArgRole::kParam);
  ValueId seg = b.argument("segmentation", Shape{kB, kT}, DType::kI32, {}, ArgRole::kBatch);
  ValueId loss = b.scale(b.masked_mean_loss(x, seg).first, 0.5);
  const size_t n = b.program().instrs().size();
  std::vector<ValueId> g = append_gradients(b, loss, {x});
  std::vector<Instr> back = backward_of(b.program(), n);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].kind, OpKind::kMaskedMeanLossGrad);
  EXPECT_EQ(back[0].inputs.size(), 2u);
  EXPECT_DOUBLE_EQ(back[0].attrs.scale, 0.5);
  EXPECT_EQ(g[0], back[0].outputs[0]);
}

TEST(Autodiff, AccumulatesMatmulCotangentsWithAdd) {
  Builder b("twice");
  ValueId x = b.argument("x", Shape{kB, kT, kE}, DType::kF32, {}, ArgRole::kParam);
  ValueId w1 = b.argument("w1", Shape{kE, kE}, DType::kF32, {}, ArgRole::kParam);
  ValueId w2 = b.argument("w2", Shape{kE, kE}, DType::kF32, {}, ArgRole::kParam);
  ValueId loss = cross_entropy_head(b, b.add(b.matmul(x, w1, 2, 1), b.matmul(x, w2, 2, 1)));
  const size_t n = b.program().instrs().size();
  std::vector<ValueId> g = append_gradients(b, loss, {x});
  const Program& p = b.program();
  ASSERT_NE(g[0], kNoValue);
  const Instr& sum = p.instrs()[p.value(g[0]).producer];
  ASSERT_EQ(sum.kind, OpKind::kAdd);
  for (ValueId in : sum.inputs) EXPECT_EQ(p.instrs()[p.value(in).producer].kind, OpKind::kMatmul);
  // Only dx was asked for: no weight gradient matmuls (2 for dx, 1 for dlogits' dy).
  int matmuls = 0;
  for (const Instr& in : backward_of(p, n)) matmuls += in.kind == OpKind::kMatmul;
  EXPECT_EQ(matmuls, 3);
}

TEST(Autodiff, ConstraintCotangentGetsTheSameConstraint) {
  Builder b("constraint");
  const std::vector<std::string> axes{"activation_batch", "activation_length", "activation_embed"};
  ValueId x = b.argument("x", Shape{kB, kT, kE}, DType::kF32, {}, ArgRole::kParam);
  ValueId loss = cross_entropy_head(b, b.constraint(x, axes));
  const size_t n = b.program().instrs().size();
  std::vector<ValueId> g = append_gradients(b, loss, {x});
  const Program& p = b.program();
  const Instr& c = p.instrs()[p.value(g[0]).producer];
  EXPECT_GE(static_cast<size_t>(p.value(g[0]).producer), n);
  ASSERT_EQ(c.kind, OpKind::kConstraint);
  EXPECT_EQ(c.attrs.logical, to_logical_axes(axes));
  EXPECT_EQ(p.value(g[0]).logical, axes);
}

TEST(Autodiff, GradientCarriesTheParameterLogicalAxes) {
  Builder b("logical");
  ValueId x =
      b.argument("x", Shape{kB, kT, kE}, DType::kF32,
                 {"activation_batch", "activation_length", "activation_embed"}, ArgRole::kBatch);
  ValueId w =
      b.argument("wq", Shape{kE, kH, kD}, DType::kF32, {"embed", "q_heads", "kv"}, ArgRole::kParam);
  ValueId q = b.matmul(x, w, 2, 1);
  ValueId loss = cross_entropy_head(b, q);
  std::vector<ValueId> g = append_gradients(b, loss, {w});
  EXPECT_EQ(b.info(g[0]).logical, (std::vector<std::string>{"embed", "q_heads", "kv"}));
  EXPECT_EQ(b.info(g[0]).shape, (Shape{kE, kH, kD}));
}

TEST(Autodiff, UnusedWrtGetsNoGradient) {
  Builder b("unused");
  ValueId x = b.argument("x", Shape{kB, kT, kE}, DType::kF32, {}, ArgRole::kParam);
  ValueId unused = b.argument("unused", Shape{kE}, DType::kF32, {}, ArgRole::kParam);
  ValueId loss = cross_entropy_head(b, x);
  std::vector<ValueId> g = append_gradients(b, loss, {x, unused});
  EXPECT_NE(g[0], kNoValue);
  EXPECT_EQ(g[1], kNoValue);
}

TEST(Autodiff, BackwardOnlyFollowsWrtDependencies) {
  Builder b("deps");
  ValueId table = b.argument("table", Shape{kV, kE}, DType::kF32, {}, ArgRole::kParam);
  ValueId ids = b.argument("ids", Shape{kB, kT}, DType::kI32, {}, ArgRole::kBatch);
  ValueId loss = cross_entropy_head(b, b.embed_lookup(table, ids));
  const size_t n = b.program().instrs().size();
  append_gradients(b, loss, {table});
  // seed, dlogits, d(embedding out) through head (no dhead), dtable.
  std::vector<OpKind> kinds;
  for (const Instr& in : backward_of(b.program(), n)) kinds.push_back(in.kind);
  EXPECT_EQ(kinds,
            (std::vector<OpKind>{OpKind::kMaskedMeanLossGrad, OpKind::kSoftmaxCrossEntropyGrad,
                                 OpKind::kMatmul, OpKind::kEmbedLookupGrad}));
}

}  // namespace
}  // namespace eng::irtest
