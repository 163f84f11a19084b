// engine/train/inspect.h: how a trainer's state is split over its mesh: the sharding table
// (MaxText's debug_sharding dump), the replication audit and store snapshots.
//
//   ENG_ASSIGN_OR_RETURN(ShardingTable tab, trainer_shardings(*trainer));
//   fmt::print("{}", tab.debug_string());   // MaxText's print_shardings_params
//   // fsdp: 4, tensor: 2
//   //  params/decoder/layers_0/mlp/wi_0/kernel
//   //     Shape:     f32[256@fsdp,704@tensor]
//   //     Logical:   ('embed', 'mlp')
//   //     Physical:  ('fsdp', 'tensor')
//   fmt::print("{}", tab.to_string());      // one aligned row per array
//   ReplicationReport r = audit_trainer(*trainer, /*tolerance=*/0.02);
//
// Rows cover every argument of train_step: params, optimizer state (mu, nu), the step counter
// and the batch arrays, each with the sharding compile() gives it (the Executable's argument
// shardings; shape_only trainers included). Specs are shown as MaxText shows them: size-1
// mesh axes dropped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/ir/program.h"
#include "engine/mesh/mesh.h"
#include "engine/sharding/logical_axes.h"
#include "engine/sharding/logical_rules.h"
#include "engine/sharding/partition_spec.h"
#include "engine/sharding/visualize.h"
#include "engine/store/metrics_store.h"

namespace eng {

class Trainer;

// One array of the state.
struct ShardingRow {
  std::string path;         // argument name: "params/decoder/layers_0/mlp/wi_0/kernel"
  std::string role;         // param | opt_mu | opt_nu | step | batch
  DType dtype = DType::kF32;
  Shape shape;              // global
  LogicalAxes logical;      // per dim; empty when the array has none
  PartitionSpec spec;       // as placed, size-1 mesh axes dropped, one entry per dim
  Shape local_shape;        // per device
  int64_t bytes_per_device = 0;
  std::string type;         // jax.typeof form: "f32[256@fsdp,704@tensor]"

  // "('embed', 'mlp')" (Python's tuple form, as MaxText logs it); "None" when no names.
  std::string logical_string() const;
  // "('fsdp', 'tensor')": the spec as a tuple, MaxText's Physical line.
  std::string physical_string() const;
};

struct ShardingTable {
  Mesh mesh;
  std::vector<ShardingRow> rows;  // program argument order

  const ShardingRow* find(std::string_view path) const;  // nullptr if absent
  // Sum of bytes_per_device over the rows (every device holds the same amount).
  int64_t bytes_per_device() const;
  // MaxText's debug_sharding dump: the non-trivial mesh axes line ("fsdp: 4, tensor: 2"; "(no
  // non-trivial axes)" on one device), then per row " {path}" / "    Shape:     {type}" /
  // "    Logical:   {axes}" / "    Physical:  {spec tuple}".
  std::string debug_string() const;
  // Aligned columns: path, type, logical, spec, local shape, bytes/device; then a total line.
  std::string to_string() const;
};

// t:shardings()'s value: the table and, per row and dim, how the logical rules resolved it.
struct ShardingTableView {
  ShardingTable table;
  std::vector<std::vector<DimResolution>> why;  // per row; empty: rules not shown
  LogicalAxisRules rules;                       // what `why` numbers refer to
  bool show_skipped = false;

  // The view of `table` with each row's dims explained by `rules` (explain_logical_to_mesh).
  static ShardingTableView explained(ShardingTable table, const LogicalAxisRules& rules,
                                     bool show_skipped);
  // table.to_string() with a rules column ("('embed' #51, 'mlp' #48)": 1-based, as base.yml's
  // rows are numbered) appended to the header and the rows, and with show_skipped, under each
  // row per named dim the rule that fired and every rule of that name that did not, and why.
  std::string to_string() const;
};

// The table of `program`'s arguments placed by `shardings` (one per argument) on `mesh`.
// Errors: a count mismatch or a sharding that does not validate against its shape.
Result<ShardingTable> sharding_table(const Program& program, const Mesh& mesh,
                                     const std::vector<NamedSharding>& shardings);
// The trainer's state as compile() places it (argument_shardings from the config's options).
Result<ShardingTable> trainer_shardings(const Trainer& trainer);

// Parameters only, for audit_replicated.
std::vector<ParamShardingInfo> param_sharding_infos(const ShardingTable& table);
// MaxText's assert_params_sufficiently_sharded on the trainer's params, as a report.
Result<ReplicationReport> audit_trainer(const Trainer& trainer, double tolerance);

// Store snapshot: the mesh into `meshes`, every row into `tensor_shardings` (the path as
// shown, '/'-separated). Returns the snapshot id. run_id "" stores NULL.
Result<int64_t> record_sharding_snapshot(MetricsStore& store, const std::string& run_id,
                                         std::optional<int64_t> step, const ShardingTable& table);

}  // namespace eng
