// tests/ops/traced_index_test.cpp: int32 values written out by hand, in the interpreter and on 1,
// 2 and 4 devices: the traced-index ops (op.h's remainder, dynamic_slice_in_dim,
// dynamic_update_slice_in_dim; every_op_test.cpp runs them on random floats) and integer
// arithmetic (add, mul, scale, matmul wrapping past 2^31) and int32 comparisons.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <climits>
#include <string>
#include <vector>

#include "engine/compile/executable.h"
#include "engine/ir/interpret.h"
#include "tests/common/mesh_helpers.h"
#include "tests/ir/grad_check.h"
#include "tests/runtime/runtime_harness.h"

namespace eng {
namespace {

ValueId arg(Builder& b, const std::string& name, Shape s, std::vector<std::string> logical,
            DType dtype) {
  if (logical.empty()) logical.assign(s.rank(), "");
  return b.argument(name, std::move(s), dtype, std::move(logical), ArgRole::kParam);
}

std::vector<std::vector<double>> run_on(const Program& p, const std::vector<HostTensor>& args,
                                        const Mesh& mesh) {
  return testing::run_on_runtime(p, args, mesh);
}

// jnp.remainder of int32 (Python's %: the divisor's sign; JAX's x % 0 = 0), and the traced
// start's JAX semantics (negative from the end, then clamped), against values written out by
// hand, in the interpreter and on 1, 2 and 4 devices.
TEST(TracedIndexOps, RemainderAndDynamicSliceStartsAsJax) {
  Builder b("int32_remainder");
  const Shape s{4, 3};
  ValueId x = arg(b, "x", s, {"activation_batch", ""}, DType::kI32);
  ValueId y = arg(b, "y", s, {"activation_batch", ""}, DType::kI32);
  b.output(b.remainder(x, y), "rem");
  ValueId t = arg(b, "t", Shape{4, 6}, {"activation_batch", ""}, DType::kI32);
  std::vector<ValueId> starts;
  for (int k = 0; k < 4; ++k) {
    starts.push_back(arg(b, fmt::format("start{}", k), Shape{}, {}, DType::kI32));
    b.output(b.dynamic_slice_in_dim(t, starts.back(), 1, 2), fmt::format("slice{}", k));
  }
  b.output(b.dynamic_update_slice_in_dim(t, b.dynamic_slice_in_dim(t, starts[0], 1, 2),
                                         starts[1], 1, true),
           "add_at");
  b.output(b.dynamic_update_slice_in_dim(x, x, starts[2], 0, true), "doubled");  // wraps
  const Program p = std::move(b).finish();
  std::vector<HostTensor> args = irtest::make_args(p, 5);
  args[0].data = {7, -7, 7, -7, 0, 5, INT32_MIN, 9, -9, 3, 2147483647, -1};
  args[1].data = {3, 3, -3, -3, 4, 0, -1, 1, 4, -4, 5, 2};
  const std::vector<double> rem = {1, 2, -2, -1, 0, 0, 0, 0, 3, -1, 2, 1};
  for (size_t k = 0; k < args[2].data.size(); ++k) args[2].data[k] = static_cast<double>(k);
  const double start[4] = {-1, 9, -100, 3};  // -1 -> 5 -> clamped 4; 9 -> 4; -100 -> 0; 3
  const int64_t first[4] = {4, 4, 0, 3};
  for (int k = 0; k < 4; ++k) args[3 + k].data = {start[k]};
  std::vector<std::vector<double>> want = {rem};
  for (int k = 0; k < 4; ++k) {
    want.emplace_back();
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 2; ++c) want.back().push_back(6.0 * r + first[k] + c);
  }
  want.push_back(args[2].data);  // t with t[:, 4:6] added at columns 4, 5 (start 9 clamped)
  for (int r = 0; r < 4; ++r)
    for (int c = 4; c < 6; ++c) want.back()[6 * r + c] *= 2;
  want.emplace_back();  // x + x in int32: 2 * (2^31 - 1) wraps to -2, 2 * INT32_MIN to 0
  for (double a : args[0].data)
    want.back().push_back(static_cast<double>(
        static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(2 * a)))));
  EXPECT_EQ(want.back()[10], -2.0);
  auto reference = interpret(p, args);
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  for (size_t j = 0; j < want.size(); ++j)
    EXPECT_EQ((*reference)[j].data, want[j]) << "interpreter " << j;
  for (const Mesh& mesh : {Mesh(), testing::make_mesh({"data"}, {2}),
                           testing::make_mesh({"data", "tensor"}, {2, 2})}) {
    const std::vector<std::vector<double>> got = run_on(p, args, mesh);
    ASSERT_EQ(got.size(), want.size()) << mesh.to_string();
    for (size_t j = 0; j < want.size(); ++j)
      EXPECT_EQ(got[j], want[j]) << mesh.to_string() << " output " << j;
  }
}

