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

// Mixture of experts (4 experts, top-2, the load-balance loss on), in both dispatch modes: the
// routing kernels (engine/tensor/moe.h) keep their per-token rows in per-thread scratch.
Config moe_config(bool dropless, const char* dtype) {
  Config c = eng::testing::tiny_config(20);
  for (auto [k, v] : std::initializer_list<std::pair<const char*, ConfigValue>>{
           {"num_experts", int64_t{4}},
           {"num_experts_per_tok", int64_t{2}},
           {"sparse_matmul", dropless},
           {"capacity_factor", dropless ? -1.0 : 1.25},
           {"load_balance_loss_weight", 0.01},
           {"dtype", std::string(dtype)}})
    EXPECT_TRUE(c.set(k, v).ok()) << k;
  return c;
}

TEST(TrainerAllocTest, MoeDenseDispatchStepsAllocateNothing) {
  EXPECT_EQ(steady_state_allocations(moe_config(false, "float32")), 0);
  EXPECT_EQ(steady_state_allocations(moe_config(false, "bfloat16")), 0);
}

TEST(TrainerAllocTest, MoeDroplessStepsAllocateNothing) {
  EXPECT_EQ(steady_state_allocations(moe_config(true, "float32")), 0);
  EXPECT_EQ(steady_state_allocations(moe_config(true, "bfloat16")), 0);
}

// A StepMetrics held while its slot is reused (kStepSlots steps later) keeps its MoE values:
// the step writes into a fresh buffer instead of the held one.
TEST(TrainerAllocTest, HeldMoeMetricsKeepTheirValues) {
  Config c = moe_config(false, "float32");
  ASSERT_TRUE(c.set("steps", int64_t{Trainer::kStepSlots + 2}).ok());
  auto t = Trainer::create(c, Mesh()).value();
  ASSERT_TRUE(t->step_and_wait().ok());
  const StepMetrics held = t->last_step_metrics().value();
  std::vector<double> copy;
  for (const auto& [name, v] : held.extra) copy.push_back(v);
  ASSERT_EQ(copy.size(), 1u + 2 * 4 * 2);
  for (int i = 0; i < Trainer::kStepSlots; ++i) ASSERT_TRUE(t->step_and_wait().ok());
  const StepMetrics now = t->last_step_metrics().value();
  ASSERT_EQ(now.step, held.step + Trainer::kStepSlots);  // the same slot
  double lb_now = now.extra[0].second;
  for (size_t k = 0; k < copy.size(); ++k) EXPECT_EQ(held.extra[k].second, copy[k]) << k;
  EXPECT_NE(lb_now, copy[0]);  // the reused slot holds the later step's values
}

}  // namespace
}  // namespace eng
