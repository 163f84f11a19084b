// engine/mesh/mesh.cpp: mesh construction (MaxText's -1 fill), coordinates and JAX's printed form.
#include "engine/mesh/mesh.h"

#include <fmt/format.h>

#include <set>

#include "engine/base/hash.h"
#include "engine/base/limits.h"

namespace eng {

std::string_view axis_type_name(AxisType t) {
  switch (t) {
    case AxisType::kAuto:
      return "Auto";
    case AxisType::kExplicit:
      return "Explicit";
    case AxisType::kManual:
      return "Manual";
  }
  return "?";
}

const std::vector<std::string>& maxtext_mesh_axes() {
  static const std::vector<std::string> axes = {"diloco",
                                                "data",
                                                "stage",
                                                "fsdp",
                                                "fsdp_transpose",
                                                "context",
                                                "context_usp_ulysses",
                                                "context_autoregressive",
                                                "tensor",
                                                "tensor_sequence",
                                                "expert",
                                                "autoregressive"};
  return axes;
}

Result<Mesh> Mesh::create(std::vector<std::string> names, std::vector<int64_t> sizes,
                          AxisType type) {
  if (names.size() != sizes.size())
    return invalid_argument("mesh: {} axis names but {} sizes", names.size(), sizes.size());
  // Sets of axes are 32-bit masks (a value's varying manual axes, engine/frontend/vma.h).
  constexpr size_t kMaxAxes = 32;
  if (names.size() > kMaxAxes)
    return invalid_argument("mesh: {} axes, more than the {} a mesh may have", names.size(), kMaxAxes);
  std::set<std::string> seen;
  int64_t devices = 1;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) return invalid_argument("mesh: axis {} has an empty name", i);
    if (!seen.insert(names[i]).second)
      return invalid_argument("mesh: axis '{}' appears more than once", names[i]);
    if (sizes[i] < 1)
      return invalid_argument("mesh: axis '{}' has size {}; sizes must be >= 1", names[i],
                              sizes[i]);
    if (__builtin_mul_overflow(devices, sizes[i], &devices))
      return invalid_argument("mesh: the product of the axis sizes overflows at '{}' (size {})",
                              names[i], sizes[i]);
  }
  if (devices > kMaxDevices)
    return invalid_argument("mesh: {} devices, more than the {} this engine simulates", devices,
                            kMaxDevices);
  Mesh m;
  m.axis_types_.assign(names.size(), type);
  m.axis_names_ = std::move(names);
  m.axis_sizes_ = std::move(sizes);
  return m;
}

Result<Mesh> Mesh::create(std::vector<std::string> names, std::vector<int64_t> sizes,
                          std::vector<AxisType> types) {
  if (types.size() != names.size())
    return invalid_argument("mesh: {} axis names but {} axis types", names.size(), types.size());
  ENG_ASSIGN_OR_RETURN(Mesh m, create(std::move(names), std::move(sizes), AxisType::kAuto));
  m.axis_types_ = std::move(types);
  return m;
}

bool Mesh::all_axes(AxisType t) const {
  if (axis_types_.empty()) return false;
  for (AxisType a : axis_types_)
    if (a != t) return false;
  return true;
}

bool Mesh::any_axis(AxisType t) const {
  for (AxisType a : axis_types_)
    if (a == t) return true;
  return false;
}

std::vector<std::string> Mesh::axes_of_type(AxisType t) const {
  std::vector<std::string> out;
  for (int i = 0; i < num_axes(); ++i)
    if (axis_types_[i] == t) out.push_back(axis_names_[i]);
  return out;
}

Mesh Mesh::with_axis_types(std::vector<AxisType> types) const {
  Mesh m = *this;
  if (types.size() == axis_types_.size()) m.axis_types_ = std::move(types);
  return m;
}

Result<Mesh> Mesh::from_parallelism(std::vector<std::string> names, std::vector<int64_t> sizes,
                                    int64_t num_devices, AxisType type) {
  if (num_devices < 1)
    return invalid_argument("mesh: num_devices must be >= 1, got {}", num_devices);
  if (names.size() != sizes.size())
    return invalid_argument("mesh: {} axis names but {} sizes", names.size(), sizes.size());
  int fill = -1;
  int64_t known = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      if (fill >= 0)
        return invalid_argument("mesh: only one axis may be -1, got '{}' and '{}'", names[fill],
                                names[i]);
      fill = static_cast<int>(i);
    } else if (sizes[i] < 1) {
      return invalid_argument("mesh: axis '{}' has size {}; sizes must be >= 1 or -1", names[i],
                              sizes[i]);
    } else if (__builtin_mul_overflow(known, sizes[i], &known)) {
      return invalid_argument("mesh: the product of the axis sizes overflows at '{}' (size {})",
                              names[i], sizes[i]);
    }
  }
  auto listing = [&] {  // "data=2, fsdp=-1": the request, for error messages
    std::vector<std::string> parts;
    for (size_t i = 0; i < names.size(); ++i)
      parts.push_back(fmt::format("{}={}", names[i], sizes[i]));
    return fmt::format("{}", fmt::join(parts, ", "));
  };
  if (fill >= 0) {
    if (num_devices % known != 0)
      return invalid_argument(
          "mesh: cannot fill '{}' (-1): {} devices are not divisible by {}, the product of the "
          "other axes ({})",
          names[fill], num_devices, known, listing());
    sizes[fill] = num_devices / known;
    known = num_devices;
  }
  if (known != num_devices)
    return invalid_argument(
        "mesh: Number of devices per slice {} does not match the product of the ICI "
        "parallelism {} ({})",
        num_devices, known, listing());
  return create(std::move(names), std::move(sizes), type);
}

