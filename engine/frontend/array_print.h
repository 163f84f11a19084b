// engine/frontend/array_print.h: an array as NumPy prints it (`print(x)`, `tostring(x)`, the
// REPL; docs/frontend.md): Array([[1., 2.], [3., 4.]], dtype=float32), summarised past 1000
// elements as numpy's array2string is; a tracer as JAX prints one
// (Traced<float32[8@X,4]>with<DynamicJaxprTrace>).
#pragma once

#include <string>
#include <vector>

#include "engine/frontend/session.h"

namespace eng::frontend {

Result<std::string> array_repr(const Value& a);
// numpy's str of host values (row-major) of `shape`: "[0. 1. 2.]", no commas (an eager
// shard_map prints each device's block so, as JAX does).
std::string array_str(const std::vector<double>& values, const Shape& shape, DType dtype);

}  // namespace eng::frontend
