// tests/spmd/reshard_test.cpp: the reshard verb on every (S, D) pair of a spec list equals
// gather-then-slice (the runtime's fetch of D's blocks), the collectives against references
// (including collective_permute, reductions and all-to-all), compile-time collective bytes ==
// bytes the runtime moved, the partitioner's input errors and its axis-name options.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/compile/executable.h"
#include "engine/ir/builder.h"
#include "engine/runtime/runtime.h"

namespace eng {
namespace {

Mesh mesh3() { return *Mesh::create({"data", "fsdp", "tensor"}, {2, 2, 2}); }

std::vector<PartitionSpec> spec_list() {
  return {
      PartitionSpec(),
      PartitionSpec({{"data"}}),
      PartitionSpec({{}, {"fsdp"}}),
      PartitionSpec({{"data", "fsdp"}}),
      PartitionSpec({{"fsdp", "data"}}),
      PartitionSpec({{"data"}, {"tensor"}}),
      PartitionSpec({{"tensor"}, {"data"}, {"fsdp"}}),
      PartitionSpec({{}, {"data", "tensor"}}),
      PartitionSpec({{"fsdp"}, {}, {"data"}}),
      PartitionSpec({{}, {}, {"tensor", "fsdp", "data"}}),
      PartitionSpec({{"data", "fsdp", "tensor"}}),
  };
}

// Program: y := x, with x sharded S and y (aliased output) sharded D.
Program reshard_program(const Shape& shape, const PartitionSpec& s, const PartitionSpec& d) {
  Builder b("reshard");
  ValueId x = b.argument("x", shape, DType::kF32, {}, ArgRole::kParam);
  ValueId y = b.argument("y", shape, DType::kF32, {}, ArgRole::kParam);
  b.mutable_info(x).spec = s;
  b.mutable_info(y).spec = d;
  b.output(x, "y", 1);
  return std::move(b).finish();
}

TEST(Reshard, EveryPairEqualsGatherThenSlice) {
  const Mesh mesh = mesh3();
  const Shape shape{8, 8, 8};
  std::vector<float> host(shape.numel());
  std::iota(host.begin(), host.end(), 0.0f);
  Runtime rt(mesh);
  int pairs = 0;
  for (const PartitionSpec& s : spec_list())
    for (const PartitionSpec& d : spec_list()) {
      if (s == d) continue;
      SCOPED_TRACE(s.to_string() + " -> " + d.to_string());
      Program p = reshard_program(shape, s, d);
      auto exe = compile(p, mesh, CompileOptions{});
      ASSERT_TRUE(exe.ok()) << exe.status().message();
      auto x = rt.put(host.data(), shape, DType::kF32, {mesh, s}, "x");
      auto y = rt.zeros(shape, DType::kF32, {mesh, d}, "y");
      ASSERT_TRUE(x.ok() && y.ok());
      rt.communicator().reset_counters();
      std::vector<Array*> args{&*x, &*y};
      std::vector<Array> outs;
      ASSERT_TRUE(rt.execute(**exe, args, outs).ok());
      std::vector<float> got(shape.numel());
      ASSERT_TRUE(rt.fetch(*y, got.data()).ok());
      EXPECT_EQ(got, host);
      for (int dev = 0; dev < 8; ++dev)
        EXPECT_EQ(rt.communicator().bytes_received(dev), (*exe)->cost().collective_bytes);
      ++pairs;
    }
  EXPECT_EQ(pairs, 110);
}

// Hand-built per-device program run straight on the communicator: collective_permute,
// all_reduce (sum and max) and reduce_scatter against references.
TEST(Collectives, PermuteReduceAgainstReference) {
  const Mesh mesh = *Mesh::create({"data", "stage"}, {2, 4});
  auto comm = make_local_communicator(mesh);
  Builder b("c");
  ValueId x = b.argument("x", Shape{4, 2}, DType::kF32, {}, ArgRole::kParam);
  OpAttrs perm;
  perm.mesh_axes = {"stage"};
  perm.group_size = 4;
  perm.shift = 1;
  ValueId yp = b.emit(OpKind::kCollectivePermute, {x}, perm)[0];
  OpAttrs one = perm;  // member 1 alone sends, to member 3; the others receive zeros
  one.shift = 2;
  one.fill_zero = true;
  one.start = 1;
  one.size = 1;
  ValueId yq = b.emit(OpKind::kCollectivePermute, {x}, one)[0];
  OpAttrs ar;
  ar.mesh_axes = {"stage"};
  ar.group_size = 4;
  ValueId ys = b.emit(OpKind::kAllReduce, {x}, ar)[0];
  ar.reduce_max = true;
  ValueId ym = b.emit(OpKind::kAllReduce, {x}, ar)[0];
  OpAttrs rs;
  rs.mesh_axes = {"data", "stage"};
  rs.group_size = 8;
  rs.dim = 0;
  OpAttrs rs4 = rs;
  rs4.mesh_axes = {"stage"};
  rs4.group_size = 4;
  ValueId yr = b.emit(OpKind::kReduceScatter, {x}, rs4)[0];
  Program p = std::move(b).finish();
  const size_t nv = p.values().size();
  std::vector<std::vector<float>> store(8 * nv, std::vector<float>(8, 0.0f));
  std::vector<std::vector<void*>> tables(8, std::vector<void*>(nv));
  std::vector<void* const*> ptrs(8);
  for (int d = 0; d < 8; ++d) {
    for (size_t v = 0; v < nv; ++v) tables[d][v] = store[d * nv + v].data();
    for (int i = 0; i < 8; ++i) store[d * nv + x][i] = static_cast<float>(d * 10 + i);
    ptrs[d] = tables[d].data();
  }
  for (const Instr& in : p.instrs()) comm->run(p, in, ptrs);
  for (int d = 0; d < 8; ++d) {
    const int data = d / 4, stage = d % 4;
    const int from = data * 4 + (stage + 3) % 4;
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(store[d * nv + yp][i], from * 10 + i);
      EXPECT_EQ(store[d * nv + yq][i], stage == 3 ? (data * 4 + 1) * 10 + i : 0);
      float sum = 0, mx = -1;
      for (int s = 0; s < 4; ++s) {
        sum += (data * 4 + s) * 10 + i;
        mx = std::max(mx, static_cast<float>((data * 4 + s) * 10 + i));
      }
      EXPECT_EQ(store[d * nv + ys][i], sum);
      EXPECT_EQ(store[d * nv + ym][i], mx);
    }
    for (int i = 0; i < 2; ++i) {  // block `stage` (one row of 2) of the sum
      float sum = 0;
      for (int s = 0; s < 4; ++s) sum += (data * 4 + s) * 10 + stage * 2 + i;
      EXPECT_EQ(store[d * nv + yr][i], sum);
    }
  }
  // Device 0 received 3 x 32 bytes per collective (permute: 32; the one-source permute
  // nothing), device 3 the one-source permute's 32 more.
  auto got = comm->bytes_received(0);
  EXPECT_EQ(got["stage"], 32 + 3 * 32 + 3 * 32 + 3 * 8);
  EXPECT_EQ(comm->bytes_received(3)["stage"], 32 + 32 + 3 * 32 + 3 * 32 + 3 * 8);
}

TEST(Partition, BadInputsGiveClearErrors) {
  const Mesh mesh = mesh3();
  auto try_spec = [&](PartitionSpec s) {
    Program p = reshard_program(Shape{6, 8}, s, PartitionSpec());
    return compile(p, mesh, CompileOptions{}).status();
  };
  Status longer = try_spec(PartitionSpec({{"data"}, {}, {"fsdp"}}));
  EXPECT_FALSE(longer.ok());
  EXPECT_NE(longer.message().find("rank"), std::string::npos) << longer.message();
  Status indiv = try_spec(PartitionSpec({{"data", "fsdp"}}));
  EXPECT_FALSE(indiv.ok());
  EXPECT_NE(indiv.message().find("'x'"), std::string::npos) << indiv.message();
  EXPECT_NE(indiv.message().find("divisible"), std::string::npos) << indiv.message();
  Status unknown = try_spec(PartitionSpec({{"expert"}}));
  EXPECT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("expert"), std::string::npos) << unknown.message();
}

