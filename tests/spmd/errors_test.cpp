// tests/spmd/errors_test.cpp: explicit-mode semantics (the with_sharding_constraint assert and
// its size-1 `context` case, MaxText's explicit-mesh assert; ambiguous matmuls; elementwise
// operands with incompatible shardings, JAX's error text), the trainer
// on a sharded mesh, and the shape-only llama2-7b compile on 256 devices.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "engine/compile/executable.h"
#include "engine/compile/serialize.h"
#include "engine/ir/builder.h"
#include "engine/train/config.h"
#include "engine/train/train_step.h"
#include "engine/train/trainer.h"
#include "tests/common/tiny_config.h"
#include "tests/spmd/spmd_run.h"

namespace eng {
namespace {

CompileOptions explicit_options() {
  CompileOptions o;
  o.shard_mode = ShardMode::kExplicit;
  o.rules = LogicalAxisRules({LogicalAxisRule{"batch", {"data", "fsdp", "expert", "context"}}});
  return o;
}

Program constrained(bool raw) {
  Builder b("xent");
  ValueId x = b.argument("logits", Shape{8, 4}, DType::kF32, {}, ArgRole::kBatch);
  b.mutable_info(x).spec = PartitionSpec({{"data", "fsdp", "expert"}, {}});
  ValueId y = raw ? b.raw_constraint(x, {"batch", ""}) : b.constraint(x, {"batch", ""});
  b.output(b.scale(y, 2.0), "y");
  return std::move(b).finish();
}

TEST(Explicit, RawConstraintAssertsAndHelperDropsSizeOneAxes) {
  const Mesh mesh =
      *Mesh::create({"data", "fsdp", "expert", "context"}, {2, 2, 2, 1}, AxisType::kExplicit);
  auto raw = compile(constrained(true), mesh, explicit_options());
  ASSERT_FALSE(raw.ok());
  const std::string want =
      "`with_sharding_constraint` acts as an assert when all axes of mesh are of type "
      "`Explicit`. The array sharding: P(('data', 'fsdp', 'expert'), None) did not match the "
      "sharding provided: P(('data', 'fsdp', 'expert', 'context'), None). Please use "
      "`jax.sharding.reshard` to shard your input to the sharding you want.";
  EXPECT_NE(raw.status().message().find(want), std::string::npos) << raw.status().message();
  auto helper = compile(constrained(false), mesh, explicit_options());
  EXPECT_TRUE(helper.ok()) << helper.status().message();
  // Auto mode: the raw constraint is a reshard (a no-op here), no assert.
  CompileOptions auto_opts = explicit_options();
  auto_opts.shard_mode = ShardMode::kAuto;
  const Mesh auto_mesh = *Mesh::create({"data", "fsdp", "expert", "context"}, {2, 2, 2, 1});
  EXPECT_TRUE(compile(constrained(true), auto_mesh, auto_opts).ok());
}

Program fsdp_matmul(std::vector<std::string> out_sharding, PartitionSpec x_spec = {{"fsdp"}, {}},
                    PartitionSpec w_spec = {{"fsdp"}, {}}) {
  Builder b("mm");
  ValueId x = b.argument("x", Shape{4, 8}, DType::kF32, {}, ArgRole::kBatch);
  ValueId w = b.argument("w", Shape{8, 6}, DType::kF32, {}, ArgRole::kParam);
  b.mutable_info(x).spec = std::move(x_spec);
  b.mutable_info(w).spec = std::move(w_spec);
  b.output(b.matmul(x, w, 1, 1, false, false, std::move(out_sharding)), "y");
  return std::move(b).finish();
}

// jax.lax's dot_general sharding rule (_dot_general_sharding_rule): contracting dims sharded on
// both sides, alike or not, need out_sharding; one sharded side does not (the other is
// gathered); an axis on free dims of both sides is an illegally sharded result.
TEST(Explicit, AmbiguousMatmulNeedsOutSharding) {
  const Mesh mesh = *Mesh::create({"fsdp", "tensor"}, {2, 2}, AxisType::kExplicit);
  CompileOptions o;
  o.shard_mode = ShardMode::kExplicit;
  const PartitionSpec x_con({{}, {"fsdp"}});
  auto bad = compile(fsdp_matmul({}, x_con), mesh, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(
                "Contracting dimensions are sharded and it is ambiguous how the output should be "
                "sharded. Please specify the output sharding via the `out_sharding` parameter. "
                "Got lhs_contracting_spec=('fsdp',) and rhs_contracting_spec=('fsdp',)"),
            std::string::npos)
      << bad.status().message();
  auto unlike = compile(fsdp_matmul({}, PartitionSpec({{}, {"tensor"}})), mesh, o);
  ASSERT_FALSE(unlike.ok());
  EXPECT_NE(unlike.status().message().find(
                "Got lhs_contracting_spec=('tensor',) and rhs_contracting_spec=('fsdp',)"),
            std::string::npos)
      << unlike.status().message();
  auto good = compile(fsdp_matmul({"activation_batch", "mlp"}, x_con), mesh, o);
  EXPECT_TRUE(good.ok()) << good.status().message();
  auto one_side = compile(fsdp_matmul({}), mesh, o);
  EXPECT_TRUE(one_side.ok()) << one_side.status().message();
  auto twice = compile(fsdp_matmul({}, PartitionSpec({{"tensor"}, {}}),
                                    PartitionSpec({{}, {"tensor"}})),
                       mesh, o);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find(
                "dot_general operation with inputs: f32[4@tensor,8], f32[8,6@tensor] produces an "
                "illegally sharded result: f32[4@tensor,6@tensor]"),
            std::string::npos)
      << twice.status().message();
  // Auto mode picks for itself: the weight is gathered.
  const Mesh auto_mesh = *Mesh::create({"fsdp"}, {2});
  auto a = compile(fsdp_matmul({}), auto_mesh, CompileOptions{});
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ((*a)->program().instrs()[0].kind, OpKind::kAllGather);
  EXPECT_EQ((*a)->program().instrs()[0].inputs[0], (*a)->program().args()[1].value);
}

// Two operands f32[8,4] with the given shardings; reshard_b: y first goes through the
// helper constraint to ('batch', None) = ('data', None): the program reshards explicitly.
Program mismatched_add(PartitionSpec a, PartitionSpec b_spec, bool reshard_b) {
  Builder b("ew");
  ValueId x = b.argument("x", Shape{8, 4}, DType::kF32, {}, ArgRole::kBatch);
  ValueId y = b.argument("y", Shape{8, 4}, DType::kF32, {}, ArgRole::kBatch);
  b.mutable_info(x).spec = std::move(a);
  b.mutable_info(y).spec = std::move(b_spec);
  if (reshard_b) y = b.constraint(y, {"batch", ""});
  b.output(b.add(x, y), "z");
  return std::move(b).finish();
}

TEST(Explicit, ElementwiseIncompatibleShardingsError) {
  CompileOptions o;
  o.shard_mode = ShardMode::kExplicit;
  o.rules = LogicalAxisRules({LogicalAxisRule{"batch", {"data"}}});
  const Mesh mesh = *Mesh::create({"data", "tensor"}, {2, 2}, AxisType::kExplicit);
  const PartitionSpec data({{"data"}, {}}), tensor({{"tensor"}, {}});
  auto bad = compile(mismatched_add(data, tensor, false), mesh, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("add got incompatible shardings for broadcasting: "
                                        "('data', None), ('tensor', None)."),
            std::string::npos)
      << bad.status().message();
  // An axis on two different dims is no valid result: JAX's DuplicateSpecError text.
  auto crossed = compile(mismatched_add(data, PartitionSpec({{}, {"data"}}), false), mesh, o);
  ASSERT_FALSE(crossed.ok());
  EXPECT_NE(crossed.status().message().find(
                "add operation with inputs: f32[8@data,4], f32[8,4@data] produces an illegally "
                "sharded result: f32[8@data,4@data]"),
            std::string::npos)
      << crossed.status().message();
  // JAX's rule: None on a dim takes the other operand's axes (a local slice, no error).
  auto none = compile(mismatched_add(data, PartitionSpec({{}, {}}), false), mesh, o);
  EXPECT_TRUE(none.ok()) << none.status().message();
  // The program reshards explicitly: fine.
  auto resharded = compile(mismatched_add(data, tensor, true), mesh, o);
  EXPECT_TRUE(resharded.ok()) << resharded.status().message();
  // Auto mode reshards silently, to the most-sharded operand's spec.
  CompileOptions auto_opts = o;
  auto_opts.shard_mode = ShardMode::kAuto;
  const Mesh auto_mesh = *Mesh::create({"data", "tensor"}, {2, 2});
  auto a = compile(mismatched_add(data, tensor, false), auto_mesh, auto_opts);
  EXPECT_TRUE(a.ok()) << a.status().message();
}

// JAX's mixed meshes: explicit mode's rules concern the Explicit axes only, and an
// AxisTypeRegion (auto_axes / explicit_axes inside a jit) switches them for its instructions.
TEST(Explicit, PerAxisTypesAndRegions) {
  CompileOptions o;
  o.rules = LogicalAxisRules({LogicalAxisRule{"batch", {"data"}}});
  const Mesh mixed = *Mesh::create({"data", "tensor"}, {2, 2},
                                   std::vector<AxisType>{AxisType::kAuto, AxisType::kExplicit});
  const PartitionSpec data({{"data"}, {}}), data_t({{}, {"data"}});
  const PartitionSpec tensor({{"tensor"}, {}}), tensor_t({{}, {"tensor"}});
  // 'data' is Auto: the partitioner resolves the conflict (its choice keeps x's layout).
  auto auto_axis = compile(mismatched_add(data, data_t, false), mixed, o);
  ASSERT_TRUE(auto_axis.ok()) << auto_axis.status().message();
  // 'tensor' is Explicit: JAX's error, naming the types (Explicit axes only).
  auto explicit_axis = compile(mismatched_add(tensor, tensor_t, false), mixed, o);
  ASSERT_FALSE(explicit_axis.ok());
  EXPECT_NE(explicit_axis.status().message().find(
                "add got incompatible shardings for broadcasting: ('tensor', None), (None, "
                "'tensor')."),
            std::string::npos)
      << explicit_axis.status().message();
  auto both = compile(mismatched_add(PartitionSpec({{"data"}, {"tensor"}}), tensor_t, false),
                      mixed, o);
  ASSERT_TRUE(both.ok()) << both.status().message();
  // Its executable round-trips with the mesh's types (the compile cache's encoding).
  const std::string bytes = serialize_executable(**both);
  auto back = deserialize_executable(bytes);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ((*back)->mesh(), mixed);
  EXPECT_EQ((*back)->argument_shardings(), (*both)->argument_shardings());
  EXPECT_EQ(serialize_executable(**back), bytes);
  // On an Explicit mesh the same add is an error, unless a region makes 'data' Auto there.
  const Mesh all_explicit = *Mesh::create({"data", "tensor"}, {2, 2}, AxisType::kExplicit);
  CompileOptions e = o;
  e.shard_mode = ShardMode::kExplicit;
  EXPECT_FALSE(compile(mismatched_add(data, data_t, false), all_explicit, e).ok());
  CompileOptions region = o;
  region.axis_type_regions = {{0, 1, {AxisType::kAuto, AxisType::kExplicit}}};
  auto in_region = compile(mismatched_add(data, data_t, false), all_explicit, region);
  EXPECT_TRUE(in_region.ok()) << in_region.status().message();
  region.axis_type_regions = {{0, 1, {AxisType::kExplicit, AxisType::kAuto}}};
  EXPECT_FALSE(compile(mismatched_add(data, data_t, false), all_explicit, region).ok());
}

Config small_trainer_config(double per_device_batch) {
  Config c = testing::tiny_llama_config({.model_name = "llama-tiny",
                                         .emb_dim = 64,
                                         .head_dim = 16,
                                         .mlp_dim = 128,
                                         .layers = 2,
                                         .seq = 32,
                                         .per_device_batch = per_device_batch,
                                         .steps = 3,
                                         .dtype = "float32"});  // compared at 1e-5
  EXPECT_TRUE(c.set("max_inflight_steps", int64_t{0}).ok());
  return c;
}

TEST(Trainer, ShardedMeshFromConfigTrainsLikeOneDevice) {
  Config one = small_trainer_config(4.0);
  Config two = small_trainer_config(2.0);
  ASSERT_TRUE(two.set("ici_fsdp_parallelism", int64_t{2}).ok());
  ASSERT_TRUE(two.set("shard_optimizer_over_data", true).ok());
  Result<Mesh> mesh = mesh_from_config(two, 2);
  ASSERT_TRUE(mesh.ok()) << mesh.status().message();
  EXPECT_EQ(mesh->axis_size("fsdp"), 2);
  auto t1 = Trainer::create(one, Mesh());
  auto t2 = Trainer::create(two, *mesh);
  ASSERT_TRUE(t1.ok()) << t1.status().message();
  ASSERT_TRUE(t2.ok()) << t2.status().message();
  for (int s = 0; s < 3; ++s) {
    auto h1 = (*t1)->step();
    auto h2 = (*t2)->step();
    ASSERT_TRUE(h1.ok() && h2.ok());
    auto m1 = h1->wait();
    auto m2 = h2->wait();
    ASSERT_TRUE(m1.ok()) << m1.status().message();
    ASSERT_TRUE(m2.ok()) << m2.status().message();
    EXPECT_NEAR(m2->loss, m1->loss, 1e-5 * std::fabs(m1->loss));
  }
}

TEST(ShapeOnly, Llama2_7bOn256Devices) {
  Config c;
  ASSERT_TRUE(c.set("model_name", "llama2-7b").ok());
  ASSERT_TRUE(c.set("per_device_batch_size", 1.0).ok());
  Result<ResolvedConfig> r = resolve_config(c, 256);
  ASSERT_TRUE(r.ok()) << r.status().message();
  TrainStepLayout layout;
  const Program p = build_train_step(*r, &layout);
  for (auto [fsdp, tensor] : {std::pair<int64_t, int64_t>{256, 1}, {64, 4}}) {
    const Mesh mesh = *Mesh::create({"data", "fsdp", "tensor"}, {1, fsdp, tensor});
    Result<testing::ShapeOnlyCompile> exe = testing::compile_shape_only(p, mesh, "7b");
    ASSERT_TRUE(exe.ok()) << exe.status().message();
    const auto& mem = exe->exe->memory();
    EXPECT_LT(exe->secs, 20.0);
    EXPECT_GT(mem.argument_bytes, 0);
    // 7B params x 3 (param, mu, nu) x 4 bytes / 256 devices ~ 0.3 GiB of state per device.
    EXPECT_LT(mem.argument_bytes, int64_t{1} << 30);
    EXPECT_GT(exe->exe->cost().collective_bytes.at("fsdp"), 0);
    if (tensor > 1) {
      EXPECT_GT(exe->exe->cost().collective_bytes.at("tensor"), 0);
    }
  }
}

}  // namespace
}  // namespace eng
