// tests/frontend/frontend_test.cpp: engine/frontend without Lua: numpy-like ops traced into a
// Program, compiled and run on simulated devices, equal to the reference interpreter; result
// shardings; checked errors instead of aborts.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/frontend/numpy.h"
#include "engine/frontend/numpy_jax.h"
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

namespace eng::frontend {
namespace {

// The traced-index ops as JAX's: x[i] / dynamic_slice_in_dim with an int32 start taken at run
// time (negative from the end, then clamped so the window fits), x.at[i].add(v) (dropped out
// of range), jnp.pad, and
// jnp.remainder of int32 and float32 (the divisor's sign), on 1 device and a 2x2 mesh of both
// axis types with x split over X; each start run through one compiled program.
TEST(Frontend, TracedIndicesAreJaxs) {
  const std::vector<double> xv = iota(24, 1.0);  // x (4, 6)
  const std::vector<double> av = {7, -7, 7, -7, 0, 5}, bv = {3, 3, -3, -3, 4, 0};
  for (const Mesh& mesh : {*Mesh::create({"X", "Y"}, {1, 1}), mesh_2x2(AxisType::kAuto),
                           mesh_2x2(AxisType::kExplicit)}) {
    const PartitionSpec xs({{"X"}, {}});
    Trace tr("f", mesh);
    ValueId x = tr.input("x", Shape{4, 6}, DType::kF32, xs);
    ValueId i = tr.input("i", Shape{}, DType::kI32, PartitionSpec());
    ValueId a = tr.input("a", Shape{6}, DType::kI32, PartitionSpec());
    ValueId b = tr.input("b", Shape{6}, DType::kI32, PartitionSpec());
    Result<ValueId> row = np::dynamic_index(tr, x, i);
    Result<ValueId> cols = np::dynamic_slice_in_dim(tr, x, i, 3, 1);
    Result<ValueId> added = np::at_update(tr, x, i, tr.scalar(100, DType::kF32), true);
    Result<ValueId> rem = np::remainder(tr, a, b);
    Result<ValueId> frem = np::remainder(tr, np::astype(tr, a, DType::kF32).value(),
                                         tr.scalar(-2.5, DType::kF32));
    Result<ValueId> padded = np::pad(tr, x, {{1, 0}, {0, 2}});
    for (const auto* r : {&row, &cols, &added, &rem, &frem, &padded})
      ASSERT_TRUE(r->ok()) << r->status().message();
    Result<std::shared_ptr<Compiled>> c =
        Compiled::create(std::move(tr), {*row, *cols, *added, *rem, *frem, *padded}, {"f", {}});
    ASSERT_TRUE(c.ok()) << c.status().message();
    for (int start : {1, -1, 9, -100}) {
      // JAX's start: + n when negative, then clamped into [0, n - size]: 4 rows, 6 columns.
      const int64_t r = std::clamp(start < 0 ? start + 4 : start, 0, 3);
      const int64_t c0 = std::clamp(start < 0 ? start + 6 : start, 0, 3);
      std::vector<ArrayRef> ins = {
          device_put(xv, Shape{4, 6}, DType::kF32, {mesh, xs}).value(),
          device_put({static_cast<double>(start)}, Shape{}, DType::kI32, {mesh, {}}).value(),
          device_put(av, Shape{6}, DType::kI32, {mesh, {}}).value(),
          device_put(bv, Shape{6}, DType::kI32, {mesh, {}}).value()};
      Result<std::vector<ArrayRef>> out = (*c)->run(ins);
      ASSERT_TRUE(out.ok()) << out.status().message();
      std::vector<std::vector<double>> got;
      for (const ArrayRef& o : *out) got.push_back(fetch(*o).value());
      std::vector<double> want_row, want_cols, want_added = xv, want_pad;
      for (int k = 0; k < 6; ++k) want_row.push_back(xv[r * 6 + k]);
      for (int q = 0; q < 4; ++q)
        for (int k = 0; k < 3; ++k) want_cols.push_back(xv[q * 6 + c0 + k]);
      // x.at[i].add: an i outside [-4, 4) drops the update (JAX's scatter mode).
      if (start >= -4 && start < 4)
        for (int k = 0; k < 6; ++k) want_added[r * 6 + k] += 100;
      want_pad.assign(8, 0);  // a zero row, then each row with two zeros after it
      for (int q = 0; q < 4; ++q) {
        for (int k = 0; k < 6; ++k) want_pad.push_back(xv[q * 6 + k]);
        want_pad.insert(want_pad.end(), {0, 0});
      }
      const std::string at = fmt::format("{} start {}", mesh.to_string(), start);
      EXPECT_EQ(got[0], want_row) << at;
      EXPECT_EQ(got[1], want_cols) << at;
      EXPECT_EQ(got[2], want_added) << at;
      EXPECT_EQ(got[3], (std::vector<double>{1, 2, -2, -1, 0, 0})) << at;
      EXPECT_EQ(got[4], (std::vector<double>{-0.5, -2, -0.5, -2, 0, 0})) << at;
      EXPECT_EQ(got[5], want_pad) << at;
    }
  }
}

TEST(Frontend, TracedIndexErrorsAreStatuses) {
  Trace tr("f", mesh_2x2(AxisType::kExplicit));
  ValueId x = tr.input("x", Shape{4, 6}, DType::kF32, PartitionSpec());
  ValueId f = tr.input("f", Shape{}, DType::kF32, PartitionSpec());
  ValueId v = tr.input("v", Shape{2}, DType::kI32, PartitionSpec());
  ValueId i = tr.input("i", Shape{}, DType::kI32, PartitionSpec());
  auto message = [](const Result<ValueId>& r) { return r.ok() ? "ok" : r.status().message(); };
  EXPECT_EQ(message(np::dynamic_slice_in_dim(tr, x, f, 2, 0)),
            "dynamic_slice_in_dim: the index must be an int32 scalar, got f32[]");
  EXPECT_EQ(message(np::dynamic_index(tr, x, v)),
            "dynamic_slice_in_dim: the index must be an int32 scalar, got i32[2]");
  EXPECT_EQ(message(np::dynamic_slice_in_dim(tr, x, i, 7, 1)),
            "dynamic_slice_in_dim: slice size 7 out of range for axis 1 of size 6 (array (4, 6))");
  EXPECT_EQ(message(np::pad(tr, x, {{1, 1}})),
            "pad: 1 (before, after) pairs for an array of dimension 2 (4, 6)");
  EXPECT_EQ(message(np::pad(tr, x, {{1, 1}, {0, -1}})), "pad: negative padding (0, -1) for axis 1");
  EXPECT_EQ(message(np::dynamic_update_slice_in_dim(tr, x, x, i, 0)), "ok");
  EXPECT_EQ(message(np::dynamic_update_slice_in_dim(tr, x, v, i, 0)),
            "dynamic_update_slice_in_dim: update of shape (2,) does not fit array (4, 6) along "
            "axis 0");
}

}  // namespace
}  // namespace eng::frontend