// The mesh axes ZeRO-1 and vmap use are options (SpmdOptions::axes), not names in compile/:
// renamed axes work the same, and MaxText's default names are absent from this mesh.
TEST(Partition, AxisNamesAreOptions) {
  const Mesh mesh = *Mesh::create({"dp", "mp"}, {2, 2});
  Builder b("zero1");
  ValueId w = b.argument("params/w", Shape{4, 6}, DType::kF32, {}, ArgRole::kParam);
  ValueId mu = b.argument("opt_state/mu/w", Shape{4, 6}, DType::kF32, {}, ArgRole::kOptMu);
  ValueId nu = b.argument("opt_state/nu/w", Shape{4, 6}, DType::kF32, {}, ArgRole::kOptNu);
  b.mutable_info(w).spec = PartitionSpec({{"mp"}, {}});
  b.output(b.add(mu, nu), "y");
  const Program p = std::move(b).finish();
  SpmdOptions o;
  o.shard_optimizer_over_data = true;
  Result<std::vector<NamedSharding>> defaults = argument_shardings(p, mesh, o);
  ASSERT_TRUE(defaults.ok()) << defaults.status().message();
  EXPECT_EQ((*defaults)[1].spec, PartitionSpec({{"mp"}, {}}));  // no `data` axis: unchanged
  o.axes.zero1 = "dp";
  Result<std::vector<NamedSharding>> dp = argument_shardings(p, mesh, o);
  ASSERT_TRUE(dp.ok()) << dp.status().message();
  EXPECT_EQ((*dp)[1].spec, PartitionSpec({{"dp", "mp"}, {}}));
  o.axes.zero1_skip = "mp";  // dim 0 carries `mp`: the next divisible dim takes `dp`
  Result<std::vector<NamedSharding>> skip = argument_shardings(p, mesh, o);
  ASSERT_TRUE(skip.ok()) << skip.status().message();
  EXPECT_EQ((*skip)[2].spec, PartitionSpec({{"mp"}, {"dp"}}));

  Builder v("vmapped");
  ValueId x = v.argument("x", Shape{2, 4}, DType::kF32, {}, ArgRole::kParam);
  v.set_vmap(2);
  ValueId y = v.scale(x, 2.0);
  v.set_vmap(0);
  v.output(y, "y");
  const Program vp = std::move(v).finish();
  CompileOptions co;
  co.axes.vmap = "pp";
  Status st = compile(vp, mesh, co).status();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("the mesh's pp axis has size 1"), std::string::npos)
      << st.message();
  const Mesh pp = *Mesh::create({"pp", "mp"}, {2, 2});
  EXPECT_TRUE(compile(vp, pp, co).ok());
}

