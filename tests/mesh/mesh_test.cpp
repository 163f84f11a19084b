// tests/mesh/mesh_test.cpp: Mesh construction, MaxText's -1 fill, row-major coords, JAX's printed
// forms.
#include "engine/mesh/mesh.h"

#include <gtest/gtest.h>

#include "tests/common/mesh_helpers.h"

namespace eng {
namespace {

using eng::testing::make_mesh;
using eng::testing::contains;



TEST(MeshAxes, MaxTextOrder) {
  const std::vector<std::string> want = {"diloco",
                                         "data",
                                         "stage",
                                         "fsdp",
                                         "fsdp_transpose",
                                         "context",
                                         "context_usp_ulysses",
                                         "context_autoregressive",
                                         "tensor",
                                         "tensor_sequence",
                                         "expert",
                                         "autoregressive"};
  EXPECT_EQ(maxtext_mesh_axes(), want);
}

TEST(MeshPrint, StrMatchesJax) {
  EXPECT_EQ(make_mesh({"data", "fsdp"}, {2, 4}).to_string(),
            "Mesh('data': 2, 'fsdp': 4, axis_types=(Auto, Auto))");
  EXPECT_EQ(make_mesh({"X", "Y"}, {4, 2}, AxisType::kExplicit).to_string(),
            "Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit))");
  // One axis: Python prints a 1-tuple with a trailing comma.
  EXPECT_EQ(make_mesh({"fsdp"}, {4}).to_string(), "Mesh('fsdp': 4, axis_types=(Auto,))");
  EXPECT_EQ(Mesh().to_string(), "Mesh()");
}

TEST(MeshPrint, ReprMatchesJax) {
  EXPECT_EQ(make_mesh({"X", "Y"}, {4, 2}, AxisType::kExplicit).repr(),
            "Mesh(axis_sizes=(4, 2), axis_names=('X', 'Y'), axis_types=(Explicit, Explicit))");
  EXPECT_EQ(make_mesh({"fsdp"}, {4}).repr(),
            "Mesh(axis_sizes=(4,), axis_names=('fsdp',), axis_types=(Auto,))");
  EXPECT_EQ(Mesh().repr(), "Mesh(axis_sizes=(), axis_names=())");
}

TEST(MeshPrint, NontrivialAxes) {
  Result<Mesh> m = Mesh::from_maxtext({{"tensor", 2}}, 8);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->nontrivial_axes_string(), "fsdp: 4, tensor: 2");
}

TEST(MeshCoords, RowMajorFirstAxisMostMajor) {
  Mesh m = make_mesh({"a", "b", "c"}, {2, 3, 2});
  EXPECT_EQ(m.num_devices(), 12);
  EXPECT_EQ(m.device_coords(0), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(m.device_coords(1), (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(m.device_coords(2), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(m.device_coords(6), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(m.device_coords(11), (std::vector<int64_t>{1, 2, 1}));
  for (int64_t d = 0; d < m.num_devices(); ++d) EXPECT_EQ(m.device_at(m.device_coords(d)), d);
}

TEST(MeshCoords, AxisLookup) {
  Mesh m = make_mesh({"data", "fsdp"}, {2, 4});
  EXPECT_EQ(m.axis_index("fsdp"), 1);
  EXPECT_EQ(m.axis_index("tensor"), -1);
  EXPECT_EQ(m.axis_size("fsdp"), 4);
  EXPECT_EQ(m.axis_size("tensor"), 1);  // absent counts as size 1, as mesh.shape.get(a, 1)
}

TEST(MeshCreate, RejectsBadInput) {
  Result<Mesh> dup = Mesh::create({"data", "data"}, {2, 2});
  ASSERT_FALSE(dup.ok());
  EXPECT_TRUE(contains(dup.status().message(), "'data' appears more than once"));
  Result<Mesh> zero = Mesh::create({"data"}, {0});
  ASSERT_FALSE(zero.ok());
  EXPECT_TRUE(contains(zero.status().message(), "size 0"));
  EXPECT_FALSE(Mesh::create({""}, {2}).ok());
  Result<Mesh> count = Mesh::create({"a", "b"}, {2});
  ASSERT_FALSE(count.ok());
  EXPECT_TRUE(contains(count.status().message(), "2 axis names but 1 sizes"));
  // A device count that does not fit in int64 is an error, not a wrapped (or zero) product.
  Result<Mesh> huge = Mesh::create({"data", "fsdp"}, {int64_t{1} << 40, int64_t{1} << 40});
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().message(), "mesh: the product of the axis sizes overflows at 'fsdp' (size 1099511627776)");
  Result<Mesh> fill = Mesh::from_parallelism({"data", "fsdp", "tensor"},
                                             {int64_t{1} << 40, -1, int64_t{1} << 40}, 8);
  ASSERT_FALSE(fill.ok());
  EXPECT_TRUE(contains(fill.status().message(), "overflows at 'tensor'")) << fill.status().message();
}

TEST(MeshParallelism, FillsMinusOne) {
  Result<Mesh> m = Mesh::from_parallelism({"data", "fsdp", "tensor"}, {2, -1, 2}, 16);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->axis_sizes(), (std::vector<int64_t>{2, 4, 2}));
}

TEST(MeshParallelism, ProductMismatchNamesBothNumbers) {
  Result<Mesh> m = Mesh::from_parallelism({"data", "fsdp"}, {2, 4}, 7);
  ASSERT_FALSE(m.ok());
  const std::string& msg = m.status().message();
  EXPECT_TRUE(contains(msg, "Number of devices per slice 7")) << msg;
  EXPECT_TRUE(contains(msg, "ICI parallelism 8")) << msg;
  EXPECT_TRUE(contains(msg, "data=2, fsdp=4")) << msg;
}

TEST(MeshParallelism, FillNotDivisible) {
  Result<Mesh> m = Mesh::from_parallelism({"data", "fsdp"}, {3, -1}, 8);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.status().message(), "8 devices are not divisible by 3"))
      << m.status().message();
}

TEST(MeshParallelism, TwoMinusOnes) {
  Result<Mesh> m = Mesh::from_parallelism({"data", "fsdp"}, {-1, -1}, 8);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.status().message(), "'data' and 'fsdp'")) << m.status().message();
}

