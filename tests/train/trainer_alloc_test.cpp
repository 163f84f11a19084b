// tests/train/trainer_alloc_test.cpp: a steady-state asynchronous Trainer step (host load +
// dispatch + device step on the dispatcher thread + wait) allocates nothing on the heap, with
// dtype's default (bfloat16) and with float32.
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

// Allocations during 5 steps after 3 warm-up steps (outputs, arenas).
int64_t steady_state_allocations(const Config& c) {
  auto t = Trainer::create(c, Mesh()).value();
  EXPECT_TRUE(t->compile().ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(t->step_and_wait().ok());
  bool ok = true;
  const int64_t n = allocations_during([&] {
    for (int i = 0; i < 5; ++i) {
      Result<StepHandle> h = t->step();
      ok = ok && h.ok();
      if (h.ok()) ok = ok && h->wait().ok();
    }
  });
  EXPECT_TRUE(ok);
  return n;
}

// The default dtype is bfloat16: its matmuls run the engine's own avx512_bf16 GEMM, which
// allocates nothing; on a CPU without avx512_bf16 (ctest runs this binary again with
// SHARDLAB_DISABLE_AVX512_BF16=1) convert+sgemm, which allocates nothing either
// (engine/tensor/onednn_matmul.h; oneDNN, which allocates in every execute(), only on request).
TEST(TrainerAllocTest, SteadyStateAsyncStepsAllocateNothing) {
  const Config c = eng::testing::tiny_config(20);
  ASSERT_EQ(resolve_config(c, 1).value().model.dtype, DType::kBF16);
  EXPECT_EQ(steady_state_allocations(c), 0);
}

TEST(TrainerAllocTest, Float32StepsAllocateNothing) {
  Config c = eng::testing::tiny_config(20);
  ASSERT_TRUE(c.set("dtype", "float32").ok());
  EXPECT_EQ(steady_state_allocations(c), 0);
}

}  // namespace
}  // namespace eng
