// engine/mesh/mesh.h: a named device mesh, as in JAX (jax.sharding.Mesh) and MaxText.
//
//   Result<Mesh> m = Mesh::create({"data", "fsdp", "tensor"}, {2, 2, 2}, AxisType::kExplicit);
//   m->to_string()  ->  "Mesh('data': 2, 'fsdp': 2, 'tensor': 2, axis_types=(Explicit, Explicit,
//   Explicit))"
//
// Devices are numbered 0..N-1 in row-major order over the axes (first axis most major),
// like mesh_utils.create_device_mesh on CPU. Axes of size 1 are kept (MaxText keeps all 12).
// Each axis has its own AxisType, as JAX's (jax.make_mesh(..., axis_types=(Auto, Explicit))):
// sharding-in-types names Explicit axes only, and the partitioner's explicit-mode errors are
// about Explicit axes (engine/compile/spmd.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/base/status.h"

namespace eng {

enum class AxisType : uint8_t { kAuto, kExplicit, kManual };
std::string_view axis_type_name(AxisType t);  // "Auto", "Explicit", "Manual"

// MaxText's mesh_axes, in MaxText's order (MaxText's configs/base.yml mesh_axes).
const std::vector<std::string>& maxtext_mesh_axes();

class Mesh {
 public:
  Mesh() = default;  // the empty mesh: one device, no axes
  // Validates: names unique and non-empty, sizes >= 1.
  static Result<Mesh> create(std::vector<std::string> axis_names, std::vector<int64_t> axis_sizes,
                             AxisType axis_type = AxisType::kAuto);
  // The same with one type per axis (their count must equal the names').
  static Result<Mesh> create(std::vector<std::string> axis_names, std::vector<int64_t> axis_sizes,
                             std::vector<AxisType> axis_types);
  // MaxText's fill_unspecified_mesh_axes + create_device_mesh: sizes in axis order, at most
  // one -1 filled so the product equals num_devices; errors name both numbers.
  static Result<Mesh> from_parallelism(std::vector<std::string> axis_names,
                                       std::vector<int64_t> sizes, int64_t num_devices,
                                       AxisType axis_type = AxisType::kAuto);
  // MaxText's get_mesh_from_config on one slice: all 12 maxtext_mesh_axes() in order, sizes
  // from `ici` (axis name -> ici_<axis>_parallelism), MaxText's defaults for the rest
  // (fsdp -1, others 1), then from_parallelism. Unknown axis names are an error.
  static Result<Mesh> from_maxtext(const std::vector<std::pair<std::string, int64_t>>& ici,
                                   int64_t num_devices, AxisType axis_type = AxisType::kAuto);

  int num_axes() const { return static_cast<int>(axis_names_.size()); }
  const std::vector<std::string>& axis_names() const { return axis_names_; }
  const std::vector<int64_t>& axis_sizes() const { return axis_sizes_; }
  const std::vector<AxisType>& axis_types() const { return axis_types_; }
  AxisType axis_type(int axis) const { return axis_types_[static_cast<size_t>(axis)]; }
  // Whether the mesh has axes and every one is of type t (the empty mesh: false).
  bool all_axes(AxisType t) const;
  bool any_axis(AxisType t) const;
  // The names of the axes of type t, in mesh order.
  std::vector<std::string> axes_of_type(AxisType t) const;
  // This mesh with other axis types (one per axis), as jax.sharding's auto_axes /
  // explicit_axes see it.
  Mesh with_axis_types(std::vector<AxisType> types) const;
  int64_t num_devices() const;
  int axis_index(std::string_view name) const;  // -1 if absent
  bool has_axis(std::string_view name) const { return axis_index(name) >= 0; }
  int64_t axis_size(
      std::string_view name) const;  // 1 if absent (as MaxText's mesh.shape.get(a, 1))
  // Coordinates of device d along every axis, and back.
  std::vector<int64_t> device_coords(int64_t device) const;
  int64_t device_at(std::span<const int64_t> coords) const;

  // JAX's str: "Mesh('data': 2, 'fsdp': 4, axis_types=(Auto, Auto))"; one axis prints a
  // Python 1-tuple "axis_types=(Auto,)"; the empty mesh prints "Mesh()".
  std::string to_string() const;
  // JAX's repr: "Mesh(axis_sizes=(2, 4), axis_names=('data', 'fsdp'), axis_types=(Auto, Auto))".
  std::string repr() const;
  // Non-trivial axes as MaxText's debug_sharding lists them: "fsdp: 4, tensor: 2".
  std::string nontrivial_axes_string() const;
  bool operator==(const Mesh&) const = default;
  uint64_t hash() const;

 private:
  std::vector<std::string> axis_names_;   // major to minor
  std::vector<int64_t> axis_sizes_;       // one per name, each >= 1
  std::vector<AxisType> axis_types_;      // one per name
};

}  // namespace eng
