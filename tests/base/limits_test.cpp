// tests/base/limits_test.cpp: checked shapes (no int64 overflow in element counts) and the
// file helpers that refuse non-regular files and never write through a planted symlink.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/base/file.h"
#include "engine/mesh/mesh.h"
#include "engine/sharding/visualize.h"
#include "engine/tensor/shape.h"

namespace eng {
namespace {

namespace fs = std::filesystem;

// Issue 16 items 2 and 4: Shape::numel wrapped silently (signed overflow).
TEST(Limits, CheckedShapesRefuseOverflowingElementCounts) {
  EXPECT_TRUE(Shape::checked({8, 256, 768}).ok());
  EXPECT_TRUE(Shape::checked({0, int64_t{1} << 40, int64_t{1} << 10}).ok());  // empty, within
  Result<Shape> wraps = Shape::checked({int64_t{1} << 32, int64_t{1} << 32});
  ASSERT_FALSE(wraps.ok());
  EXPECT_EQ(
      wraps.status().message(),
      fmt::format("shape (4294967296, 4294967296) has more than {} elements", kMaxTensorElements));
  Result<Shape> negative = Shape::checked({4, -1});
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().message(), "shape (4, -1): dimension -1 is negative");
}

// Issue 16 item 2: a mesh of 10^18 devices allocated for 90 s, then threw bad_alloc;
// sl.visualize of a 2^20 x 2^20 device grid did the same. Both meet the device limit first.
TEST(Limits, MeshesOverTheDeviceLimitAreRefused) {
  Result<Mesh> huge = Mesh::create({"data"}, {1000000000000000000});
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().message(),
            fmt::format("mesh: 1000000000000000000 devices, more than the {} this engine simulates",
                        kMaxDevices));
  EXPECT_FALSE(Mesh::create({"x", "y"}, {int64_t{1} << 20, int64_t{1} << 20}).ok());
  EXPECT_FALSE(Mesh::from_parallelism({"data", "fsdp"}, {-1, 2}, int64_t{1} << 40).ok());
  Result<Mesh> most = Mesh::create({"x", "y"}, {int64_t{1} << 8, int64_t{1} << 9});
  ASSERT_TRUE(most.ok());
  EXPECT_TRUE(visualize_sharding(Shape{1 << 8, 1 << 9}, NamedSharding{*most, PartitionSpec({{"x"}, {"y"}})}).ok());
}

TEST(LimitsDeathTest, NumelOfAnUncheckedOverflowingShapeAborts) {
  const Shape s{int64_t{1} << 62, 4};
  EXPECT_DEATH(static_cast<void>(s.numel()), "product overflows int64");
}

TEST(Limits, OpenRegularFileRefusesFifosAndDevicesWithoutBlocking) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("shardlab_limits_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<OpenedFile> f = open_regular_file(fifo, "test");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(), fmt::format("test: '{}' is a FIFO, not a regular file", fifo));
  EXPECT_FALSE(read_regular_file("/dev/zero", "test", 1 << 20).ok());
  const std::string big = (dir / "big").string();
  std::ofstream(big) << "0123456789";
  Result<std::string> capped = read_regular_file(big, "test", 4);
  ASSERT_FALSE(capped.ok());
  EXPECT_EQ(capped.status().code(), Code::kResourceExhausted);
  EXPECT_EQ(read_regular_file(big, "test", 10).value(), "0123456789");
  fs::remove_all(dir);
}

TEST(Limits, TempFilesAreNewAndRandom) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("shardlab_temp_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string final_path = (dir / "out.bin").string();
  Result<TempFile> a = create_temp_file(final_path, "test");
  Result<TempFile> b = create_temp_file(final_path, "test");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->path, b->path);
  EXPECT_EQ(a->path.rfind(final_path + ".tmp.", 0), 0u) << a->path;
  EXPECT_EQ(a->path.size(), final_path.size() + 5 + 16);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace eng
