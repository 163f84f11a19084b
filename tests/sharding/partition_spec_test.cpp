// tests/sharding/partition_spec_test.cpp: printed forms, validation messages, local shapes/offsets.
#include "engine/sharding/partition_spec.h"

#include <gtest/gtest.h>

#include "tests/common/mesh_helpers.h"

namespace eng {
namespace {

using eng::testing::make_mesh;
using eng::testing::contains;

// Shorthand as JAX writes it: P({{"x"}, {}}), P({{"x"}}, {"partial_axis"}).
PartitionSpec P(std::initializer_list<PartitionSpec::DimAxes> dims,
                std::vector<std::string> partial = {}) {
  return PartitionSpec(std::vector<PartitionSpec::DimAxes>(dims), std::move(partial));
}



TEST(PartitionSpecPrint, JaxForms) {
  EXPECT_EQ(PartitionSpec().to_string(), "P()");
  EXPECT_EQ(P({{"fsdp"}, {}}).to_string(), "P('fsdp', None)");
  EXPECT_EQ(P({{"fsdp"}, {}, {"data", "tensor"}}).to_string(),
            "P('fsdp', None, ('data', 'tensor'))");
  EXPECT_EQ(P({{"fsdp"}}, {"data"}).to_string(), "P('fsdp', unreduced={'data'})");
}

TEST(PartitionSpecValue, BraceConstruction) {
  // Nested braces pick the initializer-list constructor: one entry per dim.
  EXPECT_EQ(PartitionSpec({{"data"}, {"tensor"}}).to_string(), "P('data', 'tensor')");
  EXPECT_EQ(PartitionSpec({{"data", "tensor"}}).to_string(), "P(('data', 'tensor'))");
  EXPECT_EQ(PartitionSpec({{"fsdp"}, {}, {"data", "tensor"}}).to_string(),
            "P('fsdp', None, ('data', 'tensor'))");
  EXPECT_EQ(PartitionSpec({{}}).to_string(), "P(None)");
  PartitionSpec p = {{"fsdp"}, {}};
  EXPECT_EQ(p.rank(), 2);
  std::vector<PartitionSpec::DimAxes> dims = {{"x"}};
  EXPECT_EQ(PartitionSpec(dims, {"y"}).to_string(), "P('x', unreduced={'y'})");
}

TEST(PartitionSpecValue, EqualityHashReplicated) {
  PartitionSpec a = P({{"fsdp"}, {}});
  PartitionSpec b = P({{"fsdp"}, {}});
  PartitionSpec c = P({{}, {"fsdp"}});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_NE(a, c);
  EXPECT_NE(a.hash(), c.hash());
  EXPECT_TRUE(PartitionSpec::replicated(3).is_replicated());
  EXPECT_FALSE(a.is_replicated());
  EXPECT_FALSE(P({{}}, {"data"}).is_replicated());
  EXPECT_TRUE(a.dim_or_none(5).empty());
}

TEST(NamedShardingPrint, JaxForm) {
  NamedSharding s{make_mesh({"fsdp"}, {4}), P({{"fsdp"}, {}})};
  EXPECT_EQ(s.to_string(),
            "NamedSharding(mesh=Mesh('fsdp': 4, axis_types=(Auto,)), spec=P('fsdp', None))");
}

TEST(TypeofPrint, JaxTypeofForm) {
  Mesh m = make_mesh({"data", "fsdp", "tensor", "context"}, {2, 4, 2, 1});
  PartitionSpec w = P({{"fsdp"}, {"tensor"}});
  EXPECT_EQ(typeof_string("f32", Shape{256, 768}, &w, &m), "f32[256@fsdp,768@tensor]");
  PartitionSpec batch = P({{"data", "fsdp"}, {}});
  EXPECT_EQ(typeof_string("i32", Shape{16, 256}, &batch, &m), "i32[16@(data,fsdp),256]");
  // A size-1 axis shards nothing and is not printed.
  PartitionSpec ctx = P({{"data", "context"}, {"context"}});
  EXPECT_EQ(typeof_string("bf16", Shape{16, 256}, &ctx, &m), "bf16[16@data,256]");
  EXPECT_EQ(typeof_string("f32", Shape{8, 4}, nullptr, nullptr), "f32[8,4]");
}

TEST(NamedShardingValidate, AcceptsGoodSpecs) {
  Mesh m = make_mesh({"data", "fsdp"}, {2, 4});
  EXPECT_TRUE((NamedSharding{m, P({{"data", "fsdp"}, {}})}.validate(Shape{16, 3}).ok()));
  EXPECT_TRUE((NamedSharding{m, P({{"fsdp"}})}.validate(Shape{8, 3, 5}).ok()));
  EXPECT_TRUE((NamedSharding{m, PartitionSpec()}.validate(Shape{})).ok());
}

TEST(NamedShardingValidate, UnknownAxis) {
  Mesh m = make_mesh({"data", "fsdp"}, {2, 4});
  Status st = NamedSharding{m, P({{"tensor"}, {}})}.validate(Shape{8, 8});
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "axis 'tensor' (dimension 0)")) << st.message();
  EXPECT_TRUE(contains(st.message(), "Mesh('data': 2, 'fsdp': 4")) << st.message();
}

