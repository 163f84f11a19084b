// engine/compile/hlo_text.h: a compiled (per-device) program printed in XLA's HLO text syntax,
// what JAX's `Compiled.as_text()` shows (`sl.jit(f):lower(x):compile():as_text()`).
//
// The engine builds no HLO: this is a second printer of the same partitioned program that
// Program::to_text() prints jaxpr-style. Each instruction becomes one HLO instruction named as
// XLA names it (`%all-reduce.7 = f32[4]{0} all-reduce(f32[4]{0} %dot.6), channel_id=1,
// replica_groups={{0,2,4,6},{1,3,5,7}}, use_global_device_ids=true, to_apply=%region_add`):
// XLA's opcode where the engine op is that operation (add, multiply, dot, convert, reshape,
// slice, pad, concatenate, transpose, compare, select, the elementwise functions and the five
// collectives, whose replica groups, dimensions and source-target pairs are computed from the
// mesh as the executor runs them); every other op (fused kernels such as attention, the
// optimizer, MoE routing) a `custom-call` whose `custom_call_target` is the engine's op name.
// Shapes are the per-device ones with row-major layouts; int32 prints as s32. Attributes other
// than the collectives' (dot's contracting dims, compare's direction, ...) are not printed, so
// the text reads like HLO but is not meant to be parsed back by XLA.
//
//   std::string hlo = hlo_text(exe.program(), exe.mesh());
#pragma once

#include <string>

#include "engine/ir/program.h"
#include "engine/mesh/mesh.h"

namespace eng {

std::string hlo_text(const Program& p, const Mesh& mesh);

}  // namespace eng
