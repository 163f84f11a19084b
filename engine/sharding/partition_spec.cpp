// engine/sharding/partition_spec.cpp: printing, validation and local shapes of shardings.
#include "engine/sharding/partition_spec.h"

#include <fmt/format.h>

#include <map>

#include "engine/base/hash.h"

namespace eng {

namespace {
std::string entry_string(const PartitionSpec::DimAxes& axes) {
  if (axes.empty()) return "None";
  if (axes.size() == 1) return fmt::format("'{}'", axes[0]);
  std::vector<std::string> q;
  for (const auto& a : axes) q.push_back(fmt::format("'{}'", a));
  return fmt::format("({})", fmt::join(q, ", "));
}
}  // namespace

bool PartitionSpec::is_replicated() const {
  for (const auto& d : dims_)
    if (!d.empty()) return false;
  return partial_.empty();
}

std::string PartitionSpec::to_string() const {
  std::vector<std::string> parts;
  for (const auto& d : dims_) parts.push_back(entry_string(d));
  if (!partial_.empty()) {
    std::vector<std::string> q;
    for (const auto& a : partial_) q.push_back(fmt::format("'{}'", a));
    parts.push_back(fmt::format("unreduced={{{}}}", fmt::join(q, ", ")));
  }
  return fmt::format("P({})", fmt::join(parts, ", "));
}

uint64_t PartitionSpec::hash() const {
  uint64_t h = hash_mix(0, dims_.size());
  for (const auto& d : dims_) {
    h = hash_mix(h, d.size());
    for (const auto& a : d) h = hash_mix(h, hash_bytes(a));
  }
  for (const auto& a : partial_) h = hash_mix(h, hash_bytes("partial:" + a));
  return h;
}

Status NamedSharding::validate(const Shape& global) const {
  if (spec.rank() > global.rank())
    return invalid_argument("sharding: spec {} has {} entries but the array has rank {} (shape {})",
                            spec.to_string(), spec.rank(), global.rank(), global.to_string());
  std::map<std::string, std::string> used;  // mesh axis -> where the spec uses it
  auto use = [&](const std::string& a, const std::string& where) -> Status {
    if (!mesh.has_axis(a))
      return invalid_argument("sharding: spec {} names axis '{}' ({}), which is not in {}",
                              spec.to_string(), a, where, mesh.to_string());
    auto [it, fresh] = used.emplace(a, where);
    if (!fresh)
      return invalid_argument("sharding: spec {} uses mesh axis '{}' twice: in {} and in {}",
                              spec.to_string(), a, it->second, where);
    return ok_status();
  };
  for (int i = 0; i < spec.rank(); ++i) {
    int64_t n = 1;
    for (const auto& a : spec.dim(i)) {
      ENG_RETURN_IF_ERROR(use(a, fmt::format("dimension {}", i)));
      n *= mesh.axis_size(a);
    }
    if (global[i] % n != 0)
      return invalid_argument(
          "sharding: dimension {} of size {} is not divisible by {} (the product of axes {} in "
          "spec {}, shape {})",
          i, global[i], n, entry_string(spec.dim(i)), spec.to_string(), global.to_string());
  }
  for (const auto& a : spec.partial()) ENG_RETURN_IF_ERROR(use(a, "partial"));
  return ok_status();
}

int64_t NamedSharding::shards_along(int dim) const {
  int64_t n = 1;
  for (const auto& a : spec.dim_or_none(dim)) n *= mesh.axis_size(a);
  return n;
}

Shape NamedSharding::local_shape(const Shape& global) const {
  Shape s = global;
  for (int i = 0; i < global.rank(); ++i) s[i] = global[i] / shards_along(i);
  return s;
}

std::vector<int64_t> NamedSharding::local_offset(const Shape& global, int64_t device) const {
  std::vector<int64_t> coords = mesh.device_coords(device);
  std::vector<int64_t> off(global.rank(), 0);
  for (int i = 0; i < global.rank(); ++i) {
    int64_t block = 0;  // block index along dim i, major axis first
    for (const auto& a : spec.dim_or_none(i)) {
      int ax = mesh.axis_index(a);
      block = block * mesh.axis_sizes()[ax] + coords[ax];
    }
    off[i] = block * (global[i] / shards_along(i));
  }
  return off;
}

std::string NamedSharding::to_string() const {
  return fmt::format("NamedSharding(mesh={}, spec={})", mesh.to_string(), spec.to_string());
}

uint64_t NamedSharding::hash() const { return hash_mix(mesh.hash(), spec.hash()); }

std::string typeof_string(std::string_view dtype, const Shape& shape, const PartitionSpec* spec,
                          const Mesh* mesh) {
  std::vector<std::string> dims;
  for (int i = 0; i < shape.rank(); ++i) {
    std::vector<std::string> axes;
    if (spec && mesh)
      for (const auto& a : spec->dim_or_none(i))
        if (mesh->axis_size(a) != 1) axes.push_back(a);
    if (axes.empty())
      dims.push_back(fmt::format("{}", shape[i]));
    else if (axes.size() == 1)
      dims.push_back(fmt::format("{}@{}", shape[i], axes[0]));
    else
      dims.push_back(fmt::format("{}@({})", shape[i], fmt::join(axes, ",")));
  }
  return fmt::format("{}[{}]", dtype, fmt::join(dims, ","));
}

}  // namespace eng
