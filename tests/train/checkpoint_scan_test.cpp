// tests/train/checkpoint_scan_test.cpp: a checkpoint of either decoder-layer layout
// (scan_layers false: layers_<l>/..., true: stacked layers/... with the layer dim at
// param_scan_axis) restores into the other, and training continues bitwise as if never
// interrupted; a stacked tensor that does not fit is a clear error.
#include <cstring>
#include <vector>

#include "engine/train/checkpoint.h"
#include "tests/train/tiny_trainer.h"

namespace eng {
namespace {

using testing::TempDir;
using testing::tiny_config;
namespace fs = std::filesystem;

Config layout_config(bool scan, int64_t axis = 1) {
  Config c = tiny_config(10);
  EXPECT_TRUE(c.set("scan_layers", scan).ok());
  EXPECT_TRUE(c.set("param_scan_axis", axis).ok());
  return c;
}

std::vector<double> losses(Trainer& t, int64_t steps) {
  std::vector<double> out;
  Status s = t.train(steps, [&](const StepMetrics& m) {
    out.push_back(m.loss);
    return true;
  });
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

// Trains steps 0..3 with the given layout and returns checkpoint 3's path.
std::string save_after_step3(const TempDir& dir, bool scan, int64_t axis = 1) {
  Config c = layout_config(scan, axis);
  EXPECT_TRUE(c.set("enable_checkpointing", true).ok());
  EXPECT_TRUE(c.set("base_output_directory", dir.str()).ok());
  EXPECT_TRUE(c.set("run_name", "layout").ok());
  EXPECT_TRUE(c.set("checkpoint_period", int64_t{3}).ok());
  EXPECT_TRUE(c.set("save_checkpoint_on_completion", false).ok());
  auto t = Trainer::create(c, Mesh()).value();
  losses(*t, 4);
  return checkpoint_path(dir / "layout/checkpoints", 3);
}

struct Conversion {
  bool from_scan, to_scan;
  int64_t from_axis = 1, to_axis = 1;
};

class LayoutRestore : public ::testing::TestWithParam<Conversion> {};

TEST_P(LayoutRestore, ContinuesBitwiseInTheOtherLayout) {
  const Conversion& c = GetParam();
  auto full_trainer = Trainer::create(tiny_config(10), Mesh()).value();
  const std::vector<double> full = losses(*full_trainer, 8);
  TempDir dir("layout");
  const std::string path = save_after_step3(dir, c.from_scan, c.from_axis);
  CheckpointFile f = read_checkpoint(path).value();
  const char* stacked = "params/decoder/layers/mlp/wi_0/kernel";
  EXPECT_EQ(f.find(stacked) != nullptr, c.from_scan);
  for (const char* mesh_axis : {"", "fsdp"}) {  // one device, then sharded
    Mesh mesh = *mesh_axis ? Mesh::create({mesh_axis}, {2}).value() : Mesh();
    Config cfg = layout_config(c.to_scan, c.to_axis);
    ASSERT_TRUE(cfg.set("load_full_state_path", path).ok());
    auto t = Trainer::create(cfg, mesh);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ((*t)->current_step(), 4);
    // Layer 1's wi_0 holds the file's layer-1 values in either layout.
    const std::string flat = "params/decoder/layers_1/mlp/wi_0/kernel";
    std::vector<float> w = (*t)->fetch_argument(c.to_scan ? stacked : flat.c_str()).value();
    const int64_t E = 64, M = 128, L = 2;
    std::vector<float> layer1(E * M);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t m = 0; m < M; ++m)
        layer1[e * M + m] = !c.to_scan ? w[e * M + m]
                            : c.to_axis == 1 ? w[(e * L + 1) * M + m]
                                             : w[(1 * E + e) * M + m];
    std::vector<char> scratch;
    const Shape shape{E, M};
    const void* file_layer1 = checkpoint_tensor(f, flat, DType::kF32, shape, -1, scratch).value();
    EXPECT_EQ(std::memcmp(layer1.data(), file_layer1, layer1.size() * 4), 0) << mesh_axis;
    // The same state restored in its own layout on this mesh trains to the same losses.
    Config own = layout_config(c.from_scan, c.from_axis);
    ASSERT_TRUE(own.set("load_full_state_path", path).ok());
    auto ref = Trainer::create(own, mesh).value();
    const std::vector<double> want = losses(*ref, 4);
    EXPECT_EQ(losses(**t, 4), want) << mesh_axis;
    if (!*mesh_axis) {
      EXPECT_EQ(want, std::vector<double>(full.begin() + 4, full.end()));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, LayoutRestore,
                         ::testing::Values(Conversion{false, true}, Conversion{true, false},
                                           Conversion{true, true, 0, 1},
                                           Conversion{false, true, 1, 0}),
                         [](const ::testing::TestParamInfo<Conversion>& i) {
                           const Conversion& c = i.param;
                           return fmt::format("{}{}_to_{}{}", c.from_scan ? "scanned" : "flat",
                                              c.from_scan ? std::to_string(c.from_axis) : "",
                                              c.to_scan ? "scanned" : "flat",
                                              c.to_scan ? std::to_string(c.to_axis) : "");
                         });

TEST(LayoutRestoreErrors, AStackedTensorOfAnotherModelIsNamed) {
  TempDir dir("layout_err");
  const std::string path = save_after_step3(dir, true);
  Config cfg = layout_config(false);
  ASSERT_TRUE(cfg.set("base_num_decoder_layers", int64_t{3}).ok());  // wants layers_2
  ASSERT_TRUE(cfg.set("load_full_state_path", path).ok());
  auto t = Trainer::create(cfg, Mesh());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("has 2 layers, the model wants layer 2"), std::string::npos)
      << t.status().message();
  cfg = layout_config(false);
  ASSERT_TRUE(cfg.set("base_mlp_dim", int64_t{64}).ok());  // no dim removal gives (64, 64)
  ASSERT_TRUE(cfg.set("load_full_state_path", path).ok());
  t = Trainer::create(cfg, Mesh());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("does not hold"), std::string::npos) << t.status().message();
}

}  // namespace
}  // namespace eng
