// tests/mpi/nompi_test.cpp: engine/dist compiled WITHOUT MPI (SHARDLAB_WITH_MPI=0, as in a
// build with -DSHARDLAB_MPI=OFF), in every build: a plain run is process 0 of 1; started by an
// MPI launcher as one of several processes it is a clear error (every process would
// otherwise train alone).
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/dist/dist.h"

namespace eng {
namespace {

TEST(NoMpiBuild, LauncherWithSeveralProcessesIsAnError) {
  ASSERT_EQ(setenv("OMPI_COMM_WORLD_SIZE", "2", 1), 0);
  Status s = dist::init(nullptr, nullptr, 3);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "dist: started by an MPI launcher as one of 2 processes, but this shardlab was built "
            "without MPI (configure with -DSHARDLAB_MPI=ON and libopenmpi-dev installed); every "
            "process would train alone");
  EXPECT_EQ(dist::process().local_devices, 3);
  EXPECT_FALSE(dist::built_with_mpi());
  EXPECT_EQ(dist::process().count, 1);
  EXPECT_EQ(dist::make_channel(), nullptr);
  EXPECT_EQ(dist::device_range(8)->size(), 8);
}

}  // namespace
}  // namespace eng
