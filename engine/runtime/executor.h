// engine/runtime/executor.h: one instruction on one device: the OpKind -> eng::kern dispatch.
// Internal to engine/runtime (runtime.cpp drives it over devices and instructions).
#pragma once

#include "engine/base/status.h"
#include "engine/ir/program.h"
#include "engine/mesh/mesh.h"

namespace eng {

// Unimplemented when an op gets an input dtype the CPU kernels lack (they are f32, ids i32);
// the message names the op, the input and both dtypes. Checked once per executable.
Status check_executable_dtypes(const Program& p);

// Runs `in` on one device. ptrs: the device's buffer address per ValueId. Allocates nothing
// (kernels keep per-thread scratch). In-place ops whose output was given its own buffer copy
// the input there first, so any buffer assignment the compiler made is handled.
// mesh/device: where it runs (kAxisIndex reads the device's coordinates; a one-device run
// may pass none: every rank is 0).
void run_instr(const Program& p, const Instr& in, void* const* ptrs, const Mesh* mesh = nullptr,
               int64_t device = 0);

}  // namespace eng
