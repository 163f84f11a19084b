// tests/runtime/alloc_test.cpp: a steady-state training step allocates nothing on the heap.
// The global allocator is replaced by tests/common/alloc_counter.cpp (linked into this binary).
#include <atomic>
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>

#include "tests/common/alloc_counter.h"

#include "engine/compile/executable.h"
#include "tests/compile/test_programs.h"
#include "tests/runtime/runtime_harness.h"

namespace eng {
namespace {

using eng::testing::allocations_during;

void expect_second_step_allocates_nothing(const Mesh& mesh) {
  testing::TinyDims d;
  d.L = 2;
  d.T = 16;
  d.B = 4;  // divisible by the 4-device data axis (the batch is sharded over it)
  Program p = testing::build_train_step(d);
  auto exe = compile(p, mesh, CompileOptions{});
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  Runtime rt(mesh);
  std::vector<HostTensor> host = testing::random_args(p, 1, d.V);
  std::vector<Array> arrays;
  for (size_t k = 0; k < host.size(); ++k)
    arrays.push_back(testing::put_host(rt, host[k], (*exe)->argument_sharding(static_cast<int>(k)), "a"));
  std::vector<Array*> ptrs;
  for (Array& a : arrays) ptrs.push_back(&a);
  std::vector<Array> outs;
  // A whole trainer step: refill the batch, execute, fetch the metrics.
  std::vector<int32_t> tokens(d.B * d.T, 3);
  float metrics[4];
  Status s1, s2, s3;
  auto step = [&] {
    for (size_t k = 0; k < arrays.size(); ++k)
      if (p.args()[k].role == ArgRole::kBatch) s1 = rt.write(arrays[k], tokens.data());
    s2 = rt.execute(**exe, ptrs, outs);
    for (int m = 0; m < 4; ++m) s3 = rt.fetch(outs[m], &metrics[m]);
  };
  int64_t first = allocations_during(step);
  ASSERT_TRUE(s1.ok() && s2.ok() && s3.ok());
  int64_t second = allocations_during(step);
  ASSERT_TRUE(s1.ok() && s2.ok() && s3.ok());
  EXPECT_TRUE(std::isfinite(metrics[0]));
  EXPECT_GT(first, 0);  // the counter works: the first step prepares the arena and outputs
  EXPECT_EQ(second, 0) << mesh.to_string();
}

TEST(Alloc, SteadyStateStepAllocatesNothing) { expect_second_step_allocates_nothing(Mesh()); }

TEST(Alloc, SteadyStateStepOnFourDevicesAllocatesNothing) {
  expect_second_step_allocates_nothing(*Mesh::create({"data"}, {4}));
}

}  // namespace
}  // namespace eng
