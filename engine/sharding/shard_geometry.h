// engine/sharding/shard_geometry.h: the geometry of a sharded array on a mesh, in one place:
// a device's rank along mesh axes, block offsets and local shapes, divisibility, size-1 axis
// removal and the printed form of a dim's axes. Every layer (sharding, compile, runtime)
// calls these instead of working the arithmetic out again.
//
//   Mesh m = ...;                                   // ('data': 2, 'fsdp': 2, 'tensor': 2)
//   AxesGroup g(m, {"data", "tensor"});             // g.size() == 4
//   g.rank(5)                                       // device 5 = (1, 0, 1): rank 1*2 + 1 = 3
//   shard_block(m, {"fsdp"}, 12, 5)                 // {.size = 6, .offset = 0}
//   check_divisible(m, spec, shape, "sharding")     // "sharding: dimension 1 of size 12 is
//                                                   //  not divisible by 8 (the product of ..."
//
// Devices are numbered row-major over the mesh axes (mesh.h). A list of axes is ranked major
// to minor: the rank along ('data', 'tensor') is data_coord * tensor_size + tensor_coord. The
// same order numbers a dim's blocks and a collective's members, so device r of a group holds
// block r. Axes absent from the mesh count as size 1 in sizes and products (as
// Mesh::axis_size); ranking along an absent axis is a bug.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/base/status.h"
#include "engine/mesh/mesh.h"
#include "engine/sharding/partition_spec.h"
#include "engine/tensor/shape.h"

namespace eng {

// The groups of devices that differ only in their coordinates along `axes`: a collective's
// groups, a sharded dim's blocks. Allocation-free (fixed arrays), so the runtime builds one
// per collective and per placed block every step.
class AxesGroup {
 public:
  static constexpr int kMaxAxes = 16;

  // REQUIRES every axis in the mesh, at most kMaxAxes of them.
  AxesGroup(const Mesh& mesh, std::span<const std::string> axes);
  AxesGroup(const Mesh& mesh, std::initializer_list<std::string> axes)
      : AxesGroup(mesh, std::span<const std::string>(axes.begin(), axes.size())) {}

  int64_t size() const { return group_; }  // members per group: product of the axis sizes
  // Device's rank in its group: its coordinates along the axes, major to minor.
  int64_t rank(int64_t device) const;
  // The member of rank `rank` in the group whose rank-0 member is `leader`.
  int64_t member(int64_t leader, int64_t rank) const;
  bool is_leader(int64_t device) const { return rank(device) == 0; }
  // Bit per mesh axis index in the group (which counter a collective's bytes go to).
  uint32_t axis_mask() const { return mask_; }

 private:
  int n_ = 0;                      // number of axes
  int64_t size_[kMaxAxes] = {};    // axis sizes, major to minor
  int64_t stride_[kMaxAxes] = {};  // device-id strides
  int64_t group_ = 1;
  uint32_t mask_ = 0;
};

// Device-id stride of mesh axis index `ax` (product of the sizes of the axes after it).
int64_t axis_stride(const Mesh& mesh, int ax);
// Product of the sizes of `axes` (absent axes count 1): the number of shards of a dim, the
// members of a collective group.
int64_t axes_size(const Mesh& mesh, std::span<const std::string> axes);

// Device's block of a dim of global size `global` sharded over `axes`: its local extent and
// the global index of its first element. REQUIRES `global` divisible (check_divisible).
// Allocation-free.
struct ShardBlock {
  int64_t size = 0;
  int64_t offset = 0;
};
ShardBlock shard_block(const Mesh& mesh, std::span<const std::string> axes, int64_t global,
                       int64_t device);

// The per-device shape of `global` under `spec` (entries past spec's rank are None).
Shape local_shape(const Mesh& mesh, const PartitionSpec& spec, const Shape& global);
// Its number of elements, without allocating.
int64_t local_numel(const Mesh& mesh, const PartitionSpec& spec, const Shape& global);
// Per dim, the global index of device's first element.
std::vector<int64_t> local_offset(const Mesh& mesh, const PartitionSpec& spec, const Shape& global,
                                  int64_t device);

// Ok when every dim of `global` divides by the product of the axes `spec` puts on it, else
// "<what>: dimension 1 of size 12 is not divisible by 8 (the product of axes ('fsdp',
// 'tensor') in spec P(None, ('fsdp', 'tensor')), shape (4, 12))".
Status check_divisible(const Mesh& mesh, const PartitionSpec& spec, const Shape& global,
                       std::string_view what);

// `axes` without the ones of size 1 on `mesh` (an absent axis counts as size 1).
PartitionSpec::DimAxes remove_size_one_axes(const PartitionSpec::DimAxes& axes, const Mesh& mesh);
// MaxText's remove_size_one_mesh_axis: per dim keep only axes of size != 1 (an axis absent
// from the mesh counts as size 1); an emptied dim becomes None. Partial axes are kept as is.
PartitionSpec remove_size_one_mesh_axis(const PartitionSpec& spec, const Mesh& mesh);

// One dim's entry as JAX prints it in a spec: "None", "'fsdp'", "('data', 'tensor')".
std::string dim_axes_string(const PartitionSpec::DimAxes& axes);

}  // namespace eng
