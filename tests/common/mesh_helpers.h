// tests/common/mesh_helpers.h: small helpers the mesh and sharding tests share.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/mesh/mesh.h"

namespace eng::testing {

// A mesh that must be valid (the test fails, with the message, if it is not).
inline Mesh make_mesh(std::vector<std::string> names, std::vector<int64_t> sizes,
                      AxisType t = AxisType::kAuto) {
  Result<Mesh> m = Mesh::create(std::move(names), std::move(sizes), t);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(m).value();
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace eng::testing
