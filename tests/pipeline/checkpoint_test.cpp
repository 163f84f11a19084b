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
#include "tests/train/tiny_trainer.h"

namespace eng {
namespace {

Config layout(int64_t stages, int64_t repeats, bool scan, int64_t pipelined = -1) {
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
  if (pipelined > 0) {  // P < L: the other layers in a layers_outside_pipeline stack
    EXPECT_TRUE(c.set("pipeline_parallel_layers", pipelined).ok());
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

int64_t pipelined_layers(const Config& c) {
  Result<ResolvedConfig> r = resolve_config(c, 8);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->model.pipelined_layers() : 0;
}

// pipelined: the model's P (slot k of a layers_outside_pipeline stack is layer P + k).
std::vector<float> init_values(const ValueInfo& v, int64_t pipelined) {
  std::vector<float> h(v.shape.numel());
  init_param(v, 0, h.data(), pipelined);
  return h;
}

// Saves `from`'s initial params, restores each of `to`'s params from the file.
// (A scanned run writes its param_scan_axis, as the trainer does.)
void round_trip(const Config& from, const Config& to, bool to_pipeline, const std::string& what) {
  // A directory of this process's own: ctest runs this file's tests in parallel processes.
  const testing::TempDir dir("pipeline_ckpt");
  const std::string path = dir / "ckpt.bin";
  const std::vector<ValueInfo> src = params_of(from);
  const int64_t from_p = pipelined_layers(from), to_p = pipelined_layers(to);
  std::vector<CheckpointTensorSpec> specs;
  for (const ValueInfo& v : src) specs.push_back({v.name, v.dtype, v.shape});
  auto fill = [&](int i, void* dst) {
    const std::vector<float> h = init_values(src[i], from_p);
    std::memcpy(dst, h.data(), h.size() * sizeof(float));
    return ok_status();
  };
  std::map<std::string, std::string> meta = {{"step", "0"}};
  if ((from.get_bool("scan_layers") && from.get_int("ici_pipeline_parallelism") == 1) ||
      from_p < from.get_int("base_num_decoder_layers"))
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
        : outside_pipeline_subpath(v.name)
            ? checkpoint_outside_tensor(*f, v.name, v.dtype, v.shape, 1, to_p, scratch)
            : checkpoint_tensor(*f, v.name, v.dtype, v.shape,
                                to_pipeline ? -1 : 1 /* scanned: param_scan_axis */, scratch);
    ASSERT_TRUE(bytes.ok()) << what << ": " << v.name << ": " << bytes.status().message();
    const std::vector<float> want = init_values(v, to_p);
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

// pipeline_parallel_layers P < L: layers P.. L-1 live in params/decoder/
// layers_outside_pipeline/... (slot k = layer P + k); a checkpoint of such a
// pipeline restores into every layout and back, and into another P.
TEST(PipelineCheckpoint, LayersOutsideThePipelineRestoreIntoEveryLayoutAndBack) {
  const Config p4 = layout(2, -1, false, 4), p6 = layout(2, -1, false, 6),
               sequential = layout(1, -1, false), scanned = layout(1, -1, true),
               circular = layout(2, 2, false);
  ASSERT_EQ(pipelined_layers(p4), 4);
  round_trip(p4, sequential, false, "P=4 -> sequential");
  round_trip(sequential, p4, true, "sequential -> P=4");
  round_trip(p4, scanned, false, "P=4 -> scanned");
  round_trip(scanned, p4, true, "scanned -> P=4");
  round_trip(p4, circular, true, "P=4 -> circular S=2 R=2");
  round_trip(circular, p4, true, "circular S=2 R=2 -> P=4");
  round_trip(p4, p6, true, "P=4 -> P=6");
  round_trip(p6, p4, true, "P=6 -> P=4");
}

// The trainer's restore (load_parameters_path) takes the same paths: a P = 4
// pipeline's params load into the sequential model and the sequential model's
// into a P = 4 pipeline; layer l holds the same values either way, and both
// then train to the same losses (1e-6 relative).
TEST(PipelineCheckpoint, TrainerLoadsLayersOutsideThePipeline) {
  const int64_t E = 16, M = 32;
  const std::string outside = "params/decoder/layers_outside_pipeline/mlp/wi_0/kernel";
  auto seq_layer = [&](Trainer& t, int64_t l) {
    return t.fetch_argument(fmt::format("params/decoder/layers_{}/mlp/wi_0/kernel", l)).value();
  };
  // Slot k of the (E, 4, M) outside stack (param_scan_axis 1) is layer 4 + k.
  auto outside_layer = [&](Trainer& t, int64_t k) {
    const std::vector<float> w = t.fetch_argument(outside).value();
    std::vector<float> out(E * M);
    for (int64_t e = 0; e < E; ++e)
      std::copy_n(w.begin() + (e * 4 + k) * M, M, out.begin() + e * M);
    return out;
  };
  auto saved = [&](const testing::TempDir& dir, Config c, const Mesh& mesh) {
    for (auto [k, v] : {std::pair<const char*, bool>{"enable_checkpointing", true},
                        {"save_checkpoint_on_completion", false}})
      EXPECT_TRUE(c.set(k, v).ok());
    EXPECT_TRUE(c.set("base_output_directory", dir.str()).ok());
    EXPECT_TRUE(c.set("run_name", "ckpt").ok());
    EXPECT_TRUE(c.set("checkpoint_period", int64_t{2}).ok());
    auto t = Trainer::create(c, mesh);
    EXPECT_TRUE(t.ok()) << t.status().message();
    EXPECT_TRUE((*t)->train(3, [](const StepMetrics&) { return true; }).ok());
    return checkpoint_path(dir / "ckpt/checkpoints", 2);
  };
  auto loaded = [&](Config c, const std::string& path, const Mesh& mesh) {
    EXPECT_TRUE(c.set("load_parameters_path", path).ok());
    auto t = Trainer::create(c, mesh);
    EXPECT_TRUE(t.ok()) << t.status().message();
    return std::move(*t);
  };
  auto losses = [](Trainer& t) {
    std::vector<double> out;
    EXPECT_TRUE(t.train(2, [&](const StepMetrics& m) {
                   out.push_back(m.loss);
                   return true;
                 }).ok());
    return out;
  };
  Config p4 = layout(2, -1, false, 4), seq = layout(1, -1, false);
  ASSERT_TRUE(p4.set("per_device_batch_size", 2.0).ok());  // global batch 4 in both
  ASSERT_TRUE(seq.set("per_device_batch_size", 4.0).ok());
  const Mesh stages = *Mesh::create({"stage"}, {2});
  std::unique_ptr<Trainer> fresh = Trainer::create(seq, Mesh()).value();
  for (bool from_pipeline : {true, false}) {
    testing::TempDir dir("pp_outside");
    const std::string path = from_pipeline ? saved(dir, p4, stages) : saved(dir, seq, Mesh());
    std::unique_ptr<Trainer> s = loaded(seq, path, Mesh()), p = loaded(p4, path, stages);
    for (int64_t k = 0; k < 4; ++k) {
      EXPECT_EQ(outside_layer(*p, k), seq_layer(*s, 4 + k)) << from_pipeline << " layer " << 4 + k;
      EXPECT_NE(seq_layer(*s, 4 + k), seq_layer(*fresh, 4 + k)) << "trained values were loaded";
    }
    const std::vector<double> a = losses(*s), b = losses(*p);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(b[i], a[i], 1e-6 * std::abs(a[i])) << from_pipeline << " step " << i;
  }
}

}  // namespace
}  // namespace eng
