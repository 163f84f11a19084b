// tests/mesh/topology_test.cpp: MaxText's compile_topology names -> chips, devices, torus,
// wraparound and per-device constants; bad names and missing constants are errors.
#include "engine/mesh/topology.h"

#include <gtest/gtest.h>

#include "tests/common/mesh_helpers.h"

namespace eng {
namespace {

using eng::testing::contains;

Topology must(std::string_view name, int64_t slices = 1) {
  Result<Topology> t = topology_from_name(name, slices);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

TEST(Topology, V5pCountsTensorCores) {
  Topology t = must("v5p-256", 2);
  EXPECT_EQ(t.family, "v5p");
  EXPECT_EQ(t.chips_per_slice, 128);
  EXPECT_EQ(t.devices_per_slice, 128);  // megacore: one device per chip
  EXPECT_EQ(t.num_devices(), 256);
  EXPECT_EQ(t.torus, (std::vector<int64_t>{4, 4, 8}));
  EXPECT_EQ(t.wrap, (std::vector<bool>{true, true, true}));
  EXPECT_DOUBLE_EQ(t.peak_flops_per_device(), 4.59e14);
  EXPECT_EQ(t.hbm_bytes_per_device(), int64_t{95} << 30);
  EXPECT_EQ(must("v5p-1024").torus, (std::vector<int64_t>{8, 8, 8}));
  // Below a full 4x4x4 cube a 3D slice has no wraparound.
  Topology small = must("v5p-64");
  EXPECT_EQ(small.torus, (std::vector<int64_t>{2, 4, 4}));
  EXPECT_EQ(small.wrap, (std::vector<bool>{false, false, false}));
}

// The matrix unit's sustained rate: the chip's public sustained-matmul measurement (8192^3
// bf16: v5e 181.823 TFLOP/s, v6e 727.699, tpu7x 1081.296 per device), or the peak where none
// is known (v5p, GPUs).
TEST(Topology, MatrixUnitRunsAtItsMeasuredSustainedRate) {
  EXPECT_NEAR(must("v6e-256").mxu_flops_per_device(), 727.699e12, 1);
  EXPECT_NEAR(must("v6e-8").chip.mxu_sustained_fraction, 0.7927, 1e-4);
  EXPECT_NEAR(must("v5e-16").mxu_flops_per_device(), 181.823e12, 1);
  EXPECT_DOUBLE_EQ(must("v5p-1024").chip.mxu_sustained_fraction, 0);
  EXPECT_DOUBLE_EQ(must("v5p-1024").mxu_flops_per_device(), 4.59e14);
  // tpu7x: the fraction is of one device's peak (half the chip's), not of the chip's.
  EXPECT_NEAR(must("tpu7x-128").mxu_flops_per_device(), 1081.296e12, 1);
  EXPECT_NEAR(must("tpu7x-8").chip.mxu_sustained_fraction, 0.9374, 1e-4);
  EXPECT_DOUBLE_EQ(must("a3").mxu_flops_per_device(), 9.89e14);
}

TEST(Topology, V6eWrapsOnlyDimsOfSixteen) {
  Topology t = must("v6e-256");
  EXPECT_EQ(t.devices_per_slice, 256);
  EXPECT_EQ(t.torus, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(t.wrap, (std::vector<bool>{true, true}));
  EXPECT_EQ(must("v6e-128").wrap, (std::vector<bool>{false, true}));
  EXPECT_EQ(must("v6e-8").wrap, (std::vector<bool>{false, false}));
  EXPECT_EQ(must("v6e-8").torus, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(t.chip.matrix_unit_dim, 256);
  EXPECT_DOUBLE_EQ(t.chip.maxtext_peak_tflops, 918);
}

TEST(Topology, Tpu7xHasTwoDevicesPerChip) {
  Topology t = must("tpu7x-8");
  EXPECT_EQ(t.chips_per_slice, 4);
  EXPECT_EQ(t.devices_per_slice, 8);
  EXPECT_DOUBLE_EQ(t.peak_flops_per_device(), 2.307e15 / 2);
  EXPECT_EQ(t.hbm_bytes_per_device(), int64_t{96} << 30);
  EXPECT_EQ(must("tpu7x-128").wrap, (std::vector<bool>{true, true, true}));
}

TEST(Topology, GpuHostsAreSlices) {
  Topology t = must("a3", 4);
  EXPECT_EQ(t.chip.name, "H100");
  EXPECT_EQ(t.chip.interconnect, Interconnect::kSwitch);
  EXPECT_EQ(t.devices_per_slice, 8);
  EXPECT_EQ(t.num_devices(), 32);
  EXPECT_EQ(must("a3ultra").chip.name, "H200");
  EXPECT_EQ(must("a4").chip.name, "B200");
  EXPECT_DOUBLE_EQ(must("a3").dcn_bytes_per_s_per_device(), 5e10);  // 400 Gb/s per GPU
}

TEST(Topology, UnknownNamesTheFamilies) {
  for (std::string_view bad : {"v7-8", "h100", "", "v5p", "-8"}) {
    Result<Topology> t = topology_from_name(bad);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_TRUE(contains(t.status().message(), "known families: v4-N, v5e-N, v5p-N, v6e-N"))
        << t.status().message();
  }
  Result<Topology> size = topology_from_name("v5p-100");
  ASSERT_FALSE(size.ok());
  EXPECT_TRUE(contains(size.status().message(), "no v5p slice named 'v5p-100'"));
  EXPECT_TRUE(contains(size.status().message(), "v5p-256"));
  EXPECT_FALSE(topology_from_name("v4-768").ok());  // v4 has no 768
  EXPECT_FALSE(topology_from_name("v6e-8x").ok());
  Result<Topology> slices = topology_from_name("v6e-8", 0);
  ASSERT_FALSE(slices.ok());
  EXPECT_TRUE(contains(slices.status().message(), "compile_topology_num_slices must be >= 1"));
}

TEST(Topology, MissingChipConstantIsAnError) {
  ChipSpec c = must("v5p-8").chip;
  EXPECT_TRUE(validate_chip(c).ok());
  c.hbm_bytes_per_s = 0;
  Status s = validate_chip(c);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "topology: chip v5p has no hbm_bytes_per_s (a constant the prediction "
                         "needs)");
}

TEST(Topology, Prints) {
  EXPECT_EQ(must("v6e-128", 2).to_string(),
            "v6e-128: 128 v6e chips per slice (8x16, wraparound y), 128 devices per slice x 2 "
            "slices");
}

}  // namespace
}  // namespace eng
