// tests/compile/compile_test.cpp: buffer assignment, in-place aliasing rules, the memory and
// cost analyses on hand-built programs, and a shape-only llama2-7b-sized compile.
#include <chrono>

#include <gtest/gtest.h>

#include "engine/compile/executable.h"
#include "engine/compile/hlo_text.h"
#include "engine/compile/memory_plan.h"
#include "tests/compile/test_programs.h"

namespace eng {
namespace {

std::shared_ptr<const Executable> compile_ok(const Program& p, const Mesh& mesh = Mesh()) {
  auto exe = compile(p, mesh, CompileOptions{});
  EXPECT_TRUE(exe.ok()) << exe.status().message();
  return exe.ok() ? *exe : nullptr;
}

// x (4, 8) . w (8, 16) -> y (4, 16) temp -> z = 2y output; step += 1 in place.
Program small_program() {
  Builder b("small");
  ValueId x = b.argument("x", Shape{4, 8}, DType::kF32, {}, ArgRole::kBatch);
  ValueId w = b.argument("w", Shape{8, 16}, DType::kF32, {}, ArgRole::kParam);
  ValueId step = b.argument("step", Shape{}, DType::kI32, {}, ArgRole::kStep);
  ValueId y = b.matmul(x, w, 1, 1);
  ValueId z = b.scale(y, 2.0);
  b.output(z, "z");
  b.output(b.increment(step), "step", 2);
  return std::move(b).finish();
}

TEST(Compile, MemoryAnalysisOfASmallProgram) {
  Program p = small_program();
  auto exe = compile_ok(p);
  ASSERT_TRUE(exe);
  const MemoryAnalysis& m = exe->memory();
  EXPECT_EQ(m.argument_bytes, 4 * 8 * 4 + 8 * 16 * 4 + 4);
  EXPECT_EQ(m.output_bytes, 4 * 16 * 4 + 4);
  EXPECT_EQ(m.alias_bytes, 4);
  EXPECT_EQ(m.temp_bytes, 256);  // y only; z is an output, step' aliases step
  EXPECT_EQ(m.peak_bytes(), 128 + 512 + 4 + 260 + 256 - 4);
  EXPECT_EQ(exe->output_region_bytes(), 256);

  const auto& slots = exe->slots();
  EXPECT_EQ(slots[3].kind, BufferSlot::Kind::kTemp);  // y
  EXPECT_EQ(slots[4].kind, BufferSlot::Kind::kOutput);  // z
  EXPECT_EQ(slots[4].index, 0);
  EXPECT_EQ(slots[5].kind, BufferSlot::Kind::kArgument);  // step'
  EXPECT_EQ(slots[5].index, 2);

  auto temps = exe->largest_temps(5);
  ASSERT_EQ(temps.size(), 1u);
  EXPECT_EQ(temps[0].value, 3);
  EXPECT_EQ(temps[0].first_instr, 0);
  EXPECT_EQ(temps[0].last_instr, 1);
}

// The HLO-syntax printer (JAX's Compiled.as_text): XLA's opcodes where the op is one, the rest
// custom-calls named after the engine op, parameters and the ROOT tuple; a collective's replica
// groups are the executor's groups (devices sharing every other mesh coordinate, ranked along
// the collective's axes) and a cyclic permute's pairs send member r to r + shift mod G.
TEST(Compile, HloTextNamesXlaOpcodesAndReplicaGroups) {
  const std::string small = hlo_text(small_program(), Mesh());
  EXPECT_NE(small.find("%Arg_0.1 = f32[4,8]{1,0} parameter(0)"), std::string::npos) << small;
  EXPECT_NE(small.find("dot(f32[4,8]{1,0} %Arg_0.1, f32[8,16]{1,0} %Arg_1.2)"), std::string::npos) << small;
  EXPECT_NE(small.find("custom-call(f32[4,16]{1,0} %dot.4), custom_call_target=\"scale\""),
            std::string::npos) << small;
  EXPECT_NE(small.find("s32[] parameter(2)"), std::string::npos) << small;
  EXPECT_NE(small.find("ROOT %tuple."), std::string::npos) << small;

  const Mesh mesh = Mesh::create({"X", "Y"}, {4, 2}).value();
  Builder b("collectives");
  ValueId x = b.argument("x", Shape{2, 3}, DType::kF32, {}, ArgRole::kBatch);
  OpAttrs over_x;
  over_x.mesh_axes = {"X"};
  over_x.group_size = 4;
  ValueId r = b.emit(OpKind::kAllReduce, {x}, over_x)[0];
  OpAttrs shift_y;
  shift_y.mesh_axes = {"Y"};
  shift_y.group_size = 2;
  shift_y.shift = 1;
  b.output(b.emit(OpKind::kCollectivePermute, {r}, shift_y)[0], "y");
  const std::string text = hlo_text(std::move(b).finish(), mesh);
  EXPECT_NE(text.find("all-reduce(f32[2,3]{1,0} %Arg_0.1), channel_id=1, "
                      "replica_groups={{0,2,4,6},{1,3,5,7}}, use_global_device_ids=true, "
                      "to_apply=%region_add"),
            std::string::npos) << text;
  EXPECT_NE(text.find("source_target_pairs={{0,1},{1,0},{2,3},{3,2},{4,5},{5,4},{6,7},{7,6}}"),
            std::string::npos) << text;
  EXPECT_NE(text.find("%region_add (a: f32[], b: f32[]) -> f32[]"), std::string::npos) << text;
}

TEST(Compile, CostAnalysisCountsMatmulAndAttention) {
  Program p = small_program();
  auto exe = compile_ok(p);
  ASSERT_TRUE(exe);
  // matmul 2*4*16*8, scale 64, increment 1.
  EXPECT_DOUBLE_EQ(exe->cost().flops, 2.0 * 4 * 16 * 8 + 64 + 1);
  // matmul reads 128 + 512, writes 256; scale reads and writes 256; increment 4 + 4.
  EXPECT_DOUBLE_EQ(exe->cost().bytes_accessed, 128 + 512 + 256 + 512 + 8);

  Builder b("attn");
  ValueId q = b.argument("q", Shape{2, 16, 4, 8}, DType::kF32, {}, ArgRole::kBatch);
  auto [o, lse] = b.attention(q, q, q, 0.5);
  b.output(o, "o");
  Program pa = std::move(b).finish();
  EXPECT_DOUBLE_EQ(instr_flops(pa, pa.instrs()[0]), 2.0 * 2 * 4 * 8 * 16 * 17);
}

// ragged_dot and its weight gradient: each of the B·N rows is in one of the E groups, so both
// are 2·B·N·K·P (jax's ragged_dot), whatever E is; the gradient was once E times too high.
TEST(Compile, CostOfRaggedDotAndItsGradCountsEveryRowOnce) {
  const int64_t B = 2, N = 6, K = 4, P = 5, E = 3;
  Builder b("ragged");
  ValueId l = b.argument("lhs", Shape{B, N, K}, DType::kF32, {}, ArgRole::kBatch);
  ValueId w = b.argument("w", Shape{E, K, P}, DType::kF32, {}, ArgRole::kParam);
  ValueId g = b.argument("group_sizes", Shape{B, E}, DType::kI32, {}, ArgRole::kBatch);
  ValueId dy = b.argument("dout", Shape{B, N, P}, DType::kF32, {}, ArgRole::kBatch);
  ValueId y = b.emit(OpKind::kRaggedDot, {l, w, g})[0];
  ValueId dw = b.emit(OpKind::kRaggedDotGrad, {l, dy, g})[0];
  ValueId dwt = b.emit(OpKind::kRaggedDotGrad, {dy, l, g})[0];  // trans_b's (E,P,K)
  b.output(y, "y");
  b.output(dw, "dw");
  b.output(dwt, "dwt");
  Program p = std::move(b).finish();
  ASSERT_EQ(p.instrs().size(), 3u);
  const double rows = 2.0 * B * N * K * P;
  EXPECT_DOUBLE_EQ(instr_flops(p, p.instrs()[0]), rows);
  EXPECT_DOUBLE_EQ(instr_flops(p, p.instrs()[1]), rows);
  EXPECT_DOUBLE_EQ(instr_flops(p, p.instrs()[2]), rows);
}

TEST(Compile, MemoryLineInMaxTextForm) {
  MemoryAnalysis m;
  m.argument_bytes = int64_t{3} << 30;
  m.output_bytes = int64_t{2} << 30;
  m.alias_bytes = int64_t{1} << 30;
  m.temp_bytes = int64_t{3} << 29;
  EXPECT_EQ(m.to_string(),
            "Total estimated memory size: 5.5 GB, estimated output size: 2.0 GB, estimated temp "
            "size: 1.5 GB, estimated argument size: 3.0 GB, Estimated host temp size: 0.0 GB.");
}

TEST(Compile, InPlaceUpdateOfAnArgumentReadLaterIsAnError) {
  Builder b("bad");
  ValueId p = b.argument("params/w", Shape{8}, DType::kF32, {}, ArgRole::kParam);
  ValueId g = b.argument("grad", Shape{8}, DType::kF32, {}, ArgRole::kBatch);
  ValueId mu = b.argument("mu", Shape{8}, DType::kF32, {}, ArgRole::kOptMu);
  ValueId nu = b.argument("nu", Shape{8}, DType::kF32, {}, ArgRole::kOptNu);
  ValueId step = b.argument("step", Shape{}, DType::kI32, {}, ArgRole::kStep);
  ValueId lr = b.learning_rate(step, 1e-3, 0, 10, 0.1);
  auto upd = b.adamw(p, g, mu, nu, lr, lr, step, 0.9, 0.95, 1e-8, 0.0);
  ValueId late = b.sum_squares(p);  // reads the old params after the in-place update
  b.output(upd[0], "params/w", 0);
  b.output(upd[1], "mu", 2);
  b.output(upd[2], "nu", 3);
  b.output(late, "late");
  auto exe = compile(std::move(b).finish(), Mesh(), CompileOptions{});
  ASSERT_FALSE(exe.ok());
  EXPECT_NE(exe.status().message().find("params/w"), std::string::npos) << exe.status().message();
  EXPECT_NE(exe.status().message().find("sum_squares"), std::string::npos)
      << exe.status().message();
}

TEST(Compile, AliasedOutputWrittenWhileTheArgumentIsReadIsAnError) {
  Builder b("bad");
  ValueId x = b.argument("x", Shape{8}, DType::kF32, {}, ArgRole::kParam);
  ValueId y = b.scale(x, 2.0);  // not an in-place op: writing x while reading it is unsafe
  b.output(y, "x", 0);
  auto exe = compile(std::move(b).finish(), Mesh(), CompileOptions{});
  ASSERT_FALSE(exe.ok());
  EXPECT_NE(exe.status().message().find("'x'"), std::string::npos) << exe.status().message();

  Builder b2("ok");
  ValueId x2 = b2.argument("x", Shape{8}, DType::kF32, {}, ArgRole::kParam);
  ValueId y2 = b2.scale(x2, 2.0);
  b2.output(b2.add(y2, y2), "x", 0);  // x is dead by then: written straight into its buffer
  auto exe2 = compile_ok(std::move(b2).finish());
  ASSERT_TRUE(exe2);
  EXPECT_EQ(exe2->slots()[2].kind, BufferSlot::Kind::kArgument);
}

TEST(Compile, TwoOutputsUpdatingOneArgumentIsAnError) {
  Builder b("bad");
  ValueId s = b.argument("step", Shape{}, DType::kI32, {}, ArgRole::kStep);
  ValueId s1 = b.increment(s);
  b.output(s1, "a", 0);
  b.output(s1, "b", 0);
  EXPECT_FALSE(compile(std::move(b).finish(), Mesh(), CompileOptions{}).ok());
}

TEST(Compile, ConstraintAndInPlaceOpsShareTheirInputBuffer) {
  Builder b("alias");
  ValueId x = b.argument("x", Shape{4, 8}, DType::kF32, {"batch", "embed"}, ArgRole::kBatch);
  ValueId y = b.scale(x, 3.0);
  ValueId c = b.constraint(y, {"activation_batch", "activation_embed"});
  ValueId z = b.add(c, c);
  b.output(z, "z");
  ValueId cx = b.constraint(x, {"a", "b"});
  b.output(b.add(cx, cx), "w");
  auto exe = compile_ok(std::move(b).finish());
  ASSERT_TRUE(exe);
  const auto& slots = exe->slots();
  EXPECT_EQ(slots[c].kind, BufferSlot::Kind::kTemp);
  EXPECT_EQ(slots[c].offset, slots[y].offset);
  EXPECT_EQ(slots[cx].kind, BufferSlot::Kind::kArgument);
  EXPECT_EQ(exe->memory().temp_bytes, 128);
  ASSERT_EQ(exe->largest_temps(10).size(), 1u);
  EXPECT_EQ(exe->largest_temps(10)[0].last_instr, 2);  // y's life extends to c's reader
}

// add and mul take the buffer of an operand that dies at them (the accumulation acc' = acc
// + x in one buffer, as XLA's buffer assignment does): input 0's, else input 1's; a new
// buffer when neither dies there; never for a program output.
TEST(Compile, AddAndMulReuseADyingOperandsBuffer) {
  Builder b("acc");
  ValueId x = b.argument("x", Shape{64}, DType::kF32, {}, ArgRole::kBatch);
  ValueId a = b.scale(x, 2.0), t = b.scale(x, 3.0);
  ValueId s1 = b.add(a, t);        // a and t die here: a's buffer
  ValueId u = b.scale(x, 5.0);
  ValueId s2 = b.add(u, s1);       // u is read again below, s1 dies: s1's buffer
  ValueId k = b.mul(s2, u);        // both die: s2's buffer
  ValueId g = b.scale(x, 7.0);
  ValueId n = b.add(k, g);         // k and g are read again below: a buffer of its own
  ValueId o = b.add(n, b.mul(k, g));
  b.output(o, "o");
  auto exe = compile_ok(std::move(b).finish());
  ASSERT_TRUE(exe);
  const auto& slots = exe->slots();
  for (ValueId v : {a, t, s1, u, s2, k, g, n}) EXPECT_EQ(slots[v].kind, BufferSlot::Kind::kTemp);
  EXPECT_EQ(slots[s1].offset, slots[a].offset);
  EXPECT_NE(slots[s1].offset, slots[t].offset);
  EXPECT_EQ(slots[s2].offset, slots[s1].offset);
  EXPECT_NE(slots[s2].offset, slots[u].offset);
  EXPECT_EQ(slots[k].offset, slots[s2].offset);
  EXPECT_NE(slots[n].offset, slots[k].offset);
  EXPECT_NE(slots[n].offset, slots[g].offset);
  EXPECT_EQ(slots[o].kind, BufferSlot::Kind::kOutput);
}

TEST(Compile, ShardedValuesArePartitioned) {
  Builder b("sharded");
  ValueId x = b.argument("x", Shape{4, 8}, DType::kF32, {}, ArgRole::kBatch);
  b.output(b.scale(x, 2.0), "y");
  Program p = std::move(b).finish();
  Mesh mesh = *Mesh::create({"data"}, {2});
  EXPECT_TRUE(compile(p, mesh, CompileOptions{}).ok());  // replicated: runs on both devices
  p.mutable_value(x).spec = PartitionSpec({{"data"}, {}});
  auto exe = compile(p, mesh, CompileOptions{});
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  // Per-device program: x is (2, 8) locally; the replicated output is all-gathered.
  const Program& local = (*exe)->program();
  EXPECT_EQ(local.value(local.args()[0].value).shape, (Shape{2, 8}));
  EXPECT_EQ(local.instrs().back().kind, OpKind::kAllGather);
  EXPECT_EQ((*exe)->cost().collective_bytes.at("data"), 64.0);  // the other (2, 8) block
  // A size-1 axis shards nothing: fine on one device.
  Mesh one = *Mesh::create({"data"}, {1});
  EXPECT_TRUE(compile(p, one, CompileOptions{}).ok());
}

// Every temp of a real train step, checked pairwise by the verifier.
void expect_plan_valid(const Executable& exe) {
  std::vector<PlanBuffer> bufs;
  MemoryPlan plan;
  for (const TempInfo& t : exe.largest_temps(-1)) {
    bufs.push_back({t.bytes, t.first_instr, t.last_instr});
    plan.offsets.push_back(t.offset);
  }
  plan.arena_bytes = exe.arena_bytes();
  Status s = verify_plan(bufs, plan);
  EXPECT_TRUE(s.ok()) << s.message();
  for (size_t v = 0; v < exe.slots().size(); ++v) {
    const BufferSlot& slot = exe.slots()[v];
    ASSERT_NE(slot.kind, BufferSlot::Kind::kNone) << "value " << v;
    if (slot.kind == BufferSlot::Kind::kTemp) {
      EXPECT_LE(slot.offset + slot.bytes, exe.arena_bytes());
    }
  }
}

TEST(Compile, TrainStepTempsNeverOverlap) {
  testing::TinyDims d;
  d.L = 2;
  auto exe = compile_ok(testing::build_train_step(d));
  ASSERT_TRUE(exe);
  expect_plan_valid(*exe);
  // Every parameter, mu, nu and the step are updated in place.
  const Program& p = exe->program();
  for (const ProgramOutput& out : p.outputs())
    if (out.aliased_arg >= 0) {
      EXPECT_EQ(exe->slots()[out.value].kind, BufferSlot::Kind::kArgument) << out.name;
      EXPECT_EQ(exe->slots()[out.value].index, out.aliased_arg) << out.name;
    }
  EXPECT_EQ(exe->memory().alias_bytes, exe->memory().argument_bytes - 4 * d.B * d.T * 4);
  // Reusing bytes: the arena is smaller than the sum of all temps.
  int64_t total = 0;
  for (const TempInfo& t : exe->largest_temps(-1)) total += t.bytes;
  EXPECT_LT(exe->arena_bytes(), total);
}

TEST(Compile, Llama7bTrainStepCompilesShapeOnlyInUnderASecond) {
  testing::TinyDims d{.B = 1, .T = 2048, .V = 32000, .E = 4096, .H = 32, .D = 128, .M = 11008,
                      .L = 32};
  Program p = testing::build_train_step(d);
  auto t0 = std::chrono::steady_clock::now();
  auto exe = compile_ok(p);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(exe);
  EXPECT_LT(seconds, 1.0);
  int64_t params = 0;
  for (const Argument& a : p.args())
    if (a.role == ArgRole::kParam) params += p.value(a.value).shape.numel();
  EXPECT_GT(params, 6'500'000'000);
  EXPECT_EQ(exe->memory().argument_bytes, 3 * params * 4 + 4 + 4 * 2048 * 4);
  expect_plan_valid(*exe);
  RecordProperty("instrs", static_cast<int>(p.instrs().size()));
  fmt::print("llama2-7b train_step: {} instrs, {} values, compiled in {:.1f} ms\n{}\n",
             p.instrs().size(), p.values().size(), seconds * 1e3, exe->memory().to_string());
  for (const TempInfo& t : exe->largest_temps(3))
    fmt::print("  temp %{} {:.1f} MiB live [{}, {}]\n", t.value, t.bytes / 1048576.0,
               t.first_instr, t.last_instr);
}

}  // namespace
}  // namespace eng
