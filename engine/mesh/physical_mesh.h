// engine/mesh/physical_mesh.h: a MaxText mesh laid on a named topology's torus, as MaxText's
// create_device_mesh does it, and the time of a collective on the links each axis uses.
//
//   ENG_ASSIGN_OR_RETURN(Topology t, topology_from_name("v5p-256", 2));
//   ENG_ASSIGN_OR_RETURN(PhysicalMesh pm, lay_out_mesh(t, names, ici, dcn));
//   pm.mesh                      // Mesh: each axis of size ici[i] x dcn[i] (slices major)
//   pm.axes[k].to_string()       // "fsdp: 128 over x,y,z (4x4x8, ring)"
//   collective_seconds(CollectiveKind::kAllGather, shard_bytes, group_of(pm, {"fsdp"}))
//
// Layout (MaxText maxtext_utils.create_device_mesh -> jax mesh_utils.create_device_mesh /
// create_hybrid_device_mesh; jax's mesh_utils.py read at commit 01a6442): the ICI sizes are
// assigned from the LAST mesh axis (the most network-intensive, MaxText's order) to the
// first; each takes the first combination of 3, then 2, then 1 still-free physical dims
// (itertools.combinations order) whose sizes multiply to the axis size; a size-1 axis takes
// none. No combination: JAX's error (allow_split_physical_axes is not modelled). DCN sizes
// multiply the axes over slices, the slice index major (np.block of the per-slice meshes).
// TPU physical dims are (x, y, z) with z = 1 on 2D slices; tpu7x's two devices per chip are
// folded into z (an assumption: docs/prediction.md). GPUs: one dim, the host's 8 GPUs on a
// switch.
//
// Collective model (the JAX scaling book, hardware.md section 3): a ring all-gather moves
// (G-1) x shard bytes into each device at the bandwidth its axis gets: per spanned dim, two
// neighbours x one-way link bandwidth when the dim wraps (a ring), one when it does not (a
// line: half); an axis over several dims sums its dims (one ring per dim). A switch gives the
// GPU's one-way NVLink bandwidth. reduce_scatter = all_gather of the output; all_reduce = 2 x
// (G-1)/G x bytes; all_to_all = all_gather / 4; collective_permute = one neighbour's link.
// Over DCN and ICI together the collective is hierarchical (DCN part at the per-device DCN
// bandwidth, then ICI). Latency: 1 us per hop (ring: G/2 hops, line: G-1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/mesh/mesh.h"
#include "engine/mesh/topology.h"

namespace eng {

// One mesh axis on the hardware.
struct AxisPlacement {
  std::string axis;
  int64_t ici_size = 1;              // within a slice
  int64_t dcn_size = 1;              // over slices
  std::vector<int> dims;             // physical dims (0=x, 1=y, 2=z) the ICI part spans
  std::vector<int64_t> dim_sizes;    // their sizes
  std::vector<bool> dim_wraps;       // per spanned dim: a ring (true) or a line
  double ici_bytes_per_s = 0;        // inbound bytes/s per device in a ring collective
  double dcn_bytes_per_s = 0;        // per device over DCN (0 when dcn_size == 1)
  bool switched = false;             // GPU NVLink switch
  // "fsdp: 256 over x,y (16x16, ring)", "data: 2 over DCN", "tensor: 1".
  std::string to_string() const;
};

struct PhysicalMesh {
  Topology topology;
  Mesh mesh;                          // axis sizes ici x dcn
  std::vector<AxisPlacement> axes;    // one per mesh axis, in mesh order
  const AxisPlacement* axis(std::string_view name) const;  // null if absent
};

// `ici` and `dcn` are per axis of `names` (MaxText's order), each with at most one -1 (filled
// so the ici product equals the topology's devices per slice and the dcn product its
// slices). Errors name both numbers: "mesh: Number of devices per slice 256 does not match
// the product of the ICI parallelism 128 (...)".
Result<PhysicalMesh> lay_out_mesh(const Topology& topology, const std::vector<std::string>& names,
                                  std::vector<int64_t> ici, std::vector<int64_t> dcn,
                                  AxisType axis_type = AxisType::kAuto);

enum class CollectiveKind : uint8_t { kAllGather, kReduceScatter, kAllReduce, kAllToAll, kPermute };

// A collective's group over one or more mesh axes: its ICI and DCN parts.
struct CollectiveGroup {
  int64_t ici_size = 1, dcn_size = 1;
  double ici_bytes_per_s = 0;  // inbound per device over the ICI part (summed over its dims)
  double dcn_bytes_per_s = 0;
  double neighbour_bytes_per_s = 0;  // one link one way (collective_permute)
  int64_t ici_hops = 0;              // latency hops of one ring pass
  bool switched = false;             // the ICI part is a GPU host's NVLink switch
  int64_t size() const { return ici_size * dcn_size; }
};
// Unknown axis names are a bug of the caller (the program's axes come from the mesh).
CollectiveGroup group_of(const PhysicalMesh& pm, const std::vector<std::string>& axes);

// Seconds for one collective. `shard_bytes`: per device, all_gather's input, reduce_scatter's
// output, all_reduce's operand, all_to_all's input, collective_permute's payload.
double collective_seconds(CollectiveKind kind, double shard_bytes, const CollectiveGroup& g);

constexpr double kHopLatencySeconds = 1e-6;  // scaling book: about 1 us per ICI hop

}  // namespace eng
