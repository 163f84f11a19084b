// tests/ops/ragged_all_to_all_test.cpp: op.h's kRaggedAllToAll partitioned over a mesh axis: the
// members split over data make it a collective over data, its cost the balanced estimate and
// its communicator's count the rows actually moved (every_op_test.cpp checks it as every op).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/compile/executable.h"
#include "engine/ir/interpret.h"
#include "engine/runtime/runtime.h"
#include "tests/common/mesh_helpers.h"
#include "tests/ir/grad_check.h"
#include "tests/runtime/runtime_harness.h"

namespace eng {
namespace {

using K = OpKind;

ValueId arg(Builder& b, const std::string& name, Shape s, std::vector<std::string> logical,
            DType dtype) {
  return b.argument(name, std::move(s), dtype, std::move(logical), ArgRole::kParam);
}

// The ragged all-to-all's partitioned form: the members split over data make it a collective
// over data (balanced bytes in the cost), whose receivers count the rows actually moved.
TEST(RaggedAllToAll, MembersSplitOverDataExchangeAcrossDevices) {
  const Mesh mesh2 = testing::make_mesh({"data"}, {2});
  const int64_t T = 3, N = 5, E = 4;
  Builder b("ragged_all_to_all");
  const std::vector<std::string> il = {"", "activation_batch", ""};
  ValueId x = arg(b, "x", Shape{T, 2, N, E}, {"", "activation_batch", "", ""}, DType::kF32);
  std::vector<ValueId> in = {x};
  for (const char* name : {"in_off", "send", "out_off"})
    in.push_back(arg(b, name, Shape{T, 2, 2}, il, DType::kI32));
  OpAttrs a;
  a.size = 2 * N;
  b.output(b.emit(K::kRaggedAllToAll, in, a)[0], "y");
  const Program p = std::move(b).finish();
  std::vector<HostTensor> args = irtest::make_args(p, 3);
  for (size_t k = 0; k < args[1].data.size(); ++k) {  // sender s's rows [0, n) at s * N
    args[1].data[k] = 0;
    args[2].data[k] = static_cast<double>((k * 7 + 1) % (N + 1));
    args[3].data[k] = static_cast<double>(N * ((k / 2) % 2));
  }
  auto want = interpret(p, args);
  ASSERT_TRUE(want.ok()) << want.status().message();
  const Executable* exe = nullptr;
  std::shared_ptr<const Executable> keep;
  auto got = testing::run_on_runtime(p, args, mesh2, &keep);
  exe = keep.get();
  testing::expect_close(got[0], (*want)[0].data, 1e-6, 1e-7, "ragged_all_to_all on data=2");
  int seen = 0;
  for (const Instr& i : exe->program().instrs())
    if (i.kind == K::kRaggedAllToAll) {
      ++seen;
      EXPECT_EQ(i.attrs.mesh_axes, std::vector<std::string>{"data"});
      EXPECT_EQ(exe->program().value(i.inputs[0]).shape[1], 1);  // one member per device
      // The cost's balanced estimate: each device's x (T, 1, N, E) f32, half from the other.
      EXPECT_DOUBLE_EQ(collective_bytes_received(exe->program(), i),
                       static_cast<double>(T * N * E * 4) / 2);
    }
  EXPECT_EQ(seen, 1);
  // The communicator counts the rows it copied: device r gets sum_l send[l, s, r] rows of E
  // floats from the other member s (offsets 0 and s x N, all inside the 2N-row buffer), plus
  // the output's all-gather (the compiled bytes of everything but the exchange).
  Runtime rt(mesh2);
  std::vector<Array> arrays;
  for (size_t k = 0; k < args.size(); ++k)
    arrays.push_back(testing::put_host(rt, args[k], exe->argument_sharding(static_cast<int>(k)),
                                       p.value(p.args()[k].value).name));
  std::vector<Array*> ptrs;
  for (Array& x : arrays) ptrs.push_back(&x);
  std::vector<Array> outs;
  rt.communicator().reset_counters();
  ASSERT_TRUE(rt.execute(*exe, ptrs, outs).ok());
  double ragged_cost = 0;
  for (const Instr& i : exe->program().instrs())
    if (i.kind == K::kRaggedAllToAll) ragged_cost = collective_bytes_received(exe->program(), i);
  for (int r = 0; r < 2; ++r) {
    double rows = 0;
    for (int64_t l = 0; l < T; ++l) rows += args[2].data[static_cast<size_t>((l * 2 + (1 - r)) * 2 + r)];
    const double want = exe->cost().collective_bytes.at("data") - ragged_cost + rows * E * 4;
    EXPECT_DOUBLE_EQ(rt.communicator().bytes_received(r)["data"], want) << "device " << r;
  }
}

}  // namespace
}  // namespace eng
