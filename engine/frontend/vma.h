// engine/frontend/vma.h: JAX's varying manual axes (vma, shard_map's check_vma=True) for
// sl.shard_map bodies: which mesh axes a per-device value may differ along. Trace::vma_bits
// derives them from the program (trace.h); this file holds the rules, their printing in types
// ("f32[3]{V:i}"), jax.lax.pcast, the out_specs check, and the cotangent rule grad uses.
//
//   uint32_t v = tr.vma_bits(x);                       // bit k: mesh axis k
//   ENG_ASSIGN_OR_RETURN(ValueId y, pcast(tr, x, {"i"}, "varying"));
//   ENG_RETURN_IF_ERROR(check_out_vma(tr, "f", results, out_specs));
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/frontend/session.h"
#include "engine/ir/autodiff.h"

namespace eng::frontend {

// The bits of the mesh axes `spec` names (size-1 axes left out, as JAX's types drop them).
uint32_t vma_of_spec(const Mesh& mesh, const PartitionSpec& spec);
uint32_t vma_of_axes(const Mesh& mesh, const std::vector<std::string>& axes);
// The axes of `bits`, in mesh order.
std::vector<std::string> vma_names(const Mesh& mesh, uint32_t bits);
// JAX's suffix of a type: "" (invariant), "{V:i}", "{V:(i,j)}".
std::string vma_string(const Mesh& mesh, uint32_t bits);
std::string vma_string(const std::vector<std::string>& names);  // names in mesh order
// A tracer's vma (empty for a concrete array or outside shard_map).
std::vector<std::string> vma_of(const Value& v);

// The rules, per instr of a manual program (`of` gives an operand's bits): an op varies
// where any operand does; the collectives first make x vary over their axes (JAX's implicit
// pvary); then psum (all_reduce) is invariant over them, all_gather, psum_scatter, ppermute
// and all_to_all stay varying, axis_index varies over its axes. op_vma is the set the op
// computes over (operands' union plus a collective's axes); out_vma its results'.
uint32_t op_vma(const Mesh& mesh, const Instr& in, uint32_t operands);
uint32_t out_vma(const Mesh& mesh, const Instr& in, uint32_t operands);

// jax.lax.pcast(x, axes, to=...): only from invariant to 'varying' (JAX's pvary): x unchanged,
// now varying over axes too. Errors as JAX's: an unknown `to`, axes both varying and not,
// casts shardlab lacks (to 'reduced' / 'unreduced').
Result<ValueId> pcast(Trace& tr, ValueId x, const std::vector<std::string>& axes,
                      std::string_view to);

// shard_map's check_vma on results: out_specs[i] must name every mesh axis results[i] varies
// over (else JAX's error: "shard_map applied to the function 'f' was given out_specs which
// require replication which can't be statically inferred given the mesh: ...").
Status check_out_vma(const Trace& tr, std::string_view fn, const std::vector<ValueId>& results,
                     const std::vector<std::optional<PartitionSpec>>& out_specs);

// The same on the results' vma bits (an eager shard_map's values, eager_manual.h).
Status check_out_vma_bits(const Mesh& mesh, std::string_view fn, const std::vector<uint32_t>& results,
                          const std::vector<std::optional<PartitionSpec>>& out_specs);

// grad inside a manual trace: an operand invariant over axes its op varies over (JAX's implicit
// pvary) gets its cotangent contribution psummed over them (pvary's transpose). tr outlives it.
CotangentHook vma_cotangent_hook(const Trace& tr);

}  // namespace eng::frontend
