// tests/mesh/physical_mesh_test.cpp: mesh axes laid on torus dims as jax's create_device_mesh
// lays them, and the collective model against the scaling book's closed forms.
#include "engine/mesh/physical_mesh.h"

#include <gtest/gtest.h>

#include "tests/common/mesh_helpers.h"

namespace eng {
namespace {

using eng::testing::contains;

Topology topo(std::string_view name, int64_t slices = 1) {
  Result<Topology> t = topology_from_name(name, slices);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

PhysicalMesh lay(std::string_view name, std::vector<int64_t> ici, std::vector<int64_t> dcn,
                 int64_t slices = 1) {
  Result<PhysicalMesh> pm = lay_out_mesh(topo(name, slices), maxtext_mesh_axes(), ici, dcn);
  EXPECT_TRUE(pm.ok()) << pm.status().message();
  return std::move(pm).value();
}

// MaxText's 12 axes: diloco data stage fsdp fsdp_transpose context context_usp_ulysses
// context_autoregressive tensor tensor_sequence expert autoregressive.
std::vector<int64_t> sizes(int64_t fsdp, int64_t tensor = 1, int64_t data = 1) {
  return {1, data, 1, fsdp, 1, 1, 1, 1, tensor, 1, 1, 1};
}

TEST(PhysicalMesh, FsdpTakesTheWholeTorus) {
  PhysicalMesh pm = lay("v6e-256", sizes(-1), sizes(1));
  const AxisPlacement* f = pm.axis("fsdp");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->ici_size, 256);
  EXPECT_EQ(f->dims, (std::vector<int>{0, 1}));
  EXPECT_EQ(f->to_string(), "fsdp: 256 over x,y (16x16, ring)");
  EXPECT_EQ(pm.axis("tensor")->to_string(), "tensor: 1");
  EXPECT_DOUBLE_EQ(f->ici_bytes_per_s, 4 * 9e10);  // two rings, two neighbours each
}

TEST(PhysicalMesh, LaterAxesAreLaidFirst) {
  // v5p-128 is 4x4x4: tensor (later in MaxText's order) takes x, fsdp the y,z plane.
  PhysicalMesh pm = lay("v5p-128", sizes(-1, 4), sizes(1));
  EXPECT_EQ(pm.axis("tensor")->dims, (std::vector<int>{0}));
  EXPECT_EQ(pm.axis("fsdp")->dims, (std::vector<int>{1, 2}));
  EXPECT_EQ(pm.mesh.axis_size("fsdp"), 16);
}

TEST(PhysicalMesh, DcnAxesMultiplyOverSlices) {
  PhysicalMesh pm = lay("v5p-256", sizes(-1), sizes(1, 1, -1), 2);
  EXPECT_EQ(pm.mesh.num_devices(), 256);
  EXPECT_EQ(pm.mesh.axis_size("data"), 2);
  EXPECT_EQ(pm.mesh.axis_size("fsdp"), 128);
  EXPECT_EQ(pm.axis("data")->to_string(), "data: 2 over 2 slices over DCN");
  EXPECT_DOUBLE_EQ(pm.axis("data")->dcn_bytes_per_s, 6.25e9);
}

TEST(PhysicalMesh, SmallSlicesAreLines) {
  PhysicalMesh pm = lay("v5p-64", sizes(-1), sizes(1));  // 2x4x4, no wraparound
  EXPECT_EQ(pm.axis("fsdp")->to_string(), "fsdp: 32 over x,y,z (2x4x4, line)");
}

TEST(PhysicalMesh, Errors) {
  Result<PhysicalMesh> bad = lay_out_mesh(topo("v6e-256"), maxtext_mesh_axes(), sizes(128),
                                          sizes(1));
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.status().message(),
                       "Number of devices per slice 256 does not match the product of the ICI "
                       "parallelism 128"))
      << bad.status().message();
  EXPECT_TRUE(contains(bad.status().message(), "v6e-256"));
  Result<PhysicalMesh> split = lay_out_mesh(topo("v6e-256"), maxtext_mesh_axes(), sizes(-1, 32),
                                            sizes(1));
  ASSERT_FALSE(split.ok());
  EXPECT_TRUE(contains(split.status().message(), "cannot lay axis 'tensor' of size 32"))
      << split.status().message();
  Result<PhysicalMesh> slices = lay_out_mesh(topo("v5p-8", 2), maxtext_mesh_axes(), sizes(-1),
                                             sizes(4));
  ASSERT_FALSE(slices.ok());
  EXPECT_TRUE(contains(slices.status().message(), "Number of slices 2 does not match"))
      << slices.status().message();
}

// The scaling book's closed forms (hardware.md section 3): V bytes gathered over N chips,
// W = 2 x one-way link bandwidth per ring dim (bidirectional), a line half that.
TEST(CollectiveModel, RingLineAndTwoDimsMatchClosedForms) {
  const double b = 9e10;  // v5p one-way per link
  const double V = 1e9;
  // A ring: v5p-128's x dim (4, wraps).
  PhysicalMesh ring = lay("v5p-128", sizes(-1, 4), sizes(1));
  CollectiveGroup g = group_of(ring, {"tensor"});
  const double N = 4, lat_ring = 2 * kHopLatencySeconds;  // N/2 hops
  const double ag = V / (2 * b) * (N - 1) / N;
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllGather, V / N, g), ag + lat_ring, 1e-12);
  EXPECT_NEAR(collective_seconds(CollectiveKind::kReduceScatter, V / N, g), ag + lat_ring, 1e-12);
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllReduce, V, g), 2 * (ag + lat_ring), 1e-12);
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllToAll, V / N, g), ag / 4 + lat_ring, 1e-12);
  // A line: v5p-64 (2x4x4, no wraparound); tensor 2 takes x (size 2): half the bandwidth.
  PhysicalMesh line = lay("v5p-64", sizes(-1, 2), sizes(1));
  ASSERT_EQ(line.axis("tensor")->dims, (std::vector<int>{0}));
  CollectiveGroup gl = group_of(line, {"tensor"});
  const double N2 = 2, ag_line = V / b * (N2 - 1) / N2;
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllGather, V / N2, gl),
              ag_line + kHopLatencySeconds, 1e-12);
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllReduce, V, gl),
              2 * (ag_line + kHopLatencySeconds), 1e-12);
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllToAll, V / N2, gl),
              ag_line / 4 + kHopLatencySeconds, 1e-12);
  // One axis over two torus dims (fsdp 16 over y,z of 4x4x4): both dims' links.
  CollectiveGroup g2 = group_of(ring, {"fsdp"});
  const double N16 = 16, ag2 = V / (4 * b) * (N16 - 1) / N16;
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllGather, V / N16, g2),
              ag2 + 4 * kHopLatencySeconds, 1e-12);
  EXPECT_NEAR(collective_seconds(CollectiveKind::kReduceScatter, V / N16, g2),
              ag2 + 4 * kHopLatencySeconds, 1e-12);
}

TEST(CollectiveModel, DcnIsHierarchical) {
  PhysicalMesh pm = lay("v5p-8", sizes(-1), sizes(1, 1, -1), 2);  // data over 2 slices
  CollectiveGroup g = group_of(pm, {"data", "fsdp"});
  EXPECT_EQ(g.size(), 8);
  const double s = 1e6;
  // DCN part first: (2-1) x s at 6.25e9; then ICI 4 over a 2x2 line: 3 x 2s at 2 x 9e10.
  const double want = s / 6.25e9 + 3 * 2 * s / (2 * 9e10) + 2 * kHopLatencySeconds;
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllGather, s, g), want, 1e-12);
}

}  // namespace
}  // namespace eng
