// tests/frontend/test_values.h: what the C++ front-end tests share: a concrete Value from a
// list of numbers (placed by device_put), and back.
#pragma once

#include <vector>

#include <gtest/gtest.h>

#include "engine/frontend/session.h"
#include "engine/frontend/trace.h"

namespace eng::frontend::test {

inline Value put(std::vector<double> v, const Shape& s, const Mesh& mesh = Mesh(),
                 const PartitionSpec& spec = PartitionSpec()) {
  Result<ArrayRef> a = device_put(v, s, DType::kF32, {mesh, spec});
  EXPECT_TRUE(a.ok()) << a.status().message();
  return Value::concrete(*a);
}

}  // namespace eng::frontend::test
