// tests/model/vocab_tiling_test.cpp: MaxText's vocabulary tiling (num_vocab_tiling, the loss
// head in K tiles of the tokens, each tile's logits recomputed in the backward: llama.cpp's
// tiled_cross_entropy). The tiled step trains as the untiled one (float32, one device, 4 steps),
// its sharded runs equal one device, every tile's logits matmul is run again in the backward
// whatever the remat policy, the planned peak falls, and a K that does not divide the sequence
// is an error naming both.
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "engine/train/config.h"
#include "engine/train/plan.h"
#include "engine/train/train_step.h"
#include "tests/common/text_corpus.h"
#include "tests/spmd/spmd_run.h"

namespace eng {
namespace {

// llama-tiny in float32, sequences of 32, global batch 8.
Config tiny(int64_t tiles, double per_device_batch, const std::string& data) {
  Config c;
  for (auto [k, v] : std::initializer_list<std::pair<const char*, ConfigValue>>{
           {"model_name", std::string("llama-tiny")},
           {"max_target_length", int64_t{32}},
           {"per_device_batch_size", per_device_batch},
           {"dtype", std::string("float32")},
           {"learning_rate", 1e-3},
           {"adam_eps", 1e-4},
           {"num_vocab_tiling", tiles},
           {"dataset", data}})
    EXPECT_TRUE(c.set(k, v).ok()) << k;
  return c;
}

ResolvedConfig resolved(const Config& c, int64_t devices) {
  Result<ResolvedConfig> r = resolve_config(c, devices);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

TEST(VocabTiling, TrainsAsTheUntiledHeadAndShardedEqualsOneDevice) {
  constexpr int kSteps = 4;
  const Mesh one;
  const std::string data = "text:" + testing::varied_text_file("vocab_tiling");
  Result<testing::SpmdRun> untiled = testing::run_train_steps(
      resolved(tiny(1, 8.0, data), 1), one, CompileOptions{}, kSteps);
  ASSERT_TRUE(untiled.ok()) << untiled.status().message();
  Result<testing::SpmdRun> tiled = testing::run_train_steps(
      resolved(tiny(4, 8.0, data), 1), one, CompileOptions{}, kSteps);
  ASSERT_TRUE(tiled.ok()) << tiled.status().message();
  EXPECT_GT(tiled->losses.front(), tiled->losses.back());  // it trains
  // The same tokens' losses, summed in the same order; only the lm head kernel's gradient
  // sums its K tiles in another order.
  EXPECT_LT(testing::max_loss_rel(tiled->losses, untiled->losses), 1e-6);
  EXPECT_LT(testing::max_param_rel(tiled->params, untiled->params), 1e-5);
  for (auto [axes, sizes] : {std::pair<std::vector<std::string>, std::vector<int64_t>>{{"fsdp"}, {4}},
                             {{"tensor"}, {2}},
                             {{"fsdp", "tensor"}, {2, 2}}}) {
    const Mesh mesh = *Mesh::create(axes, sizes);
    Result<testing::SpmdRun> got = testing::run_train_steps(
        resolved(tiny(4, 8.0 / static_cast<double>(mesh.num_devices()), data), mesh.num_devices()),
        mesh, CompileOptions{}, kSteps);
    ASSERT_TRUE(got.ok()) << mesh.to_string() << ": " << got.status().message();
    const double loss_rel = testing::max_loss_rel(got->losses, tiled->losses);
    const double param_rel = testing::max_param_rel(got->params, tiled->params);
    fmt::print("[vocab_tiling] K=4 {}: loss rel {:.2e}, param rel {:.2e}\n", mesh.to_string(),
               loss_rel, param_rel);
    EXPECT_LT(loss_rel, 1e-5) << mesh.to_string();
    EXPECT_LT(param_rel, 1e-5) << mesh.to_string();
    EXPECT_EQ(got->max_collective_mismatch, 0) << mesh.to_string();
  }
}

// The logits matmuls ((B, T/K, E) x (E, V) -> (B, T/K, V)) of the step, as traced and as
// recomputed by the remat pass (vocab 512 is no other dim of llama-tiny's).
struct LogitsMatmuls {
  int forward = 0, recomputed = 0;
};
LogitsMatmuls logits_matmuls(const Program& p, int64_t vocab) {
  LogitsMatmuls n;
  for (const Instr& in : p.instrs()) {
    const Shape& out = p.value(in.outputs[0]).shape;
    if (in.kind != OpKind::kMatmul || out.rank() != 3 || out.dim(-1) != vocab) continue;
    (p.value(in.outputs[0]).recomputed ? n.recomputed : n.forward)++;
  }
  return n;
}

TEST(VocabTiling, EachTileIsRecomputedWhateverThePolicy) {
  for (const char* policy : {"none", "full"}) {
    Config c = tiny(4, 2.0, "synthetic");
    ASSERT_TRUE(c.set("remat_policy", std::string(policy)).ok());
    ASSERT_TRUE(c.set("vocab_size", int64_t{512}).ok());
    const ResolvedConfig r = resolved(c, 1);
    const LogitsMatmuls n = logits_matmuls(build_train_step(r, nullptr), r.model.vocab_size);
    EXPECT_EQ(n.recomputed, 4) << policy;  // one per tile, for the backward
    EXPECT_EQ(n.forward, 4) << policy;
    Config u = tiny(1, 2.0, "synthetic");
    ASSERT_TRUE(u.set("remat_policy", std::string(policy)).ok());
    ASSERT_TRUE(u.set("vocab_size", int64_t{512}).ok());
    const ResolvedConfig ru = resolved(u, 1);
    EXPECT_EQ(logits_matmuls(build_train_step(ru, nullptr), ru.model.vocab_size).recomputed, 0);
  }
}

TEST(VocabTiling, PlannedPeakFallsWithTheTiles) {
  auto peak = [](int64_t tiles) {  // llama-small: vocab 8192, 16 x its embed dim
    Config c = tiny(tiles, 8.0, "synthetic");
    EXPECT_TRUE(c.set("model_name", std::string("llama-small")).ok());
    EXPECT_TRUE(c.set("compile_topology", std::string("v5e-8")).ok());
    EXPECT_TRUE(c.set("max_target_length", int64_t{1024}).ok());
    EXPECT_TRUE(c.set("dtype", std::string("bfloat16")).ok());
    Result<Plan> p = plan_for_topology(c);
    EXPECT_TRUE(p.ok()) << p.status().message();
    return p.ok() ? p->predicted.peak_bytes : 0;
  };
  const int64_t one = peak(1), four = peak(4);
  fmt::print("[vocab_tiling] llama-small 8 x 1024 on v5e-8: peak {} bytes untiled, {} with 4 tiles\n",
             one, four);
  // The bf16 logits and their gradient, (8, 1024, 8192) each (128 MiB), shrink to a tile's
  // (8, 256, 8192); the peak, once at the loss head, moves elsewhere: more than 64 MiB lower.
  EXPECT_LT(four, one - int64_t{8} * 1024 * 8192 * 2 / 2);
}

TEST(VocabTiling, BadTileCountsAreErrors) {
  for (int64_t k : {int64_t{3}, int64_t{0}}) {
    Result<ResolvedConfig> r = resolve_config(tiny(k, 2.0, "synthetic"), 1);
    ASSERT_FALSE(r.ok()) << k;
    EXPECT_EQ(r.status().message(),
              fmt::format("config: num_vocab_tiling {} must be >= 1 and divide max_target_length "
                          "32 (the loss head's tiles split each row's tokens)",
                          k));
  }
  Config g = tiny(2, 2.0, "synthetic");
  ASSERT_TRUE(g.set("model_name", std::string("gpt3-tiny")).ok());
  Result<ResolvedConfig> r = resolve_config(g, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("num_vocab_tiling=2 with model gpt3-tiny"),
            std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace eng
