// engine/runtime/executor.h: one instruction on one device: the OpKind -> eng::kern dispatch.
// Internal to engine/runtime (runtime.cpp drives it over devices and instructions).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/base/status.h"
#include "engine/ir/program.h"
#include "engine/mesh/mesh.h"
#include "engine/tensor/onednn_matmul.h"

namespace eng {

// Unimplemented when an op gets an input dtype the CPU kernels cannot take (floats are f32 or
// bf16, ids i32); the message names the op, the input and both dtypes. Checked once per
// executable.
Status check_executable_dtypes(const Program& p);

// f32 bytes an instruction's bf16 operands need while its f32 kernel runs (the widening path
// below): the largest over the program, reserved per device when an executable is prepared.
int64_t widen_scratch_bytes(const Program& p);

// How run_instr runs an instruction (see below).
enum class InstrPath : uint8_t {
  kDecide,      // not decided yet: run_instr decides (uses_bf16_kernel, widen bytes) per call
  kKernel,      // the op's kernel on its own buffers (f32, any-dtype ops, no bf16 operands)
  kBf16Kernel,  // the op's bf16 kernel (uses_bf16_kernel)
  kWidened,     // the f32 kernel on widened copies of its bf16 operands
};
// The path of each instruction of `p`, decided once when an executable is prepared.
std::vector<InstrPath> instr_paths(const Program& p);

// Runs `in` on one device. ptrs: the device's buffer address per ValueId (entries of the
// instruction's bf16 operands may be pointed at scratch.widen while it runs, then restored).
// Allocates nothing (kernels keep per-thread scratch). In-place ops whose output was given its
// own buffer copy the input there first, so any buffer assignment the compiler made is handled.
// mesh/device: where it runs (kAxisIndex reads the device's coordinates; a one-device run
// may pass none: every rank is 0). docs/precision.md: an op that uses_bf16_kernel (program.h)
// runs its bf16 kernel (a matmul: scratch.matmul's plan); any other op with bf16 operands runs
// widened: its bf16 inputs converted into f32 scratch (scratch.widen), the f32 kernel, its
// bf16 outputs rounded from f32 scratch.
struct InstrScratch {
  void* widen = nullptr;                         // widen_scratch_bytes(p) bytes, this device's
  const kern::Bf16MatmulPlan* matmul = nullptr;  // the instruction's plan (bf16 matmuls)
  InstrPath path = InstrPath::kDecide;           // instr_paths(p)[i], when prepared
};
void run_instr(const Program& p, const Instr& in, void** ptrs, const Mesh* mesh = nullptr,
               int64_t device = 0, const InstrScratch& scratch = {});

// The Bf16MatmulPlan (engine/tensor/onednn_matmul.h) of a bf16 matmul, expert_matmul(_grad)
// or moe_combine_weights_grad (uses_bf16_kernel; the MoE ops' plan is one expert's or one
// (row, expert)'s product, run at each block's offset), made when an executable is prepared;
// null for any other instruction.
Result<std::unique_ptr<kern::Bf16MatmulPlan>> make_bf16_matmul_plan(const Program& p,
                                                                    const Instr& in,
                                                                    kern::MatmulBackend backend);

}  // namespace eng
