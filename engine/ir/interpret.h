// engine/ir/interpret.h: the reference interpreter. Evaluates a Program in double precision
// with the naive kernels of engine/tensor/reference.h: the oracle for the compiled
// executor, and the engine of the finite-difference gradient checks.
#pragma once

#include <vector>

#include "engine/base/status.h"
#include "engine/ir/program.h"

namespace eng {

// A host value in double (i32 values are stored as exact doubles).
struct HostTensor {
  Shape shape;
  DType dtype = DType::kF32;
  std::vector<double> data;  // row-major, shape.numel() elements
};

// Evaluates p on args (one per p.args(), in order; shapes and dtypes must match, else an
// error naming the argument). Returns one HostTensor per p.outputs(). In-place outputs
// do not modify args.
Result<std::vector<HostTensor>> interpret(const Program& p, const std::vector<HostTensor>& args);

// As interpret(), but returns every value of the program, indexed by ValueId.
Result<std::vector<HostTensor>> interpret_all(const Program& p, const std::vector<HostTensor>& args);

}  // namespace eng