// Integer arithmetic (op.h OpDef::integer: jnp's int32 add, multiply, x * c): two's complement
// results, wrapping past 2^31 as XLA's integer ops do, on 1, 2 and 4 devices and in the
// interpreter; mixing i32 with a float operand, or a fractional scale of an i32, is refused.
// The integer collectives (psum, psum_scatter of int32) run from the front-end's shard_map
// (tests/frontend/tutorial_shard_map_test.lua, cells 13 and 14).
TEST(EveryOpInt32, AddMulScaleMatmulWrapAndMatchTheInterpreter) {
  const struct { int64_t B = 2, T = 4, F = 4; } z;
  const Shape s{z.B, z.T, z.F};
  Builder b("int32");
  ValueId x = arg(b, "x", s, {"activation_batch", "", ""}, DType::kI32);
  ValueId y = arg(b, "y", s, {"activation_batch", "", ""}, DType::kI32);
  b.output(b.add(x, y), "sum");
  b.output(b.mul(x, y), "product");
  b.output(b.scale(x, -3.0), "scaled");
  // The int32 matmul: x (B, T, F) times w (F, F) with F sharded as a contraction on the meshes
  // (partial sums all-reduced in int32), wrapping past 2^31.
  ValueId w = arg(b, "w", Shape{z.F, z.F}, {"embed", "mlp"}, DType::kI32);
  b.output(b.matmul(x, w, 2, 1), "matmul");
  const Program p = std::move(b).finish();
  std::vector<HostTensor> args = irtest::make_args(p, 5);
  for (size_t k = 0; k < args[0].data.size(); ++k) {  // sums past 2^31, products past 2^32
    const double i = static_cast<double>(k);
    args[0].data[k] = (k % 2 ? -1.0 : 1.0) * (2147483000.0 - 1000.0 * i);
    args[1].data[k] = (k % 3 ? 1.0 : -1.0) * (1000.0 + 7919.0 * i);
  }
  auto wrap = [](double v) {
    return static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(v))));
  };
  for (size_t k = 0; k < args[2].data.size(); ++k)  // w: small, so x's magnitude wraps the sums
    args[2].data[k] = static_cast<double>(static_cast<int64_t>(k % 7) - 3);
  std::vector<std::vector<double>> want(4);
  for (size_t k = 0; k < args[0].data.size(); ++k) {
    const double a = args[0].data[k], c = args[1].data[k];
    want[0].push_back(wrap(a + c));
    want[1].push_back(wrap(a * c));
    want[2].push_back(wrap(-3.0 * a));
  }
  const int64_t F = z.F, rows = static_cast<int64_t>(args[0].data.size()) / F;
  bool matmul_wrapped = false;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < F; ++j) {
      int64_t acc = 0;  // exact in int64: |x| < 2^31, |w| <= 3, F = 4 terms
      for (int64_t k = 0; k < F; ++k)
        acc += static_cast<int64_t>(args[0].data[r * F + k]) * static_cast<int64_t>(args[2].data[k * F + j]);
      want[3].push_back(wrap(static_cast<double>(acc)));
      matmul_wrapped |= want[3].back() != static_cast<double>(acc);
    }
  EXPECT_NE(want[0][2], args[0].data[2] + args[1].data[2]);  // the check wraps a sum
  EXPECT_NE(want[1][2], args[0].data[2] * args[1].data[2]);  // and a product
  EXPECT_TRUE(matmul_wrapped);  // some row's sum passes 2^31
  auto reference = interpret(p, args);
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  for (size_t j = 0; j < 4; ++j) EXPECT_EQ((*reference)[j].data, want[j]) << "interpreter " << j;
  for (const Mesh& mesh : {Mesh(), testing::make_mesh({"data"}, {2}),
                           testing::make_mesh({"data", "tensor"}, {2, 2})}) {
    const std::vector<std::vector<double>> got = run_on(p, args, mesh);
    ASSERT_EQ(got.size(), 4u) << mesh.to_string();
    for (size_t j = 0; j < 4; ++j) EXPECT_EQ(got[j], want[j]) << mesh.to_string() << " output " << j;
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the runtime's pool has threads
  Builder bad("mixed");
  ValueId i = arg(bad, "i", s, {}, DType::kI32);
  ValueId f = arg(bad, "f", s, {}, DType::kF32);
  EXPECT_DEATH(bad.add(i, f), "integer arithmetic needs every operand i32");
  EXPECT_DEATH(bad.scale(i, 0.5), "scale: 0.5 is not an integer");
}

