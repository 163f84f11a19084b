// tests/ir/text_test.cpp: golden Program::to_text() of a small forward + backward program.
// Refresh the golden files with SHARDLAB_UPDATE_GOLDEN=1 ./ir_test and review the diff.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "engine/ir/autodiff.h"

namespace eng {
namespace {

std::string golden_path(const std::string& name) {
  const char* dir = std::getenv("SHARDLAB_SOURCE_DIR");
  return (dir ? std::string(dir) + "/tests/ir/golden" : std::string(SHARDLAB_GOLDEN_DIR_DEFAULT)) +
         "/" + name;
}

void expect_golden(const std::string& name, const std::string& text) {
  const std::string path = golden_path(name);
  const char* update = std::getenv("SHARDLAB_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream(path) << text;
    GTEST_SKIP() << "wrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing " << path << " (run with SHARDLAB_UPDATE_GOLDEN=1)";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(text, want.str()) << "golden " << path << " differs; if intended, refresh it with "
                              << "SHARDLAB_UPDATE_GOLDEN=1";
}

// x (B,T,E) -> rmsnorm -> logits (E,V) -> cross-entropy -> masked mean loss, with gradients.
Program small_train_step() {
  Builder b("small_step");
  ValueId x =
      b.argument("inputs/x", Shape{2, 4, 8}, DType::kF32,
                 {"activation_batch", "activation_length", "activation_embed"}, ArgRole::kBatch);
  ValueId targets = b.argument("targets", Shape{2, 4}, DType::kI32, {}, ArgRole::kBatch);
  ValueId seg = b.argument("inputs_segmentation", Shape{2, 4}, DType::kI32, {}, ArgRole::kBatch);
  ValueId scale =
      b.argument("params/decoder_norm/scale", Shape{8}, DType::kF32, {"norm"}, ArgRole::kParam);
  ValueId w = b.argument("params/logits_dense/kernel", Shape{8, 16}, DType::kF32,
                         {"embed", "vocab"}, ArgRole::kParam);
  ValueId h =
      b.rmsnorm(b.constraint(x, {"activation_batch", "activation_length", "activation_embed"}),
                scale, 1e-5)
          .first;
  ValueId logits = b.matmul(h, w, 2, 1);
  ValueId loss = b.masked_mean_loss(b.softmax_cross_entropy(logits, targets).first, seg).first;
  std::vector<ValueId> g = append_gradients(b, loss, {scale, w});
  b.output(loss, "learning/loss");
  b.output(g[0], "grads/decoder_norm/scale");
  b.output(g[1], "grads/logits_dense/kernel");
  return std::move(b).finish();
}

TEST(ProgramText, SmallTrainStepGolden) {
  expect_golden("small_train_step.txt", small_train_step().to_text());
}

// Regression: out_logical and out_like are not printed, but they change how the program is
// partitioned, so the fingerprint (the compile-cache key) must cover them.
TEST(TextTest, FingerprintCoversUnprintedMatmulAttributes) {
  auto trace = [](std::vector<std::string> out_sharding, bool like) {
    Builder b("mm");
    ValueId x = b.argument("x", Shape{2, 4}, DType::kF32, {}, ArgRole::kBatch);
    ValueId w = b.argument("w", Shape{4, 3}, DType::kF32, {}, ArgRole::kParam);
    b.output(b.matmul(x, w, 1, 1, false, false, std::move(out_sharding), like ? x : kNoValue), "y");
    return std::move(b).finish();
  };
  const Program plain = trace({}, false), named = trace({"batch", "mlp"}, false),
                liked = trace({}, true);
  EXPECT_EQ(plain.to_text(), named.to_text());
  EXPECT_EQ(plain.to_text(), liked.to_text());
  EXPECT_NE(plain.fingerprint(), named.fingerprint());
  EXPECT_NE(plain.fingerprint(), liked.fingerprint());
  EXPECT_EQ(plain.fingerprint(), trace({}, false).fingerprint());
}

// The model, not the builder, names logical axes: one_hot's depth dim, repeat_kv's heads dim
// and the vmapped leading dim take the names the caller gives (engine/model/llama.cpp,
// pipeline.cpp pass MaxText's "vocab", "activation_heads", "activation_stage").
TEST(TextTest, BuilderTakesLogicalNamesFromTheModel) {
  Builder b("names");
  ValueId ids = b.argument("ids", Shape{2, 3}, DType::kI32, {"batch", "length"}, ArgRole::kBatch);
  ValueId x = b.argument("x", Shape{2, 3, 2, 4}, DType::kF32, {"batch", "length", "kv", ""},
                         ArgRole::kBatch);
  EXPECT_EQ(b.info(b.one_hot(ids, 5, "vocab")).logical,
            (std::vector<std::string>{"batch", "length", "vocab"}));
  EXPECT_EQ(b.info(b.one_hot(ids, 5)).logical, (std::vector<std::string>{"batch", "length", ""}));
  EXPECT_EQ(b.info(b.repeat_kv(x, 2, "heads")).logical,
            (std::vector<std::string>{"batch", "length", "heads", ""}));
  EXPECT_EQ(b.info(b.repeat_kv(x, 2)).logical, b.info(x).logical);
  b.set_vmap_logical("stage");
  b.set_vmap(2);
  EXPECT_EQ(b.info(b.scale(x, 2.0)).logical,
            (std::vector<std::string>{"stage", "length", "kv", ""}));
  b.set_vmap(0);
}

}  // namespace
}  // namespace eng
