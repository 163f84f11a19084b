// tests/bf16/alloc_test.cpp: a steady-state bf16 step (widened kernels included: their f32
// scratch is reserved when the executable is prepared) allocates nothing on the heap. The
// global allocator is replaced by tests/common/alloc_counter.cpp (linked into this binary).
#include <gtest/gtest.h>

#include "tests/common/alloc_counter.h"
#include "tests/train/tiny_trainer.h"

namespace eng {
namespace {

TEST(Bf16AllocTest, SteadyStateStepsAllocateNothing) {
  for (const char* weight_dtype : {"float32", "bfloat16"}) {
    Config c = eng::testing::tiny_config(20);
    ASSERT_TRUE(c.set("dtype", std::string("bfloat16")).ok());
    ASSERT_TRUE(c.set("weight_dtype", std::string(weight_dtype)).ok());
    auto t = Trainer::create(c, *Mesh::create({"fsdp"}, {2})).value();
    ASSERT_TRUE(t->compile().ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(t->step_and_wait().ok());  // warm: outputs, arenas
    bool ok = true;
    const int64_t n = eng::testing::allocations_during([&] {
      for (int i = 0; i < 5; ++i) {
        Result<StepHandle> h = t->step();
        ok = ok && h.ok();
        if (h.ok()) ok = ok && h->wait().ok();
      }
    });
    EXPECT_TRUE(ok);
    EXPECT_EQ(n, 0) << weight_dtype;
  }
}

}  // namespace
}  // namespace eng
