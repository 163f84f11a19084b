// engine/sharding/partition_spec.cpp: printing, validation and local shapes of shardings.
#include "engine/sharding/partition_spec.h"

#include <fmt/format.h>

#include <map>

#include "engine/base/hash.h"
#include "engine/sharding/shard_geometry.h"

namespace eng {

bool PartitionSpec::is_replicated() const {
  for (const auto& d : dims_)
    if (!d.empty()) return false;
  return partial_.empty();
}

std::string PartitionSpec::to_string() const {
  std::vector<std::string> parts;
  for (const auto& d : dims_) parts.push_back(dim_axes_string(d));
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
  for (int i = 0; i < spec.rank(); ++i)
    for (const auto& a : spec.dim(i)) ENG_RETURN_IF_ERROR(use(a, fmt::format("dimension {}", i)));
  for (const auto& a : spec.partial()) ENG_RETURN_IF_ERROR(use(a, "partial"));
  return check_divisible(mesh, spec, global, "sharding");
}

int64_t NamedSharding::shards_along(int dim) const {
  return axes_size(mesh, spec.dim_or_none(dim));
}

Shape NamedSharding::local_shape(const Shape& global) const {
  return eng::local_shape(mesh, spec, global);
}

std::vector<int64_t> NamedSharding::local_offset(const Shape& global, int64_t device) const {
  return eng::local_offset(mesh, spec, global, device);
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
    if (spec && mesh) axes = remove_size_one_axes(spec->dim_or_none(i), *mesh);
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
