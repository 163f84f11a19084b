// engine/frontend/eager_manual.h: sl.shard_map called outside sl.jit runs eagerly, as JAX's
// (its ShardMapTrace; docs/frontend.md): the body runs once, on per-device values, and every op
// it applies is compiled as its own small per-device (manual) program, cached like eager ops,
// and run at once, so the values are concrete while the body runs: `print(x)` shows each
// device's block as JAX prints a ShardMapTracer ("On TFRT_CPU_0 at mesh coordinates (i,) =
// (0,):\n[0. 1. 2.]\n"), and collectives run when the body reaches them.
//
// A per-device value is a Value whose trace is the call's eager trace (Trace::eager()): its
// `data` stacks the devices' blocks along a leading axis over its varying manual axes (Value::
// vma, in mesh order; one slot when it varies over none), so device d's block is the slot of
// d's coordinates along those axes, and `shape` is the block's shape. Session::apply sends an op
// on such values here (apply_eager_manual), which derives the result's varying axes with the
// rules of vma.h. sl.jit of a shard_map'd function compiles it as one program instead.
//
//   std::shared_ptr<Trace> em = eager_trace("f", mesh);
//   ENG_ASSIGN_OR_RETURN(std::vector<Value> xs, eager_blocks(s, em, args, in_specs, "f"));
//   session.push_trace(em); ... the body, on xs ...; session.pop_trace();
//   ENG_ASSIGN_OR_RETURN(std::vector<ArrayRef> out, eager_results(s, em, ys, out_specs, "f"));
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/frontend/jit_function.h"

namespace eng::frontend {

// The trace of one eager shard_map call on mesh: manual, eager, records nothing.
std::shared_ptr<Trace> eager_trace(const std::string& name, const Mesh& mesh);

// The arguments split into per-device values: leaf k by specs[k] (JAX's in_specs), placed as
// that spec says first (a reshard when it is laid out otherwise). Errors: a spec the mesh or the
// shape does not allow ("{fn}: in_specs[k]: ..."), a leaf of another trace.
Result<std::vector<Value>> eager_blocks(Session& s, const std::shared_ptr<Trace>& em,
                                        const std::vector<Value>& leaves,
                                        const std::vector<PartitionSpec>& specs,
                                        const std::string& fn);

// eager_blocks of a call's argument leaves by their in_specs; an argument without one is an
// error ("shard_map: in_specs has no spec for argument 2").
Result<std::vector<Value>> eager_arguments(Session& s, const std::shared_ptr<Trace>& em,
                                           const CallArgs& args, const std::string& fn);

// The body's results (per-device values of em, or concrete arrays: invariant, as JAX's closed-
// over values) as global arrays laid out by out_specs (one per result). Errors: check_vma's
// (vma.h check_out_vma's text), out_specs missing or of the wrong rank, a tracer of another
// trace.
Result<std::vector<ArrayRef>> eager_results(Session& s, const std::shared_ptr<Trace>& em,
                                            const std::vector<Value>& results,
                                            const std::vector<std::optional<PartitionSpec>>& out_specs,
                                            const std::string& fn);

// JAX's ShardMapTracer.__str__: per device of the mesh (row-major), "On TFRT_CPU_{d} at mesh
// coordinates (i, j,) = (0, 1):\n{the block as numpy's str}\n", joined by newlines.
Result<std::string> eager_repr(const Value& v);

}  // namespace eng::frontend