TEST(NamedShardingValidate, AxisUsedTwice) {
  Mesh m = make_mesh({"data", "fsdp"}, {2, 4});
  Status st = NamedSharding{m, P({{"fsdp"}, {"data", "fsdp"}})}.validate(Shape{8, 8});
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "'fsdp' twice: in dimension 0 and in dimension 1"))
      << st.message();
  Status partial = NamedSharding{m, P({{"data"}}, {"data"})}.validate(Shape{8});
  ASSERT_FALSE(partial.ok());
  EXPECT_TRUE(contains(partial.message(), "in dimension 0 and in partial")) << partial.message();
}

TEST(NamedShardingValidate, IndivisibleDimension) {
  Mesh m = make_mesh({"data", "fsdp"}, {2, 4});
  Status st = NamedSharding{m, P({{}, {"data", "fsdp"}})}.validate(Shape{8, 12});
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "dimension 1 of size 12 is not divisible by 8"))
      << st.message();
  EXPECT_TRUE(contains(st.message(), "('data', 'fsdp')")) << st.message();
}

TEST(NamedShardingValidate, SpecLongerThanRank) {
  Mesh m = make_mesh({"data", "fsdp"}, {2, 4});
  Status st = NamedSharding{m, P({{"fsdp"}, {}, {}})}.validate(Shape{8, 8});
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "has 3 entries but the array has rank 2 (shape (8, 8))"))
      << st.message();
}

TEST(NamedShardingLocal, EveryDeviceOfTwoByTwo) {
  Mesh m = make_mesh({"x", "y"}, {2, 2});
  Shape global{4, 6};
  NamedSharding s{m, P({{"x"}, {"y"}})};
  ASSERT_TRUE(s.validate(global).ok());
  EXPECT_EQ(s.local_shape(global), (Shape{2, 3}));
  // Device d sits at (d / 2, d % 2): row-major over (x, y).
  EXPECT_EQ(s.local_offset(global, 0), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(s.local_offset(global, 1), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(s.local_offset(global, 2), (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(s.local_offset(global, 3), (std::vector<int64_t>{2, 3}));

  NamedSharding t{m, P({{"y"}, {"x"}})};  // transposed assignment
  EXPECT_EQ(t.local_offset(global, 1), (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(t.local_offset(global, 2), (std::vector<int64_t>{0, 3}));

  NamedSharding both{m, P({{"x", "y"}, {}})};  // x major, y minor
  EXPECT_EQ(both.shards_along(0), 4);
  EXPECT_EQ(both.local_shape(Shape{8, 6}), (Shape{2, 6}));
  for (int64_t d = 0; d < 4; ++d)
    EXPECT_EQ(both.local_offset(Shape{8, 6}, d), (std::vector<int64_t>{2 * d, 0}));
  NamedSharding minor_first{m, P({{"y", "x"}, {}})};
  EXPECT_EQ(minor_first.local_offset(Shape{8, 6}, 1), (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(minor_first.local_offset(Shape{8, 6}, 2), (std::vector<int64_t>{2, 0}));

  NamedSharding rep{m, PartitionSpec()};
  EXPECT_EQ(rep.local_shape(global), global);
  for (int64_t d = 0; d < 4; ++d)
    EXPECT_EQ(rep.local_offset(global, d), (std::vector<int64_t>{0, 0}));
}

}  // namespace
}  // namespace eng
