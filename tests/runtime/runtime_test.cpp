// tests/runtime/runtime_test.cpp: device accounting, sharded put/fetch, the memory plan's peak
// against what the devices really allocate, and replicated execution on several devices.
#include <numeric>

#include <gtest/gtest.h>

#include <cmath>

#include "engine/compile/executable.h"
#include "tests/compile/test_programs.h"
#include "tests/runtime/runtime_harness.h"

namespace eng {
namespace {

TEST(Device, AccountsEveryByte) {
  Device dev(0, 0);
  {
    auto a = dev.allocate(1000, "a");
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % 64, 0u);
    EXPECT_EQ(static_cast<const char*>(a->data())[999], 0);
    auto b = dev.allocate(24, "b");
    EXPECT_EQ(dev.bytes_in_use(), 1024);
    DeviceBuffer moved = std::move(*b);
    EXPECT_EQ(dev.bytes_in_use(), 1024);
  }
  EXPECT_EQ(dev.bytes_in_use(), 0);
  EXPECT_EQ(dev.peak_bytes(), 1024);
  dev.reset_peak();
  EXPECT_EQ(dev.peak_bytes(), 0);
}

TEST(Device, OutOfMemoryListsTheLargestBuffers) {
  Device dev(3, 4096);
  auto big = dev.allocate(3000, "params/decoder/layers_0/mlp/wi_0/kernel");
  auto small = dev.allocate(500, "step");
  ASSERT_TRUE(big.ok() && small.ok());
  auto fail = dev.allocate(1000, "arena:train_step");
  ASSERT_FALSE(fail.ok());
  const std::string& m = fail.status().message();
  EXPECT_EQ(fail.status().code(), Code::kResourceExhausted);
  EXPECT_NE(m.find("device 3"), std::string::npos) << m;
  EXPECT_NE(m.find("arena:train_step"), std::string::npos) << m;
  ASSERT_NE(m.find("500 B step"), std::string::npos) << m;
  EXPECT_LT(m.find("wi_0"), m.find("500 B step")) << m;  // largest first
  EXPECT_EQ(dev.bytes_in_use(), 3500);
}

TEST(Runtime, PutAndFetchShardedBlocks) {
  Mesh mesh = *Mesh::create({"data", "tensor"}, {2, 2});
  Runtime rt(mesh);
  Shape shape{4, 6};
  std::vector<float> host(24);
  std::iota(host.begin(), host.end(), 0.0f);
  NamedSharding s{mesh, PartitionSpec({{"data"}, {"tensor"}})};
  auto a = rt.put(host.data(), shape, DType::kF32, s, "w");
  ASSERT_TRUE(a.ok()) << a.status().message();
  // Device 3 = (data 1, tensor 1): rows 2..3, cols 3..5.
  const float* d3 = static_cast<const float*>(a->shards[3].data());
  EXPECT_EQ(std::vector<float>(d3, d3 + 6), (std::vector<float>{15, 16, 17, 21, 22, 23}));
  EXPECT_EQ(rt.device(3).bytes_in_use(), 24);
  std::vector<float> back(24, -1);
  ASSERT_TRUE(rt.fetch(*a, back.data()).ok());
  EXPECT_EQ(back, host);

  NamedSharding rows{mesh, PartitionSpec(std::vector<PartitionSpec::DimAxes>{{"data", "tensor"}})};  // 4 row blocks
  auto b = rt.put(host.data(), shape, DType::kF32, rows, "x");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(static_cast<const float*>(b->shards[2].data())[0], 12.0f);
  std::fill(back.begin(), back.end(), -1);
  ASSERT_TRUE(rt.fetch(*b, back.data()).ok());
  EXPECT_EQ(back, host);

  std::vector<float> doubled(24);
  for (int i = 0; i < 24; ++i) doubled[i] = 2.0f * i;
  ASSERT_TRUE(rt.write(*b, doubled.data()).ok());  // in place, same blocks
  EXPECT_EQ(static_cast<const float*>(b->shards[2].data())[0], 24.0f);
  ASSERT_TRUE(rt.fetch(*b, back.data()).ok());
  EXPECT_EQ(back, doubled);

  NamedSharding bad{mesh, PartitionSpec({{"data"}, {"data"}})};
  EXPECT_FALSE(rt.put(host.data(), shape, DType::kF32, bad, "y").ok());
  Mesh other = *Mesh::create({"fsdp"}, {4});
  EXPECT_FALSE(rt.put(host.data(), shape, DType::kF32, NamedSharding{other, PartitionSpec()}, "z").ok());
}

// Places a train step's arguments, prepares and executes; returns the arrays.
struct Placed {
  std::vector<Array> arrays;
  std::vector<Array*> ptrs;
};

Placed place(Runtime& rt, const Program& p, const std::vector<HostTensor>& host) {
  Placed pl;
  for (size_t k = 0; k < host.size(); ++k)
    pl.arrays.push_back(testing::put_host(rt, host[k], NamedSharding{rt.mesh(), PartitionSpec()},
                                          p.value(p.args()[k].value).name));
  for (Array& a : pl.arrays) pl.ptrs.push_back(&a);
  return pl;
}

TEST(Runtime, PlannedPeakEqualsWhatTheDeviceAllocates) {
  testing::TinyDims d;
  d.L = 2;
  Program p = testing::build_train_step(d);
  auto exe = compile(p, Mesh(), CompileOptions{});
  ASSERT_TRUE(exe.ok());
  Runtime rt{Mesh()};
  Placed pl = place(rt, p, testing::random_args(p, 5, d.V));
  EXPECT_EQ(rt.device(0).bytes_in_use(), (*exe)->memory().argument_bytes);
  ASSERT_TRUE(rt.prepare(**exe).ok());
  std::vector<Array> outs;
  ASSERT_TRUE(rt.execute(**exe, pl.ptrs, outs).ok());
  ASSERT_TRUE(rt.execute(**exe, pl.ptrs, outs).ok());
  EXPECT_EQ(rt.device(0).peak_bytes(), (*exe)->memory().peak_bytes());
  EXPECT_EQ(rt.device(0).bytes_in_use(), (*exe)->memory().peak_bytes());
  rt.release(**exe);
  EXPECT_EQ(rt.device(0).bytes_in_use(), (*exe)->memory().peak_bytes() - (*exe)->arena_bytes());
}

TEST(Runtime, CapacityBelowThePlanIsAnOutOfMemoryError) {
  testing::TinyDims d;
  Program p = testing::build_train_step(d);
  auto exe = compile(p, Mesh(), CompileOptions{});
  ASSERT_TRUE(exe.ok());
  Runtime rt(Mesh(), (*exe)->memory().argument_bytes + (*exe)->arena_bytes() / 2);
  Placed pl = place(rt, p, testing::random_args(p, 5, d.V));
  Status s = rt.prepare(**exe);
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_NE(s.message().find("arena:train_step"), std::string::npos) << s.message();
}

TEST(Runtime, ReplicatedStepOnFourDevicesMatchesOneDevice) {
  testing::TinyDims d;
  Program p = testing::build_train_step(d);
  // Pin every argument replicated (unset specs would be assigned from logical axes).
  for (const Argument& a : p.args()) p.mutable_value(a.value).spec = PartitionSpec();
  std::vector<HostTensor> host = testing::random_args(p, 9, d.V);
  auto run = [&](const Mesh& mesh) {
    auto exe = compile(p, mesh, CompileOptions{});
    EXPECT_TRUE(exe.ok());
    Runtime rt(mesh);
    Placed pl = place(rt, p, host);
    std::vector<Array> outs;
    for (int i = 0; i < 2; ++i) EXPECT_TRUE(rt.execute(**exe, pl.ptrs, outs).ok());
    for (int dev = 0; dev < rt.num_devices(); ++dev)
      EXPECT_EQ(rt.device(dev).peak_bytes(), (*exe)->memory().peak_bytes());
    std::vector<std::vector<double>> results;
    for (const Array& a : pl.arrays) results.push_back(testing::fetch_host(rt, a));
    EXPECT_EQ(outs.size(), 4u);  // the non-aliased outputs: the metrics
    for (const Array& o : outs) results.push_back(testing::fetch_host(rt, o));
    // Every device computed the same thing: compare device 0's and the last device's loss.
    const Array& loss =
        testing::output_array(p, p.find_output("learning/loss"), pl.arrays, outs);
    const float* first = static_cast<const float*>(loss.shards.front().data());
    const float* last = static_cast<const float*>(loss.shards.back().data());
    EXPECT_EQ(*first, *last);
    return results;
  };
  auto one = run(Mesh());
  auto four = run(*Mesh::create({"data", "tensor"}, {2, 2}));
  ASSERT_EQ(one.size(), four.size());
  // Replicated arguments, but the model's constraints and out_shardings shard the
  // activations (batch over data, heads/mlp over tensor), so sums run in another order:
  // equal to float rounding, not bitwise.
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i].size(), four[i].size());
    double diff = 0, norm = 1e-30;
    for (size_t k = 0; k < one[i].size(); ++k) {
      diff = std::max(diff, std::fabs(one[i][k] - four[i][k]));
      norm = std::max(norm, std::fabs(one[i][k]));
    }
    EXPECT_LT(diff / norm, 1e-5) << "result " << i;
  }
}