TEST(MeshMaxText, DefaultIsAllFsdp) {
  Result<Mesh> m = Mesh::from_maxtext({}, 8);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->axis_names(), maxtext_mesh_axes());
  EXPECT_EQ(m->axis_size("fsdp"), 8);
  EXPECT_EQ(m->num_devices(), 8);
  for (const auto& a : maxtext_mesh_axes()) {
    if (a == "fsdp") continue;
    EXPECT_EQ(m->axis_size(a), 1) << a;
  }
}

TEST(MeshMaxText, ExplicitSizesAndErrors) {
  Result<Mesh> m = Mesh::from_maxtext({{"data", 2}, {"tensor", 2}}, 8, AxisType::kExplicit);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->axis_size("data"), 2);
  EXPECT_EQ(m->axis_size("fsdp"), 2);
  EXPECT_EQ(m->axis_size("tensor"), 2);
  EXPECT_TRUE(m->all_axes(AxisType::kExplicit));

  Result<Mesh> bad = Mesh::from_maxtext({{"model", 2}}, 8);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.status().message(), "unknown MaxText mesh axis 'model'"));
  // data=-1 alongside the default fsdp=-1 is two -1s, as in MaxText.
  EXPECT_FALSE(Mesh::from_maxtext({{"data", -1}}, 8).ok());
  EXPECT_TRUE(Mesh::from_maxtext({{"data", -1}, {"fsdp", 1}}, 8).ok());
}

TEST(MeshValue, EqualityAndHash) {
  Mesh a = make_mesh({"data", "fsdp"}, {2, 4});
  Mesh b = make_mesh({"data", "fsdp"}, {2, 4});
  Mesh c = make_mesh({"data", "fsdp"}, {4, 2});
  Mesh d = make_mesh({"data", "fsdp"}, {2, 4}, AxisType::kExplicit);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_NE(a, c);
  EXPECT_NE(a.hash(), c.hash());
  EXPECT_NE(a, d);
  EXPECT_NE(a.hash(), d.hash());
}

}  // namespace
}  // namespace eng
