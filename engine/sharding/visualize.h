// engine/sharding/visualize.h: human-facing views of shardings: the device grid and the audit.
//
//   Result<std::string> g = visualize_sharding(Shape{8, 8}, NamedSharding{mesh2x2, P(x, y)});
//   ┌─────────┬─────────┐
//   │         │         │
//   │  CPU 0  │  CPU 1  │
//   │         │         │
//   ├─────────┼─────────┤
//   │         │         │
//   │  CPU 2  │  CPU 3  │
//   │         │         │
//   └─────────┴─────────┘
//
//   ReplicationReport r = audit_replicated(params, mesh);   // MaxText's sharding_tolerance check
//   if (r.exceeds) fmt::print("{}", r.to_string());
#pragma once

#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/mesh/mesh.h"
#include "engine/sharding/partition_spec.h"
#include "engine/tensor/shape.h"

namespace eng {

// Like jax.debug.visualize_sharding: one cell per distinct block of the shown dims, labelled
// "CPU <ids>" with the devices holding it (sorted, comma-joined: replicas share a cell), box
// lines, every line at most 80 columns. 1-D shows one row of cells; 2-D a grid. For rank > 2
// (or when dim0/dim1 are given) two dims are shown: dim0 down, dim1 across (dim1 = -1 with
// dim0 given: a 1-D view of dim0). Default: the sharded dims, topped up with the last dims,
// in ascending order. A header says which dims are shown and whether a hidden dim is sharded
// too (its blocks then merge into the cells). Grids too wide or tall for 80x32 show their
// leading blocks and say so. `color`: ANSI truecolor backgrounds (tab20b, as JAX).
// Errors: the sharding does not validate against `shape`, or dims out of range / equal.
Result<std::string> visualize_sharding(const Shape& shape, const NamedSharding& s, int dim0 = -1,
                                       int dim1 = -1, bool color = false);

// One parameter for audit_replicated: its path, global shape and sharding spec.
struct ParamShardingInfo {
  std::string path;    // e.g. "params/decoder/layers/mlp/wi_0/kernel"
  Shape shape;         // global shape
  PartitionSpec spec;  // as placed (size-1 axes may be present; they never count)
};

// MaxText's assert_params_sufficiently_sharded, as a report instead of an assertion.
struct ReplicationReport {
  struct Offender {
    std::string path;                         // parameter path
    int64_t size = 0;                         // elements
    Shape shape;                              // global shape
    std::string spec;                         // "P('fsdp', None)"
    std::vector<std::string> unsharded_axes;  // target axes it is not sharded on, sorted
  };
  std::vector<std::string> target_axes;  // non-trivial axes checked, sorted; empty = no check
  int64_t total_elements = 0;            // all parameters
  int64_t unsharded_elements = 0;        // parameters not sharded on every target axis
  double fraction = 0;                   // unsharded / total (0 when total is 0)
  double maxtext_fraction = 0;           // MaxText's number: unsharded elements / total bytes
  double tolerance = 0;                  // sharding_tolerance
  bool exceeds = false;                  // fraction > tolerance (MaxText would raise)
  std::vector<Offender> offenders;       // largest first (ties keep input order)

  // MaxText's message: "Unsharded parameter percentage (x%) exceeds tolerance (y%)." then the
  // 5 largest offenders, or a one-line "ok" summary when within tolerance.
  std::string to_string(int top = 5) const;
};

// The target axes are those of {fsdp, fsdp_transpose, sequence, context, context_usp_ulysses,
// context_autoregressive, tensor, tensor_sequence, stage, expert} present in `mesh` with size
// > 1. A parameter counts as unsharded unless its spec uses every target axis. Sizes are in
// elements on both sides of `fraction`; MaxText divides elements by total *bytes*, which makes
// its check 4x looser for f32 weights: that number is `maxtext_fraction` (with `weight_bytes`
// per element), reported beside ours but not used for `exceeds`.
ReplicationReport audit_replicated(const std::vector<ParamShardingInfo>& params, const Mesh& mesh,
                                   double tolerance = 0.02, int weight_bytes = 4);

}  // namespace eng