TEST(Runtime, ExecuteRejectsMismatchedArguments) {
  testing::TinyDims d;
  Program p = testing::build_train_step(d);
  auto exe = compile(p, Mesh(), CompileOptions{});
  ASSERT_TRUE(exe.ok());
  Runtime rt{Mesh()};
  Placed pl = place(rt, p, testing::random_args(p, 5, d.V));
  std::vector<Array> outs;
  std::vector<Array*> fewer(pl.ptrs.begin(), pl.ptrs.end() - 1);
  EXPECT_FALSE(rt.execute(**exe, fewer, outs).ok());
  std::swap(pl.ptrs[0], pl.ptrs[1]);  // embedding (V, E) where a norm scale (E) is expected
  Status s = rt.execute(**exe, pl.ptrs, outs);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("params/token_embedder/embedding"), std::string::npos) << s.message();
  Runtime other(*Mesh::create({"data"}, {2}));
  EXPECT_FALSE(other.prepare(**exe).ok());
}

TEST(Runtime, OutputsPassedBackAsArgumentsAreRejected) {
  Builder b("double_buffer");
  ValueId x = b.argument("x", Shape{4}, DType::kF32, {}, ArgRole::kParam);
  b.output(b.scale(x, 2.0), "y");
  Program p = std::move(b).finish();
  auto exe = compile(p, Mesh(), CompileOptions{});
  ASSERT_TRUE(exe.ok());
  Runtime rt{Mesh()};
  std::vector<float> host{1, 2, 3, 4};
  Array a = std::move(rt.put(host.data(), Shape{4}, DType::kF32, NamedSharding{}, "x")).value();
  std::vector<Array> outs;
  std::vector<Array*> args{&a};
  ASSERT_TRUE(rt.execute(**exe, args, outs).ok());
  std::vector<Array*> same{&outs[0]};
  EXPECT_FALSE(rt.execute(**exe, same, outs).ok());
  // Swapping (double buffering) is the supported way to feed outputs back.
  std::swap(a, outs[0]);
  ASSERT_TRUE(rt.execute(**exe, args, outs).ok());
  EXPECT_EQ(testing::fetch_host(rt, outs[0]), (std::vector<double>{4, 8, 12, 16}));
}

}  // namespace
}  // namespace eng
