// tests/train/trainer_test.cpp: end-to-end training on one device.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "engine/tensor/reference.h"
#include "engine/train/trainer.h"
#include "tests/train/tiny_trainer.h"

namespace eng {
namespace {

// tiny_config with longer sequences and a larger batch.
Config small_config(int64_t steps) {
  Config c = testing::tiny_config(steps);
  EXPECT_TRUE(c.set("max_target_length", int64_t{64}).ok());
  EXPECT_TRUE(c.set("per_device_batch_size", 4.0).ok());
  return c;
}

TEST(TrainerTest, LossFallsAndIsReproducible) {
  std::vector<double> first, second;
  for (auto* losses : {&first, &second}) {
    auto t = Trainer::create(small_config(30), Mesh()).value();
    ASSERT_TRUE(t->train(30, [&](const StepMetrics& m) {
                   losses->push_back(m.loss);
                   return true;
                 }).ok());
  }
  ASSERT_EQ(first.size(), 30u);
  EXPECT_EQ(first, second);  // same seed, same data: bitwise the same losses
  EXPECT_NEAR(first[0], std::log(256.0), 1.0);
  EXPECT_LT(first.back(), first[0] - 1.0);
}

TEST(TrainerTest, StepMetricsFollowMaxText) {
  auto t = Trainer::create(small_config(10), Mesh()).value();
  StepMetrics m0 = t->step_and_wait().value();
  EXPECT_TRUE(m0.compiled);
  EXPECT_EQ(m0.learning_rate, 0.0);  // warmup starts at 0, as optax.linear_schedule
  StepMetrics m1 = t->step_and_wait().value();
  EXPECT_FALSE(m1.compiled);
  EXPECT_EQ(m1.step, 1);
  EXPECT_NEAR(m1.learning_rate, 3e-3, 1e-9);  // warmup of 1 step (10% of 10)
  EXPECT_EQ(m1.total_weights, 4 * 64);
  EXPECT_GT(m1.raw_grad_norm, 0);
  EXPECT_LE(m1.grad_norm, 1.0 + 1e-6);  // clipped at gradient_clipping_threshold
  std::string line = step_line(m1);
  EXPECT_EQ(line.rfind("completed step: 1, seconds: ", 0), 0u) << line;
  EXPECT_NE(line.find("total_weights: 256, loss: "), std::string::npos) << line;
}

// MaxText's cosine divides by its length - 1 (make_cos_schedule), so the last step's learning
// rate is exactly learning_rate * learning_rate_final_fraction; dividing by the length left
// it above (3.81e-4 here instead of 3e-4).
TEST(TrainerTest, CosineScheduleEndsAtTheFinalFraction) {
  Config c = small_config(10);
  ASSERT_TRUE(c.set("learning_rate_final_fraction", 0.1).ok());
  auto t = Trainer::create(c, Mesh()).value();
  std::vector<double> lrs;
  ASSERT_TRUE(t->train(10, [&](const StepMetrics& m) {
                 lrs.push_back(m.learning_rate);
                 return true;
               }).ok());
  ASSERT_EQ(lrs.size(), 10u);
  EXPECT_EQ(lrs[9], static_cast<float>(3e-3 * 0.1));  // the last step: the final fraction
  EXPECT_EQ(lrs[1], static_cast<float>(3e-3));        // the cosine's first step: the peak
  for (size_t i = 2; i < lrs.size(); ++i) EXPECT_LT(lrs[i], lrs[i - 1]) << i;
  // The reference oracle itself, in double: exact at the end, and a one-step cosine is the end.
  EXPECT_EQ(ref::learning_rate_at(9, 3e-3, 1, 9, 0.1), 3e-3 * 0.1);
  EXPECT_EQ(ref::learning_rate_at(1, 3e-3, 1, 1, 0.1), 3e-3 * 0.1);
  EXPECT_EQ(ref::learning_rate_at(10, 3e-3, 1, 9, 0.1), 0.0);  // past the schedule: 0
}

TEST(TrainerTest, ShapeOnlyLlama7bCompilesWithoutAllocating) {
  Config c;
  ASSERT_TRUE(c.set("model_name", std::string("llama2-7b")).ok());
  ASSERT_TRUE(c.set("per_device_batch_size", 1.0).ok());
  auto t = Trainer::create(c, Mesh(), {.shape_only = true}).value();
  auto exe = t->compile();
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  const MemoryAnalysis& mem = (*exe)->memory();
  // params + mu + nu in f32 (3 x 4 x 6.74e9 bytes), plus the step counter and the six
  // (1, 2048) int32 batch arrays: a few KiB above the state.
  const int64_t state = 3 * 4 * t->config().model.num_params();
  EXPECT_GT(state, 3 * 4 * 6.7e9);
  EXPECT_GE(mem.argument_bytes, state);
  EXPECT_LT(mem.argument_bytes, state + (int64_t{1} << 20));
  EXPECT_GT(mem.temp_bytes, 0);
  EXPECT_FALSE(t->step().ok());
}

// The trainer runs on the mesh it is given: an ici_*_parallelism key that disagrees with it
// would be ignored, so it is an error naming both sizes; ici_pipeline_parallelism must always
// match the mesh's stage axis (it decides whether the decoder is traced as a pipeline).
TEST(TrainerTest, IciKeysMustMatchTheMesh) {
  auto err = [](const Config& c, const Mesh& m) {
    Result<std::unique_ptr<Trainer>> t = Trainer::create(c, m, {.shape_only = true});
    return t.ok() ? std::string() : t.status().message();
  };
  Config c = small_config(1);
  ASSERT_TRUE(c.set("ici_data_parallelism", int64_t{2}).ok());
  EXPECT_EQ(err(c, *Mesh::create({"data"}, {4})),
            "config: ici_data_parallelism=2 but the mesh's 'data' axis has size 4; the trainer runs "
            "on the mesh it is given, so make them equal (sl.mesh{data=2} or ici_data_parallelism=4)");
  EXPECT_EQ(err(c, *Mesh::create({"data", "fsdp"}, {2, 2})), "");
  EXPECT_NE(err(c, Mesh()).find("ici_data_parallelism=2 but the mesh's 'data' axis has size 1"),
            std::string::npos);
  Config fill = small_config(1);
  ASSERT_TRUE(fill.set("ici_fsdp_parallelism", int64_t{-1}).ok());  // -1: any size
  EXPECT_EQ(err(fill, *Mesh::create({"fsdp"}, {4})), "");
  Config stage = small_config(1);  // default ici_pipeline_parallelism 1
  EXPECT_NE(err(stage, *Mesh::create({"stage"}, {2})).find("ici_pipeline_parallelism=1 but the mesh's 'stage' axis has size 2"),
            std::string::npos);
  ASSERT_TRUE(stage.set("ici_pipeline_parallelism", int64_t{2}).ok());
  EXPECT_NE(err(stage, Mesh()).find("ici_pipeline_parallelism=2 but the mesh's 'stage' axis has size 1"),
            std::string::npos);
  EXPECT_EQ(err(stage, *Mesh::create({"stage"}, {2})), "");
}

}  // namespace
}  // namespace eng
