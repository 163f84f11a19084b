// tests/bf16/alloc_test.cpp: steady-state bf16 steps allocate nothing on the heap: the fused
// bf16 kernels and the widened ops use scratch reserved when the executable is prepared.
// The exception is oneDNN's own execute(), which builds its argument map on every call
// (engine/tensor/onednn_matmul.h): with the convert+sgemm backend (SHARDLAB_BF16_MATMUL=sgemm)
// a step allocates nothing; with oneDNN, every step allocates the same small count.
// The global allocator is replaced by tests/common/alloc_counter.cpp (linked into this binary).
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/common/alloc_counter.h"
#include "tests/train/tiny_trainer.h"

namespace eng {
namespace {

// Allocations of each of 5 steady-state steps (after 3 warm-up steps).
std::vector<int64_t> step_allocations(const char* weight_dtype) {
  Config c = eng::testing::tiny_config(20);
  EXPECT_TRUE(c.set("dtype", std::string("bfloat16")).ok());
  EXPECT_TRUE(c.set("weight_dtype", std::string(weight_dtype)).ok());
  auto t = Trainer::create(c, *Mesh::create({"fsdp"}, {2})).value();
  EXPECT_TRUE(t->compile().ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(t->step_and_wait().ok());  // warm: outputs, arenas
  std::vector<int64_t> counts;
  for (int i = 0; i < 5; ++i) {
    bool ok = false;
    counts.push_back(eng::testing::allocations_during([&] {
      Result<StepHandle> h = t->step();
      ok = h.ok() && h->wait().ok();
    }));
    EXPECT_TRUE(ok);
  }
  return counts;
}

TEST(Bf16AllocTest, SteadyStateStepsAllocateNothingWithoutOnednn) {
  ASSERT_EQ(setenv("SHARDLAB_BF16_MATMUL", "sgemm", 1), 0);
  for (const char* weight_dtype : {"float32", "bfloat16"})
    EXPECT_EQ(step_allocations(weight_dtype), std::vector<int64_t>(5, 0)) << weight_dtype;
  ASSERT_EQ(unsetenv("SHARDLAB_BF16_MATMUL"), 0);
}

TEST(Bf16AllocTest, OnednnStepsAllocateTheSameEveryStep) {
  const std::vector<int64_t> counts = step_allocations("float32");
  fmt::print("[bf16 alloc] oneDNN matmuls: {} allocations per step\n", counts[0]);
  EXPECT_EQ(counts, std::vector<int64_t>(5, counts[0]));
}

}  // namespace
}  // namespace eng