Result<Mesh> Mesh::from_maxtext(const std::vector<std::pair<std::string, int64_t>>& ici,
                                int64_t num_devices, AxisType type) {
  const std::vector<std::string>& names = maxtext_mesh_axes();
  std::vector<int64_t> sizes(names.size(), 1);
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == "fsdp") sizes[i] = -1;  // ici_fsdp_parallelism: -1 (base.yml)
  std::set<std::string> given;
  for (const auto& [axis, size] : ici) {
    size_t i = 0;
    while (i < names.size() && names[i] != axis) ++i;
    if (i == names.size())
      return invalid_argument("mesh: unknown MaxText mesh axis '{}'; the axes are {}", axis,
                              fmt::join(names, ", "));
    if (!given.insert(axis).second)
      return invalid_argument("mesh: axis '{}' is given more than once", axis);
    sizes[i] = size;
  }
  return from_parallelism(names, std::move(sizes), num_devices, type);
}

int64_t Mesh::num_devices() const {
  int64_t n = 1;
  for (int64_t s : axis_sizes_) n *= s;
  return n;
}

int Mesh::axis_index(std::string_view name) const {
  for (size_t i = 0; i < axis_names_.size(); ++i)
    if (axis_names_[i] == name) return static_cast<int>(i);
  return -1;
}

int64_t Mesh::axis_size(std::string_view name) const {
  int i = axis_index(name);
  return i < 0 ? 1 : axis_sizes_[i];
}

std::vector<int64_t> Mesh::device_coords(int64_t device) const {
  std::vector<int64_t> c(axis_sizes_.size());
  for (int i = num_axes() - 1; i >= 0; --i) {
    c[i] = device % axis_sizes_[i];
    device /= axis_sizes_[i];
  }
  return c;
}

int64_t Mesh::device_at(std::span<const int64_t> coords) const {
  int64_t d = 0;
  for (int i = 0; i < num_axes(); ++i) d = d * axis_sizes_[i] + coords[i];
  return d;
}

namespace {
// Python's tuple repr: "(a, b)", "(a,)", "()".
std::string py_tuple(const std::vector<std::string>& items) {
  if (items.size() == 1) return fmt::format("({},)", items[0]);
  return fmt::format("({})", fmt::join(items, ", "));
}
}  // namespace

std::string Mesh::to_string() const {
  if (axis_names_.empty()) return "Mesh()";
  std::vector<std::string> parts, types;
  for (int i = 0; i < num_axes(); ++i) {
    parts.push_back(fmt::format("'{}': {}", axis_names_[i], axis_sizes_[i]));
    types.push_back(std::string(axis_type_name(axis_types_[i])));
  }
  return fmt::format("Mesh({}, axis_types={})", fmt::join(parts, ", "), py_tuple(types));
}

std::string Mesh::repr() const {
  if (axis_names_.empty()) return "Mesh(axis_sizes=(), axis_names=())";
  std::vector<std::string> sizes, names, types;
  for (int i = 0; i < num_axes(); ++i) {
    sizes.push_back(fmt::format("{}", axis_sizes_[i]));
    names.push_back(fmt::format("'{}'", axis_names_[i]));
    types.push_back(std::string(axis_type_name(axis_types_[i])));
  }
  return fmt::format("Mesh(axis_sizes={}, axis_names={}, axis_types={})", py_tuple(sizes),
                     py_tuple(names), py_tuple(types));
}

std::string Mesh::nontrivial_axes_string() const {
  std::vector<std::string> parts;
  for (int i = 0; i < num_axes(); ++i)
    if (axis_sizes_[i] != 1) parts.push_back(fmt::format("{}: {}", axis_names_[i], axis_sizes_[i]));
  return fmt::format("{}", fmt::join(parts, ", "));
}

uint64_t Mesh::hash() const {
  // One type for every axis hashes as the type (the hashes of meshes before per-axis types);
  // mixed types as 16 mixed with each axis's type and position.
  uint64_t types = axis_types_.empty() ? 0 : static_cast<uint64_t>(axis_types_[0]);
  for (AxisType t : axis_types_)
    if (t != axis_types_[0]) types = 16;
  if (types == 16)
    for (size_t i = 0; i < axis_types_.size(); ++i)
      types = hash_mix(types, static_cast<uint64_t>(axis_types_[i]) + 4 * i);
  uint64_t h = hash_mix(0, types);
  for (int i = 0; i < num_axes(); ++i) {
    h = hash_mix(h, hash_bytes(axis_names_[i]));
    h = hash_mix(h, static_cast<uint64_t>(axis_sizes_[i]));
  }
  return h;
}

}  // namespace eng