// compare of int32 operands (the front-end's jnp.equal(stage, 0) inside shard_map): an int32
// 0/1 mask, exact where float32 would round (2^24 + 1 vs 2^24), in every direction, in the
// interpreter and on 1, 2 and 4 devices.
TEST(EveryOpInt32, CompareIsExact) {
  const Shape s{4, 2};
  Builder b("int32_compare");
  ValueId x = arg(b, "x", s, {"activation_batch", ""}, DType::kI32);
  ValueId y = arg(b, "y", s, {"activation_batch", ""}, DType::kI32);
  for (int d = 0; d <= static_cast<int>(CompareDirection::kGe); ++d)
    b.output(b.compare(x, y, static_cast<CompareDirection>(d)), fmt::format("cmp{}", d));
  const Program p = std::move(b).finish();
  EXPECT_EQ(p.value(p.outputs()[0].value).dtype, DType::kI32);
  std::vector<HostTensor> args = irtest::make_args(p, 5);
  args[0].data = {16777217, 16777216, -3, 5, INT32_MIN, 2147483647, 0, -1};
  args[1].data = {16777216, 16777216, 3, 5, 2147483647, INT32_MIN, 0, 1};
  std::vector<std::vector<double>> want(6);
  for (size_t k = 0; k < args[0].data.size(); ++k) {
    const int64_t a = static_cast<int64_t>(args[0].data[k]), c = static_cast<int64_t>(args[1].data[k]);
    const bool r[6] = {a == c, a != c, a < c, a <= c, a > c, a >= c};
    for (int d = 0; d < 6; ++d) want[d].push_back(r[d] ? 1.0 : 0.0);
  }
  EXPECT_EQ(want[0][0], 0.0);  // 2^24 + 1 != 2^24: float32 would say equal
  auto reference = interpret(p, args);
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  for (size_t j = 0; j < want.size(); ++j)
    EXPECT_EQ((*reference)[j].data, want[j]) << "interpreter " << j;
  for (const Mesh& mesh : {Mesh(), testing::make_mesh({"data"}, {2}),
                           testing::make_mesh({"data", "tensor"}, {2, 2})}) {
    const std::vector<std::vector<double>> got = run_on(p, args, mesh);
    ASSERT_EQ(got.size(), want.size()) << mesh.to_string();
    for (size_t j = 0; j < want.size(); ++j)
      EXPECT_EQ(got[j], want[j]) << mesh.to_string() << " output " << j;
  }
}

}  // namespace
}  // namespace eng
