// tests/frontend/frontend_test.cpp: engine/frontend without Lua: numpy-like ops traced into a
// Program, compiled and run on simulated devices, equal to the reference interpreter; result
// shardings; checked errors instead of aborts.
#include <gtest/gtest.h>

#include "engine/frontend/numpy.h"
#include "engine/frontend/numpy_ops.h"
#include "engine/frontend/trace.h"
#include "engine/ir/interpret.h"

namespace eng::frontend {
namespace {

std::vector<double> iota(int64_t n, double scale) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<double>((i * 7) % 11 - 5);
  return v;
}

Mesh mesh_2x2(AxisType t) { return *Mesh::create({"X", "Y"}, {2, 2}, t); }

// y = sum(gelu(x . w) * 0.5 + x . w, axis 1) for x (8, 6), w (6, 4).
struct Built {
  std::shared_ptr<Compiled> compiled;
};
Result<Built> build(const Mesh& mesh, const PartitionSpec& xs, const PartitionSpec& ws) {
  Trace tr("f", mesh);
  ValueId x = tr.input("x", Shape{8, 6}, DType::kF32, xs);
  ValueId w = tr.input("w", Shape{6, 4}, DType::kF32, ws);
  ENG_ASSIGN_OR_RETURN(ValueId h, np::matmul(tr, x, w, PartitionSpec({{"X"}, {}})));
  ENG_ASSIGN_OR_RETURN(ValueId g, np::unary(tr, "gelu", h));
  ENG_ASSIGN_OR_RETURN(ValueId gs, np::scale(tr, g, 0.5));
  ENG_ASSIGN_OR_RETURN(ValueId s, np::add(tr, gs, h));
  ENG_ASSIGN_OR_RETURN(ValueId y, np::sum(tr, s, 1));
  ENG_ASSIGN_OR_RETURN(auto c, Compiled::create(std::move(tr), {y}, {"f", {}}));
  return Built{c};
}

TEST(Frontend, ShardedRunEqualsInterpreter) {
  const std::vector<double> xv = iota(48, 0.25), wv = iota(24, 0.5);
  // The reference: the traced program evaluated in double.
  Result<Built> one = build(*Mesh::create({"X", "Y"}, {1, 1}), PartitionSpec(), PartitionSpec());
  ASSERT_TRUE(one.ok()) << one.status().message();
  std::vector<HostTensor> args = {{Shape{8, 6}, DType::kF32, xv}, {Shape{6, 4}, DType::kF32, wv}};
  const Program& traced = one->compiled->traced();
  for (size_t k = 2; k < traced.args().size(); ++k) {  // the captured vector of ones
    const ValueInfo& v = traced.value(traced.args()[k].value);
    args.push_back(
        {v.shape, v.dtype, std::vector<double>(static_cast<size_t>(v.shape.numel()), 1.0)});
  }
  Result<std::vector<HostTensor>> want = interpret(traced, args);
  ASSERT_TRUE(want.ok()) << want.status().message();
  for (AxisType t : {AxisType::kAuto, AxisType::kExplicit}) {
    const Mesh mesh = mesh_2x2(t);
    Result<Built> b = build(mesh, PartitionSpec({{"X"}, {"Y"}}), PartitionSpec({{"Y"}, {}}));
    ASSERT_TRUE(b.ok()) << b.status().message();
    // sum over axis 1 keeps dim 0 where it was: on X.
    EXPECT_EQ(b->compiled->out_shardings()[0].spec, PartitionSpec({{"X"}}));
    Result<ArrayRef> x =
        device_put(xv, Shape{8, 6}, DType::kF32, {mesh, PartitionSpec({{"X"}, {"Y"}})});
    Result<ArrayRef> w =
        device_put(wv, Shape{6, 4}, DType::kF32, {mesh, PartitionSpec({{"Y"}, {}})});
    ASSERT_TRUE(x.ok() && w.ok());
    std::vector<ArrayRef> ins = {*x, *w};
    Result<std::vector<ArrayRef>> out = b->compiled->run(ins);
    ASSERT_TRUE(out.ok()) << out.status().message();
    Result<std::vector<double>> got = fetch(*(*out)[0]);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(got->size(), (*want)[0].data.size());
    for (size_t i = 0; i < got->size(); ++i)
      EXPECT_NEAR((*got)[i], (*want)[0].data[i],
                  1e-4 * std::max(1.0, std::abs((*want)[0].data[i])));
  }
}

TEST(Frontend, UserErrorsAreStatusesNotAborts) {
  Trace tr("f", mesh_2x2(AxisType::kExplicit));
  ValueId a = tr.input("a", Shape{3, 4}, DType::kF32, PartitionSpec());
  ValueId b = tr.input("b", Shape{5}, DType::kF32, PartitionSpec());
  ValueId i = tr.input("i", Shape{4}, DType::kI32, PartitionSpec());
  Result<ValueId> r = np::add(tr, a, b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "Incompatible shapes for broadcasting: shapes=[(3, 4), (5,)]");
  EXPECT_FALSE(np::matmul(tr, a, b).ok());
  EXPECT_FALSE(np::reshape(tr, a, {5, -1}).ok());
  EXPECT_FALSE(np::sum(tr, a, 2).ok());
  EXPECT_FALSE(np::slice(tr, a, 0, 2, 2).ok());
  EXPECT_FALSE(np::matmul(tr, i, a).ok());  // int32 promotes beside float32; then (4,) . (3, 4)
  EXPECT_FALSE(np::unary(tr, "abs", i).ok());  // abs has no int32 kernel (int32 arithmetic)
  EXPECT_FALSE(np::unary(tr, "no_such_op", a).ok());
  EXPECT_FALSE(np::sharding_constraint(tr, a, PartitionSpec({{"Z"}}), true).ok());
  Result<ValueId> c = np::concatenate(tr, {a, b}, 0);
  EXPECT_FALSE(c.ok());
}

TEST(Frontend, DroppedCompiledReleasesItsArena) {
  const Mesh mesh = mesh_2x2(AxisType::kAuto);
  Result<ArrayRef> x = device_put(iota(48, 1.0), Shape{8, 6}, DType::kF32, {mesh, PartitionSpec()});
  Result<ArrayRef> w = device_put(iota(24, 1.0), Shape{6, 4}, DType::kF32, {mesh, PartitionSpec()});
  ASSERT_TRUE(x.ok() && w.ok());
  std::shared_ptr<Runtime> rt = find_runtime(mesh);
  ASSERT_NE(rt, nullptr);
  const int64_t before = rt->device(0).bytes_in_use();
  {
    Result<Built> b = build(mesh, PartitionSpec(), PartitionSpec());
    ASSERT_TRUE(b.ok()) << b.status().message();
    std::vector<ArrayRef> ins = {*x, *w};
    Result<std::vector<ArrayRef>> out = b->compiled->run(ins);
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_GT(rt->device(0).bytes_in_use(), before);  // the result and the arena
  }
  EXPECT_EQ(rt->device(0).bytes_in_use(), before);
}

TEST(Frontend, BroadcastIsNumpys) {
  EXPECT_EQ(*np::broadcast_shapes(Shape{8, 1, 3}, Shape{4, 1}), (Shape{8, 4, 3}));
  EXPECT_EQ(*np::broadcast_shapes(Shape{}, Shape{2, 2}), (Shape{2, 2}));
  EXPECT_FALSE(np::broadcast_shapes(Shape{2, 3}, Shape{3, 2}).ok());
}

// softmax = exp(x - max) / sum(exp(x - max)) traces the exp once and uses it twice.
TEST(Frontend, SoftmaxTracesOneExp) {
  Trace tr("f", mesh_2x2(AxisType::kAuto));
  ValueId x = tr.input("x", Shape{4, 6}, DType::kF32, PartitionSpec());
  ASSERT_TRUE(np::softmax(tr, x, -1).ok());
  int exps = 0;
  for (const Instr& in : tr.builder().program().instrs()) exps += in.kind == OpKind::kExp;
  EXPECT_EQ(exps, 1);
}

}  // namespace
}  // namespace eng::frontend
