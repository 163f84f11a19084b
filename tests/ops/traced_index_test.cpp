// tests/ops/traced_index_test.cpp: the traced-index ops (op.h's remainder,
// dynamic_slice_in_dim, dynamic_update_slice_in_dim) on int32 values written out by hand, in
// the interpreter and on 1, 2 and 4 devices (every_op_test.cpp runs them on random floats).
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

}  // namespace
}  // namespace eng
