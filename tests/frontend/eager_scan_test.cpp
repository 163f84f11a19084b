// tests/frontend/eager_scan_test.cpp: engine/frontend's eager shard_map (eager_manual.h),
// jax.lax.scan (scan.h) and make_jaxpr's text (jaxpr.h) without Lua, and XLA_FLAGS' device
// count (engine/dist/dist.h).
#include <gtest/gtest.h>

#include "engine/dist/dist.h"
#include "engine/frontend/array_print.h"
#include "engine/frontend/eager_manual.h"
#include "engine/frontend/jaxpr.h"
#include "engine/frontend/numpy.h"
#include "engine/frontend/scan.h"
#include "engine/frontend/vma.h"

#include "tests/frontend/test_values.h"

namespace eng::frontend {
namespace {

using test::put;

std::vector<double> values(const ArrayRef& a) { return fetch(*a).value(); }

Mesh mesh_i(int64_t n) { return Mesh::create({"i"}, {n}, AxisType::kExplicit).value(); }

TEST(EagerShardMap, OpsRunPerDeviceWithTheirVaryingAxes) {
  Session s;
  const Mesh m = mesh_i(2);
  std::shared_ptr<Trace> em = eager_trace("f", m);
  const Value x = put({0, 1, 2, 3, 4, 5}, Shape{6}, m, PartitionSpec{{"i"}});
  Result<std::vector<Value>> b = eager_blocks(s, em, {x}, {PartitionSpec{{"i"}}}, "f");
  ASSERT_TRUE(b.ok()) << b.status().message();
  const Value& blk = (*b)[0];
  EXPECT_EQ(blk.shape, Shape{3});
  EXPECT_EQ(vma_of(blk), std::vector<std::string>{"i"});
  EXPECT_EQ(array_repr(blk).value(),
            "On TFRT_CPU_0 at mesh coordinates (i,) = (0,):\n[0. 1. 2.]\n\n"
            "On TFRT_CPU_1 at mesh coordinates (i,) = (1,):\n[3. 4. 5.]\n");
  s.push_trace(em);
  Result<std::vector<Value>> y = s.apply(
      "psum", "i", {Operand{&blk}},
      [](Trace& tr, std::span<const ValueId> in) -> Result<std::vector<ValueId>> {
        ENG_ASSIGN_OR_RETURN(ValueId v, np::psum(tr, in[0], {"i"}));
        return std::vector<ValueId>{v};
      });
  s.pop_trace();
  ASSERT_TRUE(y.ok()) << y.status().message();
  EXPECT_TRUE(vma_of((*y)[0]).empty());  // psum: invariant
  Result<std::vector<ArrayRef>> out = eager_results(s, em, *y, {PartitionSpec()}, "f");
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(values((*out)[0]), (std::vector<double>{3, 5, 7}));
  // check_vma: the block itself, varying over i, cannot be out_specs=P()
  Result<std::vector<ArrayRef>> bad = eager_results(s, em, {blk}, {PartitionSpec()}, "f");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("could not infer replication over any axes"),
            std::string::npos)
      << bad.status().message();
  // the blocks concatenated again by out_specs=P('i')
  out = eager_results(s, em, {blk}, {PartitionSpec{{"i"}}}, "f");
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(values((*out)[0]), (std::vector<double>{0, 1, 2, 3, 4, 5}));
}

TEST(Scan, RunningSumAndCarryTypeError) {
  Session s;
  const Value zero = put({0}, Shape{});
  const Value xs = put({1, 2, 3}, Shape{3});
  Tree leaf;
  const OpFn add = [](Trace& tr, std::span<const ValueId> in) -> Result<std::vector<ValueId>> {
    ENG_ASSIGN_OR_RETURN(ValueId y, np::add(tr, in[0], in[1]));
    return std::vector<ValueId>{y};
  };
  ScanBody body = [&](const ScanTree& c, const ScanTree& x) -> Result<std::pair<ScanTree, ScanTree>> {
    ENG_ASSIGN_OR_RETURN(std::vector<Value> sum,
                         s.apply("add", "", {Operand{&c.leaves[0]}, Operand{&x.leaves[0]}}, add));
    return std::make_pair(ScanTree{leaf, sum}, ScanTree{leaf, {c.leaves[0]}});
  };
  Result<ScanResult> r = scan(s, body, ScanTree{leaf, {zero}}, ScanTree{leaf, {xs}}, {});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(fetch(*r->carry.leaves[0].data).value(), std::vector<double>{6});
  EXPECT_EQ(fetch(*r->ys.leaves[0].data).value(), (std::vector<double>{0, 1, 3}));
  // a carry that changes shape: JAX's text
  const Value two = put({1, 2}, Shape{2});
  ScanBody grow = [&](const ScanTree&, const ScanTree& x) -> Result<std::pair<ScanTree, ScanTree>> {
    return std::make_pair(ScanTree{leaf, {two}}, x);
  };
  ScanOptions o;
  o.carry_name = "c";
  r = scan(s, grow, ScanTree{leaf, {zero}}, ScanTree{leaf, {xs}}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "scan body function carry input and carry output must have equal types, but they "
            "differ:\n\nThe input carry c has type float32[] but the corresponding output carry "
            "component has type float32[2], so the shapes do not match.\n\nRevise the function "
            "so that all output types match the corresponding input types.");
  o.length = 4;
  r = scan(s, body, ScanTree{leaf, {zero}}, ScanTree{leaf, {xs}}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "scan got `length` argument of 4 which disagrees with leading axis sizes [3].");
}

TEST(Scan, LeafPathsAreJaxKeystrs) {
  Tree t;
  t.leaf = false;
  Tree inner;
  inner.leaf = false;
  inner.kids.push_back({TreeKey{false, 0, "w"}, Tree{}});
  t.kids.push_back({TreeKey{true, 1, ""}, Tree{}});
  t.kids.push_back({TreeKey{true, 2, ""}, inner});
  EXPECT_EQ(scan_leaf_paths(t), (std::vector<std::string>{"[0]", "[1]['w']"}));
}

TEST(XlaFlags, DeviceCount) {
  EXPECT_EQ(dist::xla_flags_device_count("").value(), 0);
  EXPECT_EQ(dist::xla_flags_device_count("--xla_force_host_platform_device_count=8").value(), 8);
  EXPECT_EQ(dist::xla_flags_device_count("--a=1 --xla_force_host_platform_device_count=2 --b "
                                         "--xla_force_host_platform_device_count=4")
                .value(),
            4);  // the last one counts
  EXPECT_FALSE(dist::xla_flags_device_count("--xla_force_host_platform_device_count=x").ok());
  EXPECT_FALSE(dist::xla_flags_device_count("--xla_force_host_platform_device_count=0").ok());
}

}  // namespace
}  // namespace eng::frontend
