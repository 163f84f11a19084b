// engine/compile/spmd.h: SPMD partitioning (docs/sharding.md): sharding assignment for a
// train_step's arguments, the one reshard verb, and the partitioner that turns the GLOBAL
// program into the PER-DEVICE program (local shapes, collectives) an Executable runs.
//
//   SpmdOptions o;                               // usually CompileOptions::spmd
//   ENG_RETURN_IF_ERROR(assign_argument_shardings(program, mesh, o));
//   ENG_ASSIGN_OR_RETURN(Partitioned part, partition(program, mesh, o));
//
// A tracked sharding is a PartitionSpec normalised to the value's rank, with size-1 mesh
// axes dropped and `partial` axes (unreduced summands) sorted in mesh order.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/ir/program.h"
#include "engine/mesh/mesh.h"
#include "engine/sharding/logical_rules.h"

namespace eng {

enum class ShardMode : uint8_t { kAuto, kExplicit };
std::string_view shard_mode_name(ShardMode m);            // "auto" | "explicit"
Result<ShardMode> parse_shard_mode(std::string_view name);

// Instructions [begin, end) of a program traced under jax.sharding.auto_axes / explicit_axes
// inside a jit (engine/frontend): the mesh's axis types there, one per mesh axis.
struct AxisTypeRegion {
  int begin = 0, end = 0;
  std::vector<AxisType> types;
  bool operator==(const AxisTypeRegion&) const = default;
};

struct SpmdOptions {
  LogicalAxisRules rules = LogicalAxisRules::maxtext_default();
  // MaxText shard_mode: explicit makes every mesh axis Explicit; auto takes each axis's type
  // from the mesh. Explicit-mode rules (JAX's sharding in types: broadcasting errors,
  // ambiguous matmuls, with_sharding_constraint as an assert) apply to the Explicit axes; the
  // partitioner chooses the Auto axes' layout.
  ShardMode shard_mode = ShardMode::kAuto;
  // Regions with other axis types (innermost wins); empty for the trainer.
  std::vector<AxisTypeRegion> axis_type_regions;
  bool shard_optimizer_over_data = false;  // ZeRO-1: mu/nu also sharded over axes.zero1
  bool skip_trivial_specs = false;         // an all-replicated constraint emits nothing
  PartitionAxes axes;  // mesh axes of ZeRO-1 and vmap, named by the caller (MaxText's default)
};

// Sets ValueInfo::spec of every argument that has none: params from their logical axes
// (logical_to_mesh: size-1 axes dropped), mu/nu = their param's spec (ZeRO-1: axes.zero1
// prepended on the first dim divisible by its size whose spec has no axes.zero1_skip), step
// replicated, batch by get_input_data_sharding. Every spec is validated against its shape;
// errors name the argument, the dim and the axes.
Status assign_argument_shardings(Program& program, const Mesh& mesh, const SpmdOptions& options);

// The (unnormalised) argument shardings compile() will give `program` on `mesh`: how to
// place state before the first compile (Runtime::put by the same blocks).
Result<std::vector<NamedSharding>> argument_shardings(const Program& program, const Mesh& mesh,
                                                      const SpmdOptions& options);

struct Partitioned {
  Program local;                        // per-device program; value specs = global shardings
  std::vector<PartitionSpec> arg_specs; // per argument, normalised
  std::vector<PartitionSpec> out_specs; // per output (non-aliased outputs are replicated)
  // Per GLOBAL value, the sharding the walk gave it (before outputs are resharded): what the
  // front-end (engine/frontend) makes a result's sharding, as jax.jit's output shardings.
  std::vector<PartitionSpec> value_specs;
};

// Walks the global program once (its argument specs must be set) and emits the per-device
// program. Errors: explicit-mode constraint asserts and ambiguous matmuls (JAX's texts),
// indivisible or unknown shardings.
Result<Partitioned> partition(const Program& global, const Mesh& mesh, const SpmdOptions& options);

// Bytes ONE device receives from other devices for collective `in` of a per-device program
// (what engine/runtime/collectives moves): all_gather (G-1)·in, reduce_scatter (G-1)·out,
// all_reduce (G-1)·x (every member reads every other member's buffer), all_to_all
// (G-1)/G·in, collective_permute x times the share of members it reaches from another member
// (0 when shift % G == 0), dynamic_slice 0. Defined by the
// op table of compile/cost.cpp (0 for every other op).
double collective_bytes_received(const Program& p, const Instr& in);
// The same for the member of rank `rank` in its group: a partial collective_permute (fill_zero,
// source rows) reaches only some members; the one above is the mean over members.
double collective_bytes_received(const Program& p, const Instr& in, int64_t rank);
// The key bytes are counted under: the collective's mesh axes sorted by name and joined by
// ",", e.g. "fsdp" or "data,fsdp".
std::string collective_axes_key(const std::vector<std::string>& mesh_axes);

}  // namespace eng