// Rows inside one member's block move by one-source permutes: a slice of the last member's
// block of a split dim, and a pad (with an out_sharding) of a whole-dim row into one
// member's block, padded locally first (the row is not the block). No all_gather, and every
// permute's source is that member; the values are the global program's (tests/ops).
TEST(Partition, RowsInOneBlockMoveByPermutes) {
  const Mesh mesh = *Mesh::create({"stage", "data"}, {4, 2});
  Builder b("rows");
  ValueId x = b.argument("x", Shape{8, 6}, DType::kF32, {"activation_stage", ""}, ArgRole::kParam);
  ValueId r = b.argument("r", Shape{1, 6}, DType::kF32, {}, ArgRole::kParam);
  b.output(b.scale(b.slice(x, 0, 7, 1), 2.0), "last_row");            // block 3 of 4
  b.output(b.pad(r, 0, 5, 8, {"activation_stage", ""}), "placed");     // row 1 of block 2
  auto exe = compile(std::move(b).finish(), mesh, CompileOptions{});
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  const Program& p = (*exe)->program();
  std::vector<int64_t> sources;
  bool pad_local = false;
  for (const Instr& in : p.instrs()) {
    if (in.kind == OpKind::kCollectivePermute) {
      EXPECT_EQ(in.attrs.size, 1) << p.to_text();
      sources.push_back(in.attrs.start);
    }
    pad_local |= in.kind == OpKind::kPad && in.attrs.start == 1 && in.attrs.size == 2;
    if (in.kind == OpKind::kAllGather) {  // only the outputs' gathers, after both moves
      EXPECT_EQ(sources.size(), 5u) << p.to_text();
    }
  }
  // The slice: one permute to each of the 4 stages from stage 3; the pad: one from stage 2.
  EXPECT_EQ(sources, (std::vector<int64_t>{3, 3, 3, 3, 2})) << p.to_text();
  EXPECT_TRUE(pad_local) << p.to_text();
}

// A reshape merging a dim held one row per member with a split one keeps both splits on the
// merged dim (stage major, as the pipeline's output reaches the loss head), and the split
// back restores them: no collective either way (the output is then gathered: replicated).
TEST(Partition, ReshapeMergesAndSplitsShardedDims) {
  const Mesh mesh = *Mesh::create({"stage", "data"}, {2, 2});
  Builder b("r");
  ValueId x = b.argument("x", Shape{2, 4, 6}, DType::kF32,
                         {"activation_stage", "activation_batch", ""}, ArgRole::kParam);
  ValueId y = b.reshape(x, Shape{8, 6});
  b.output(b.reshape(b.scale(y, 2.0), Shape{2, 4, 6}), "back");
  auto exe = compile(std::move(b).finish(), mesh, CompileOptions{});
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  const Program& p = (*exe)->program();
  std::vector<std::string> reshaped;  // the reshapes' specs, in order
  for (const Instr& in : p.instrs()) {
    if (in.kind == OpKind::kReshape) reshaped.push_back(p.value(in.outputs[0]).spec->to_string());
    if (reshaped.size() < 2) {
      EXPECT_FALSE(is_collective(in.kind)) << op_name(in.kind) << "\n" << p.to_text();
    }
  }
  EXPECT_EQ(reshaped, (std::vector<std::string>{
                          PartitionSpec({{"stage", "data"}, {}}).to_string(),
                          PartitionSpec({{"stage"}, {"data"}, {}}).to_string()}))
      << p.to_text();
}

}  // namespace
}  // namespace eng
