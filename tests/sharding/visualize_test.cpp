// tests/sharding/visualize_test.cpp: device grids (golden strings, 80-column limit) and the audit.
#include "engine/sharding/visualize.h"

#include <gtest/gtest.h>

#include <sstream>

#include "tests/common/mesh_helpers.h"

namespace eng {
namespace {

using eng::testing::make_mesh;

// Shorthand as JAX writes it: P({{"x"}, {}}), P({{"x"}}, {"partial_axis"}).
PartitionSpec P(std::initializer_list<PartitionSpec::DimAxes> dims,
                std::vector<std::string> partial = {}) {
  return PartitionSpec(std::vector<PartitionSpec::DimAxes>(dims), std::move(partial));
}

std::string draw(const Shape& shape, const NamedSharding& s, int dim0 = -1, int dim1 = -1) {
  Result<std::string> g = visualize_sharding(shape, s, dim0, dim1);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? *g : "";
}

// Display columns of a UTF-8 line (box-drawing characters are one column each).
int columns(const std::string& line) {
  int n = 0;
  for (unsigned char c : line) n += (c & 0xC0) != 0x80;
  return n;
}

int widest_line(const std::string& text) {
  std::istringstream in(text);
  int w = 0;
  for (std::string line; std::getline(in, line);) w = std::max(w, columns(line));
  return w;
}

TEST(Visualize, TwoByTwoGrid) {
  NamedSharding s{make_mesh({"x", "y"}, {2, 2}), P({{"x"}, {"y"}})};
  EXPECT_EQ(draw(Shape{8, 8}, s),
            "┌─────────┬─────────┐\n"
            "│         │         │\n"
            "│  CPU 0  │  CPU 1  │\n"
            "│         │         │\n"
            "├─────────┼─────────┤\n"
            "│         │         │\n"
            "│  CPU 2  │  CPU 3  │\n"
            "│         │         │\n"
            "└─────────┴─────────┘\n");
}

TEST(Visualize, Replicated) {
  NamedSharding s{make_mesh({"x", "y"}, {2, 2}), PartitionSpec()};
  EXPECT_EQ(draw(Shape{8, 8}, s),
            "┌─────────────┐\n"
            "│             │\n"
            "│ CPU 0,1,2,3 │\n"
            "│             │\n"
            "└─────────────┘\n");
}

TEST(Visualize, RowsShardedReplicasShareCells) {
  // Rows over x; y holds replicas: each cell lists both devices of its row block.
  NamedSharding s{make_mesh({"x", "y"}, {2, 2}), P({{"x"}, {}})};
  EXPECT_EQ(draw(Shape{8, 8}, s),
            "┌─────────┐\n"
            "│         │\n"
            "│ CPU 0,1 │\n"
            "│         │\n"
            "├─────────┤\n"
            "│         │\n"
            "│ CPU 2,3 │\n"
            "│         │\n"
            "└─────────┘\n");
}

TEST(Visualize, OneDimensional) {
  NamedSharding s{make_mesh({"fsdp"}, {4}), P({{"fsdp"}})};
  EXPECT_EQ(draw(Shape{16}, s),
            "┌─────────┬─────────┬─────────┬─────────┐\n"
            "│  CPU 0  │  CPU 1  │  CPU 2  │  CPU 3  │\n"
            "└─────────┴─────────┴─────────┴─────────┘\n");
}

TEST(Visualize, RankThreeSaysWhichDims) {
  NamedSharding s{make_mesh({"data", "tensor"}, {2, 2}), P({{"data"}, {}, {"tensor"}})};
  std::string g = draw(Shape{4, 6, 8}, s);
  EXPECT_EQ(g.substr(0, g.find('\n')), "showing dims 0 (down) and 2 (across) of shape (4, 6, 8)");
  EXPECT_NE(g.find("│  CPU 3  │"), std::string::npos) << g;

  // Only dim 1 sharded: it is shown with the last dim.
  NamedSharding t{make_mesh({"fsdp"}, {2}), P({{}, {"fsdp"}, {}})};
  std::string h = draw(Shape{4, 6, 8}, t);
  EXPECT_EQ(h.substr(0, h.find('\n')), "showing dims 1 (down) and 2 (across) of shape (4, 6, 8)");

  // Three sharded dims: the third is named and its blocks merge into the cells.
  NamedSharding u{make_mesh({"a", "b", "c"}, {2, 2, 2}), P({{"a"}, {"b"}, {"c"}})};
  std::string k = draw(Shape{2, 2, 2}, u);
  EXPECT_NE(k.find("dim 2 is sharded too (2 ways)"), std::string::npos) << k;
  EXPECT_NE(k.find("CPU 0,1"), std::string::npos) << k;
}

TEST(Visualize, ExplicitDims) {
  NamedSharding s{make_mesh({"x", "y"}, {2, 2}), P({{"x"}, {"y"}})};
  std::string g = draw(Shape{8, 8}, s, 1, 0);  // transposed view
  EXPECT_EQ(g.substr(0, g.find('\n')), "showing dims 1 (down) and 0 (across) of shape (8, 8)");
  EXPECT_NE(g.find("│  CPU 0  │  CPU 2  │"), std::string::npos) << g;
  std::string one = draw(Shape{8, 8}, s, 1);
  EXPECT_EQ(one.substr(0, one.find('\n')), "showing dim 1 of shape (8, 8)");
  EXPECT_NE(one.find("│ CPU 0,2 │ CPU 1,3 │"), std::string::npos) << one;
}

TEST(Visualize, FitsEightyColumns) {
  NamedSharding eight{make_mesh({"fsdp"}, {8}), P({{"fsdp"}})};
  std::string g = draw(Shape{64}, eight);
  EXPECT_LE(widest_line(g), 80) << g;
  EXPECT_NE(g.find("CPU 7"), std::string::npos) << g;

  NamedSharding many{make_mesh({"fsdp"}, {64}), P({{"fsdp"}})};
  std::string h = draw(Shape{128}, many);
  EXPECT_LE(widest_line(h), 80) << h;
  EXPECT_NE(h.find("showing the first 13 of 64 blocks along dim 0"), std::string::npos) << h;

  // Long replica lists wrap inside the cell instead of widening it.
  NamedSharding wide{make_mesh({"x", "y"}, {8, 16}), P({{}, {"x"}})};
  std::string w = draw(Shape{4, 8}, wide);
  EXPECT_LE(widest_line(w), 80) << w;
  EXPECT_NE(w.find("CPU"), std::string::npos) << w;
}

TEST(Visualize, ColorKeepsLayout) {
  NamedSharding s{make_mesh({"x", "y"}, {2, 2}), P({{"x"}, {"y"}})};
  Result<std::string> g = visualize_sharding(Shape{8, 8}, s, -1, -1, /*color=*/true);
  ASSERT_TRUE(g.ok());
  EXPECT_NE(g->find("\x1b[48;2;57;59;121m"), std::string::npos);  // tab20b's first colour
  EXPECT_NE(g->find("CPU 3"), std::string::npos);
}

TEST(Visualize, Errors) {
  NamedSharding s{make_mesh({"x", "y"}, {2, 2}), P({{"x"}, {"y"}})};
  Result<std::string> bad = visualize_sharding(Shape{7, 8}, s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dimension 0 of size 7"), std::string::npos);
  EXPECT_FALSE(visualize_sharding(Shape{8, 8}, s, 2, 0).ok());
  EXPECT_FALSE(visualize_sharding(Shape{8, 8}, s, 1, 1).ok());
  EXPECT_FALSE(visualize_sharding(Shape{8, 8}, s, -1, 1).ok());
}

// MaxText's assert_params_sufficiently_sharded on mesh fsdp=4, tensor=2.
TEST(Audit, FlagsParamsNotShardedOnEveryTargetAxis) {
  Result<Mesh> m = Mesh::from_maxtext({{"fsdp", 4}, {"tensor", 2}}, 8);
  ASSERT_TRUE(m.ok());
  std::vector<ParamShardingInfo> params = {
      {"decoder/mlp/wi_0", Shape{256, 704}, P({{"fsdp"}, {"tensor"}})},
      {"decoder/norm", Shape{256}, P({{"tensor"}})},
      {"decoder/bias", Shape{512}, P({{}})},
      // Size-1 axes kept (Linen state) do not matter.
      {"token_embedder", Shape{256, 256}, P({{"tensor", "tensor_sequence"}, {"fsdp", "context"}})},
  };
  ReplicationReport r = audit_replicated(params, *m, 0.02);
  EXPECT_EQ(r.target_axes, (std::vector<std::string>{"fsdp", "tensor"}));
  EXPECT_EQ(r.total_elements, 256 * 704 + 256 + 512 + 256 * 256);
  EXPECT_EQ(r.unsharded_elements, 256 + 512);
  ASSERT_EQ(r.offenders.size(), 2u);
  EXPECT_EQ(r.offenders[0].path, "decoder/bias");  // largest first
  EXPECT_EQ(r.offenders[0].unsharded_axes, (std::vector<std::string>{"fsdp", "tensor"}));
  EXPECT_EQ(r.offenders[1].unsharded_axes, (std::vector<std::string>{"fsdp"}));
  EXPECT_FALSE(r.exceeds);
  EXPECT_DOUBLE_EQ(r.maxtext_fraction, r.fraction / 4);

  ReplicationReport tight = audit_replicated(params, *m, 0.001);
  EXPECT_TRUE(tight.exceeds);
  std::string text = tight.to_string();
  EXPECT_NE(text.find("Unsharded parameter percentage (0.31%) exceeds tolerance (0.10%)."),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(" - Name: decoder/bias (Size: 512, Shape: (512,), Spec: P(None)) is "
                      "unsharded on axis: ['fsdp', 'tensor']"),
            std::string::npos)
      << text;
}

TEST(Audit, TopFiveAndTrivialMesh) {
  Result<Mesh> m = Mesh::from_maxtext({}, 4);
  ASSERT_TRUE(m.ok());
  std::vector<ParamShardingInfo> params;
  for (int i = 1; i <= 7; ++i)
    params.push_back({fmt::format("p{}", i), Shape{i * 10}, PartitionSpec()});
  ReplicationReport r = audit_replicated(params, *m);
  EXPECT_TRUE(r.exceeds);
  EXPECT_DOUBLE_EQ(r.fraction, 1.0);
  std::string text = r.to_string();
  EXPECT_NE(text.find("p7"), std::string::npos);
  EXPECT_NE(text.find("p3"), std::string::npos);
  EXPECT_EQ(text.find("p2 "), std::string::npos) << text;  // only the 5 largest

  Result<Mesh> one = Mesh::from_maxtext({}, 1);
  ASSERT_TRUE(one.ok());
  ReplicationReport none = audit_replicated(params, *one);
  EXPECT_TRUE(none.target_axes.empty());
  EXPECT_FALSE(none.exceeds);
}

}  // namespace
}  // namespace eng
