// tests/train/trainer_alloc_test.cpp: a steady-state asynchronous Trainer step (host load +
// dispatch + device step on the dispatcher thread + wait) allocates nothing on the heap.
// The global allocator is replaced by tests/common/alloc_counter.cpp (linked into this binary).
#include <atomic>
#include <cstdlib>
#include <functional>
#include <new>

#include <gtest/gtest.h>

#include "tests/common/alloc_counter.h"

#include "tests/train/tiny_trainer.h"

namespace eng {
namespace {

using eng::testing::allocations_during;

TEST(TrainerAllocTest, SteadyStateAsyncStepsAllocateNothing) {
  Config c = eng::testing::tiny_config(20);
  auto t = Trainer::create(c, Mesh()).value();
  ASSERT_TRUE(t->compile().ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t->step_and_wait().ok());  // warm: outputs, arenas
  bool ok = true;
  const int64_t n = allocations_during([&] {
    for (int i = 0; i < 5; ++i) {
      Result<StepHandle> h = t->step();
      ok = ok && h.ok();
      if (h.ok()) ok = ok && h->wait().ok();
    }
  });
  EXPECT_TRUE(ok);
  EXPECT_EQ(n, 0);
}

}  // namespace
}  // namespace eng
