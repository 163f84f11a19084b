// tests/train/inspect_test.cpp: the sharding table of a trainer's state against MaxText's
// worked examples (MaxText's utils/sharding.py), its printed forms, the audit and store snapshots.
#include "engine/train/inspect.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

#include "engine/train/trainer.h"

namespace eng {
namespace {

std::unique_ptr<Trainer> tiny(const Mesh& mesh, const std::string& rules = "") {
  Config c;
  EXPECT_TRUE(c.set("model_name", std::string("llama-tiny")).ok());
  EXPECT_TRUE(c.set("base_num_decoder_layers", int64_t{1}).ok());
  EXPECT_TRUE(c.set("max_target_length", int64_t{32}).ok());
  EXPECT_TRUE(c.set("per_device_batch_size", 1.0).ok());
  EXPECT_TRUE(c.set("scan_layers", false).ok());  // asserts the layers_<l> rows
  if (!rules.empty()) {
    EXPECT_TRUE(c.set("logical_axis_rules", rules).ok());
  }
  Result<std::unique_ptr<Trainer>> t = Trainer::create(c, mesh, {.shape_only = true});
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

Mesh fsdp4_tensor2() { return Mesh::create({"fsdp", "tensor"}, {4, 2}).value(); }

TEST(Inspect, RowsFollowMaxTextWorkedExamples) {
  auto t = tiny(fsdp4_tensor2());
  Result<ShardingTable> tab = trainer_shardings(*t);
  ASSERT_TRUE(tab.ok()) << tab.status().message();
  const ShardingRow* wi = tab->find("params/decoder/layers_0/mlp/wi_0/kernel");
  ASSERT_NE(wi, nullptr);
  EXPECT_EQ(wi->spec.to_string(), "P('fsdp', 'tensor')");
  EXPECT_EQ(wi->type, "f32[256@fsdp,704@tensor]");
  EXPECT_EQ(wi->logical_string(), "('embed', 'mlp')");
  EXPECT_EQ(wi->physical_string(), "('fsdp', 'tensor')");
  EXPECT_EQ(wi->local_shape, Shape({64, 352}));
  EXPECT_EQ(wi->bytes_per_device, 64 * 352 * 4);
  EXPECT_EQ(tab->find("params/decoder/layers_0/mlp/wo/kernel")->spec.to_string(), "P('tensor', 'fsdp')");
  EXPECT_EQ(tab->find("params/token_embedder/embedding")->spec.to_string(), "P('tensor', 'fsdp')");
  EXPECT_EQ(tab->find("params/decoder/decoder_norm/scale")->physical_string(), "('tensor',)");
  EXPECT_EQ(tab->find("inputs")->spec.to_string(), "P('fsdp', None)");
  EXPECT_EQ(tab->find("inputs")->type, "i32[8@fsdp,32]");
  EXPECT_EQ(tab->find("nope"), nullptr);
  const std::string dump = tab->debug_string();
  EXPECT_EQ(dump.rfind("fsdp: 4, tensor: 2\n", 0), 0u);
  EXPECT_NE(dump.find(" params/decoder/layers_0/mlp/wi_0/kernel\n    Shape:     f32[256@fsdp,704@tensor]\n"
                      "    Logical:   ('embed', 'mlp')\n    Physical:  ('fsdp', 'tensor')\n"),
            std::string::npos);
  EXPECT_NE(tab->to_string().find("arrays,"), std::string::npos);
}

TEST(Inspect, AuditNamesParamsLeftReplicated) {
  auto t = tiny(fsdp4_tensor2(), "[['mlp', []]]");
  Result<ReplicationReport> r = audit_trainer(*t, 0.02);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->exceeds);
  ASSERT_FALSE(r->offenders.empty());
  EXPECT_NE(r->offenders[0].path.find("/mlp/"), std::string::npos);
  EXPECT_EQ(r->offenders[0].unsharded_axes, std::vector<std::string>{"tensor"});
  EXPECT_FALSE(audit_trainer(*t, 2.0).ok());
}

TEST(Inspect, BadRuleOverridesAreErrors) {
  auto t = tiny(fsdp4_tensor2(), "[['embed', ['fsdpp']]]");
  Result<ShardingTable> tab = trainer_shardings(*t);
  ASSERT_FALSE(tab.ok());
  EXPECT_NE(tab.status().message().find("'fsdpp'"), std::string::npos);
  EXPECT_FALSE(parse_logical_axis_rules("[['embed', 'fsdp'").ok());
  Result<LogicalAxisRules> ok = parse_logical_axis_rules("[[\"embed\", [\"fsdp\", 'tensor']], ['layers', 'stage']]");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->to_list_string(), "[['embed', ['fsdp', 'tensor']], ['layers', 'stage']]");
}

TEST(Inspect, SnapshotsGoToTheStore) {
  auto t = tiny(fsdp4_tensor2());
  ShardingTable tab = trainer_shardings(*t).value();
  const std::string path = fmt::format("{}inspect_test_{}.db", ::testing::TempDir(), ::getpid());
  std::remove(path.c_str());
  Result<std::unique_ptr<MetricsStore>> store = MetricsStore::open(path);
  ASSERT_TRUE(store.ok()) << store.status().message();
  Result<int64_t> id = record_sharding_snapshot(**store, "", 0, tab);
  ASSERT_TRUE(id.ok()) << id.status().message();
  EXPECT_EQ(*id, 1);
  EXPECT_EQ(*record_sharding_snapshot(**store, "", 1, tab), 2);
  store->reset();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace eng
