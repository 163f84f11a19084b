// engine/runtime/executor.h: one instruction on one device: the OpKind -> eng::kern dispatch.
// Internal to engine/runtime (runtime.cpp drives it over devices and instructions).
#pragma once

#include "engine/base/status.h"
#include "engine/ir/program.h"
#include "engine/mesh/mesh.h"

namespace eng {

// Unimplemented when an op gets an input dtype the CPU kernels cannot take (floats are f32 or
// bf16, ids i32); the message names the op, the input and both dtypes. Checked once per
// executable.
Status check_executable_dtypes(const Program& p);

// f32 bytes an instruction's bf16 operands need while its f32 kernel runs (the widening path
// below): the largest over the program, reserved per device when an executable is prepared.
int64_t widen_scratch_bytes(const Program& p);

// Runs `in` on one device. ptrs: the device's buffer address per ValueId (entries of the
// instruction's bf16 operands are pointed at `widen_scratch` while it runs, then restored).
// Allocates nothing (kernels keep per-thread scratch). In-place ops whose output was given its
// own buffer copy the input there first, so any buffer assignment the compiler made is handled.
// mesh/device: where it runs (kAxisIndex reads the device's coordinates; a one-device run
// may pass none: every rank is 0). An op whose kernel is f32-only and that has bf16 operands
// runs widened (docs/precision.md): bf16 inputs converted into f32 scratch (widen_scratch,
// widen_scratch_bytes(p) bytes), the f32 kernel, bf16 outputs rounded from f32 scratch.
void run_instr(const Program& p, const Instr& in, void** ptrs, const Mesh* mesh = nullptr,
               int64_t device = 0, void* widen_scratch = nullptr);

}  // namespace eng
