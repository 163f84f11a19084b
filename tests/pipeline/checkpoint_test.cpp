// tests/pipeline/checkpoint_test.cpp: a checkpoint of a circular pipeline's
// params
// ((R, S, lps, ...) stacks) restores into the sequential model
// (layers_<l>/...), the scanned model and a pipeline of another shape, and back
// (engine/train/checkpoint_layout.cpp): every restored tensor holds exactly the
// values the target model initialises it with (init_param gives layer l the
// same values in every layout).
#include "engine/train/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "engine/model/llama.h"
#include "engine/train/config.h"
#include "engine/train/train_step.h"
#include "tests/common/tiny_config.h"
#include "tests/pipeline/pipeline_run.h"

namespace eng {
namespace {

Config layout(int64_t stages, int64_t repeats, bool scan) {
  Config c = testing::tiny_llama_config({.model_name = "llama-tiny",
                                         .emb_dim = 16,
                                         .query_heads = 2,
                                         .kv_heads = 2,
                                         .head_dim = 8,
                                         .mlp_dim = 32,
                                         .layers = 8,
                                         .vocab_size = 128,
                                         .seq = 8,
                                         .per_device_batch = 1.0});
  EXPECT_TRUE(c.set("dtype", "float32").ok());
  EXPECT_TRUE(c.set("ici_pipeline_parallelism", stages).ok());
  EXPECT_TRUE(testing::pin_pipeline_repeats(c).ok());
  if (repeats > 0) {
    EXPECT_TRUE(c.set("num_pipeline_repeats", repeats).ok());
  }
  if (stages == 1) {
    EXPECT_TRUE(c.set("scan_layers", scan).ok());
  }
  return c;
}

std::vector<ValueInfo> params_of(const Config& c) {
  Result<ResolvedConfig> r = resolve_config(c, 8);
  EXPECT_TRUE(r.ok()) << r.status().message();
  TrainStepLayout l;
  const Program p = build_train_step(*r, &l);
  std::vector<ValueInfo> out;
  for (int i = 0; i < l.num_params; ++i) out.push_back(p.value(p.args()[i].value));
  return out;
}

std::vector<float> init_values(const ValueInfo& v) {
  std::vector<float> h(v.shape.numel());
  init_param(v, 0, h.data());
  return h;
}

// Saves `from`'s initial params, restores each of `to`'s params from the file.
// (A scanned run writes its param_scan_axis, as the trainer does.)
void round_trip(const Config& from, const Config& to, bool to_pipeline, const std::string& what) {
  const std::string path = ::testing::TempDir() + "shardlab_pipeline_ckpt.bin";
  const std::vector<ValueInfo> src = params_of(from);
  std::vector<CheckpointTensorSpec> specs;
  for (const ValueInfo& v : src) specs.push_back({v.name, v.dtype, v.shape});
  auto fill = [&](int i, void* dst) {
    const std::vector<float> h = init_values(src[i]);
    std::memcpy(dst, h.data(), h.size() * sizeof(float));
    return ok_status();
  };
  std::map<std::string, std::string> meta = {{"step", "0"}};
  if (from.get_bool("scan_layers") && from.get_int("ici_pipeline_parallelism") == 1)
    meta["param_scan_axis"] = "1";
  ASSERT_TRUE(write_checkpoint(path, specs, fill, meta).ok()) << what;
  Result<CheckpointFile> f = read_checkpoint(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  std::vector<char> scratch;
  for (const ValueInfo& v : params_of(to)) {
    const bool stacked = to_pipeline && pipeline_param_subpath(v.name);
    Result<const void*> bytes =
        stacked ? checkpoint_pipeline_tensor(*f, v.name, v.dtype, v.shape, pipeline_layer_dims(v),
                                             scratch)
                : checkpoint_tensor(*f, v.name, v.dtype, v.shape,
                                    to_pipeline ? -1 : 1 /* scanned: param_scan_axis */, scratch);
    ASSERT_TRUE(bytes.ok()) << what << ": " << v.name << ": " << bytes.status().message();
    const std::vector<float> want = init_values(v);
    EXPECT_EQ(std::memcmp(*bytes, want.data(), want.size() * sizeof(float)), 0)
        << what << ": " << v.name;
  }
  std::filesystem::remove(path);
}

TEST(PipelineCheckpoint, CircularRestoresIntoEveryLayoutAndBack) {
  const Config circular = layout(2, 2, false), sequential = layout(1, -1, false),
               scanned = layout(1, -1, true), four = layout(4, 1, false),
               four_r2 = layout(4, 2, false);
  round_trip(circular, sequential, false, "circular -> sequential");
  round_trip(sequential, circular, true, "sequential -> circular");
  round_trip(circular, scanned, false, "circular -> scanned");
  round_trip(scanned, circular, true, "scanned -> circular");
  round_trip(circular, four, true, "circular S=2 R=2 -> S=4 R=1");
  round_trip(four, four_r2, true, "S=4 R=1 -> S=4 R=2");
}

}  // namespace
}  // namespace eng
