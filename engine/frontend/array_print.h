// engine/frontend/array_print.h: an array as NumPy prints it (`print(x)`, `tostring(x)`, the
// REPL; docs/frontend.md): Array([[1., 2.], [3., 4.]], dtype=float32), summarised past 1000
// elements as numpy's array2string is; a tracer as JAX prints one
// (Traced<float32[8@X,4]>with<DynamicJaxprTrace>).
#pragma once

#include <string>

#include "engine/frontend/session.h"

namespace eng::frontend {

Result<std::string> array_repr(const Value& a);

}  // namespace eng::frontend
