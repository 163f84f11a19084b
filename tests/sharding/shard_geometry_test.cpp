// tests/sharding/shard_geometry_test.cpp: the one shard geometry (shard_geometry.h) against
// brute force: ranks along axes vs an enumeration of the mesh, blocks that tile the global
// array exactly once, divisibility messages, size-1 removal on MaxText's examples.
#include "engine/sharding/shard_geometry.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "engine/sharding/logical_rules.h"
#include "tests/common/mesh_helpers.h"

namespace eng {
namespace {

using eng::testing::contains;
using eng::testing::make_mesh;
using Axes = std::vector<std::string>;

PartitionSpec P(std::initializer_list<PartitionSpec::DimAxes> dims,
                std::vector<std::string> partial = {}) {
  return PartitionSpec(std::vector<PartitionSpec::DimAxes>(dims), std::move(partial));
}

struct MeshCase {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
};

const std::vector<MeshCase>& meshes() {
  static const std::vector<MeshCase> m = {
      {{"x"}, {4}},
      {{"data", "tensor"}, {2, 4}},
      {{"data", "fsdp", "tensor"}, {2, 2, 2}},
      {{"stage", "data", "fsdp", "tensor"}, {2, 3, 1, 2}},
      {{"a", "b", "c"}, {3, 1, 4}},
  };
  return m;
}

// Every ordered list of distinct axes of the mesh (with the empty list): 1 + n + n(n-1) + ...
std::vector<Axes> axis_lists(const Mesh& mesh) {
  std::vector<Axes> out = {{}};
  for (size_t i = 0; i < out.size(); ++i)
    for (const auto& a : mesh.axis_names())
      if (std::find(out[i].begin(), out[i].end(), a) == out[i].end()) {
        Axes next = out[i];
        next.push_back(a);
        out.push_back(next);
      }
  return out;
}

// Brute force: the rank along `axes` read off the device's mesh coordinates, the first axis
// most significant (the definition, not the stride arithmetic under test).
int64_t brute_rank(const Mesh& mesh, const Axes& axes, int64_t device) {
  std::vector<int64_t> c = mesh.device_coords(device);
  int64_t r = 0;
  for (const auto& a : axes) r = r * mesh.axis_size(a) + c[mesh.axis_index(a)];
  return r;
}

TEST(AxesGroup, RankMatchesEnumerationOfTheMesh) {
  int checked = 0;
  for (const MeshCase& mc : meshes()) {
    const Mesh mesh = make_mesh(mc.names, mc.sizes);
    for (const Axes& axes : axis_lists(mesh)) {
      const AxesGroup g(mesh, axes);
      EXPECT_EQ(g.size(), axes_size(mesh, axes));
      // Devices with equal coordinates off `axes` form one group; within it ranks are
      // 0..size-1, each once, and member(leader, r) finds the device of rank r.
      std::map<std::vector<int64_t>, std::set<int64_t>> groups;  // off-axes coords -> ranks
      for (int64_t d = 0; d < mesh.num_devices(); ++d) {
        ASSERT_EQ(g.rank(d), brute_rank(mesh, axes, d)) << mesh.to_string() << " device " << d;
        std::vector<int64_t> key = mesh.device_coords(d);
        for (const auto& a : axes) key[mesh.axis_index(a)] = 0;
        const int64_t leader = mesh.device_at(key);
        EXPECT_EQ(g.member(leader, g.rank(d)), d);
        EXPECT_EQ(g.is_leader(d), d == leader);
        EXPECT_TRUE(groups[key].insert(g.rank(d)).second);
        ++checked;
      }
      for (const auto& [key, ranks] : groups) {
        EXPECT_EQ(static_cast<int64_t>(ranks.size()), g.size());
        EXPECT_EQ(*ranks.rbegin(), g.size() - 1);
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(AxesGroup, AxisMaskNamesTheMeshAxes) {
  const Mesh mesh = make_mesh({"data", "fsdp", "tensor"}, {2, 2, 2});
  EXPECT_EQ(AxesGroup(mesh, {"tensor", "data"}).axis_mask(), 0b101u);
  EXPECT_EQ(AxesGroup(mesh, Axes{}).axis_mask(), 0u);
  EXPECT_EQ(AxesGroup(mesh, Axes{}).size(), 1);
}

TEST(AxesGroup, HeaderExample) {
  const Mesh mesh = make_mesh({"data", "fsdp", "tensor"}, {2, 2, 2});
  AxesGroup g(mesh, {"data", "tensor"});
  EXPECT_EQ(g.size(), 4);
  EXPECT_EQ(g.rank(5), 3);  // device 5 = (1, 0, 1)
  EXPECT_EQ(shard_block(mesh, Axes{"fsdp"}, 12, 5).size, 6);
  EXPECT_EQ(shard_block(mesh, Axes{"fsdp"}, 12, 5).offset, 0);
  EXPECT_EQ(shard_block(mesh, Axes{"fsdp"}, 12, 2).offset, 6);
}

// Each device's block of a 2-D array, marked in a global count grid: every element is
// covered by exactly (devices / shards) devices (the replicas), and each device's block is
// the rectangle [offset, offset + local) with local_shape's extents.
void expect_tiles_once(const Mesh& mesh, const PartitionSpec& spec, const Shape& global) {
  SCOPED_TRACE(spec.to_string() + " on " + mesh.to_string());
  ASSERT_TRUE(check_divisible(mesh, spec, global, "test").ok());
  const Shape local = local_shape(mesh, spec, global);
  EXPECT_EQ(local_numel(mesh, spec, global), local.numel());
  int64_t shards = 1;
  for (int i = 0; i < global.rank(); ++i) shards *= axes_size(mesh, spec.dim_or_none(i));
  EXPECT_EQ(local.numel() * shards, global.numel());
  std::vector<int> count(global.numel(), 0);
  for (int64_t d = 0; d < mesh.num_devices(); ++d) {
    const std::vector<int64_t> off = local_offset(mesh, spec, global, d);
    for (int i = 0; i < global.rank(); ++i) {
      const ShardBlock b = shard_block(mesh, spec.dim_or_none(i), global[i], d);
      EXPECT_EQ(b.size, local[i]);
      EXPECT_EQ(b.offset, off[i]);
      EXPECT_EQ(b.offset % b.size, 0);
    }
    for (int64_t r = 0; r < local[0]; ++r)
      for (int64_t c = 0; c < local[1]; ++c) ++count[(off[0] + r) * global[1] + off[1] + c];
  }
  const int64_t replicas = mesh.num_devices() / shards;
  for (int64_t i = 0; i < global.numel(); ++i) ASSERT_EQ(count[i], replicas) << "element " << i;
}

TEST(LocalBlocks, TileTheGlobalArrayExactlyOnce) {
  const Mesh m3 = make_mesh({"data", "fsdp", "tensor"}, {2, 2, 2});
  expect_tiles_once(m3, P({{"data"}, {"tensor"}}), Shape{4, 6});
  expect_tiles_once(m3, P({{"data", "fsdp"}, {"tensor"}}), Shape{8, 6});
  expect_tiles_once(m3, P({{"tensor", "data"}, {}}), Shape{12, 5});
  expect_tiles_once(m3, P({{}, {"fsdp", "tensor", "data"}}), Shape{3, 16});
  expect_tiles_once(m3, P({{"fsdp"}}), Shape{6, 7});  // spec shorter than the rank
  expect_tiles_once(m3, PartitionSpec(), Shape{3, 3});
  const Mesh m4 = make_mesh({"stage", "data", "fsdp", "tensor"}, {2, 3, 1, 2});
  expect_tiles_once(m4, P({{"data", "stage"}, {"fsdp", "tensor"}}), Shape{12, 4});
  expect_tiles_once(m4, P({{"tensor"}, {"data"}}), Shape{2, 9});
}

TEST(LocalBlocks, NamedShardingDelegates) {
  const Mesh mesh = make_mesh({"data", "tensor"}, {2, 4});
  const NamedSharding s{mesh, P({{"tensor", "data"}, {}})};
  const Shape g{16, 3};
  EXPECT_EQ(s.local_shape(g), local_shape(mesh, s.spec, g));
  EXPECT_EQ(s.shards_along(0), 8);
  for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(s.local_offset(g, d), local_offset(mesh, s.spec, g, d));
  // Device 1 = (data 0, tensor 1): rank along (tensor, data) is 1*2 + 0 = 2.
  EXPECT_EQ(s.local_offset(g, 1), (std::vector<int64_t>{4, 0}));
}

TEST(CheckDivisible, NamesTheDimItsSizeTheAxesAndTheirProduct) {
  const Mesh mesh = make_mesh({"data", "fsdp", "tensor"}, {2, 2, 2});
  Status st = check_divisible(mesh, P({{}, {"fsdp", "tensor"}}), Shape{4, 6}, "matmul out");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "matmul out: dimension 1 of size 6 is not divisible by 4 (the product of axes "
            "('fsdp', 'tensor') in spec P(None, ('fsdp', 'tensor')), shape (4, 6))");
  st = check_divisible(mesh, P({{"data"}}), Shape{3, 6}, "x");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "x: dimension 0 of size 3 is not divisible by 2"))
      << st.message();
  EXPECT_TRUE(contains(st.message(), "axes 'data'")) << st.message();
  EXPECT_TRUE(check_divisible(mesh, P({{"data"}, {"fsdp", "tensor"}}), Shape{2, 8}, "x").ok());
  // Absent axes count as size 1 (validate() is what rejects them).
  EXPECT_TRUE(check_divisible(mesh, P({{"nope"}}), Shape{3}, "x").ok());
}

TEST(CheckDivisible, ValidateAndArgumentsUseTheSameMessage) {
  const Mesh mesh = make_mesh({"fsdp"}, {8});
  Status st = NamedSharding{mesh, P({{}, {"fsdp"}})}.validate(Shape{4, 12});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "sharding: dimension 1 of size 12 is not divisible by 8 (the product of axes 'fsdp' "
            "in spec P(None, 'fsdp'), shape (4, 12))");
}

// MaxText's remove_size_one_mesh_axis examples (logical_rules_test's RemoveSizeOne): the
// per-dim helper and the spec form agree, and an absent axis counts as size 1.
TEST(RemoveSizeOne, PerDimHelperMatchesMaxTextExamples) {
  Result<Mesh> mesh = Mesh::from_maxtext({{"fsdp", 4}, {"tensor", 2}}, 8);
  ASSERT_TRUE(mesh.ok()) << mesh.status().message();
  PartitionSpec in = P({{"data", "fsdp"},
                        {"tensor"},
                        {"context"},
                        {"data", "context"},
                        {},
                        {"fsdp", "expert", "tensor"}},
                       {"tensor"});
  PartitionSpec out = remove_size_one_mesh_axis(in, *mesh);
  EXPECT_EQ(out.to_string(),
            "P('fsdp', 'tensor', None, None, None, ('fsdp', 'tensor'), unreduced={'tensor'})");
  for (int i = 0; i < in.rank(); ++i) EXPECT_EQ(remove_size_one_axes(in.dim(i), *mesh), out.dim(i));
  const Mesh small = make_mesh({"data"}, {2});
  EXPECT_EQ(remove_size_one_axes({"data", "fsdp"}, small), (Axes{"data"}));
  EXPECT_EQ(remove_size_one_axes({"fsdp"}, small), Axes{});
  // typeof_string drops the same axes.
  EXPECT_EQ(typeof_string("f32", Shape{8, 4}, &in, &*mesh), "f32[8@fsdp,4@tensor]");
}

TEST(DimAxesString, JaxForms) {
  EXPECT_EQ(dim_axes_string({}), "None");
  EXPECT_EQ(dim_axes_string({"fsdp"}), "'fsdp'");
  EXPECT_EQ(dim_axes_string({"data", "tensor"}), "('data', 'tensor')");
}

}  // namespace
}  // namespace eng
