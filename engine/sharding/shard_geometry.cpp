// engine/sharding/shard_geometry.cpp: ranks along mesh axes, blocks, local shapes,
// divisibility and size-1 axis removal (the one implementation each).
#include "engine/sharding/shard_geometry.h"

#include <fmt/format.h>

#include "engine/base/check.h"

namespace eng {

AxesGroup::AxesGroup(const Mesh& mesh, std::span<const std::string> axes) {
  ENG_CHECK(static_cast<int>(axes.size()) <= kMaxAxes, "axes group over {} axes (at most {})",
            axes.size(), kMaxAxes);
  for (const auto& a : axes) {
    const int ax = mesh.axis_index(a);
    ENG_CHECK(ax >= 0, "axes group: axis '{}' not in {}", a, mesh.to_string());
    size_[n_] = mesh.axis_sizes()[ax];
    stride_[n_] = axis_stride(mesh, ax);
    group_ *= size_[n_];
    mask_ |= 1u << ax;
    ++n_;
  }
}

int64_t AxesGroup::rank(int64_t device) const {
  int64_t r = 0;
  for (int k = 0; k < n_; ++k) r = r * size_[k] + (device / stride_[k]) % size_[k];
  return r;
}

int64_t AxesGroup::member(int64_t leader, int64_t rank) const {
  int64_t d = leader;
  for (int k = n_ - 1; k >= 0; --k) {
    d += (rank % size_[k]) * stride_[k];
    rank /= size_[k];
  }
  return d;
}

int64_t axis_stride(const Mesh& mesh, int ax) {
  int64_t stride = 1;
  for (int k = ax + 1; k < mesh.num_axes(); ++k) stride *= mesh.axis_sizes()[k];
  return stride;
}

int64_t axes_size(const Mesh& mesh, std::span<const std::string> axes) {
  int64_t n = 1;
  for (const auto& a : axes) n *= mesh.axis_size(a);
  return n;
}

ShardBlock shard_block(const Mesh& mesh, std::span<const std::string> axes, int64_t global,
                       int64_t device) {
  if (axes.empty()) return {global, 0};
  const AxesGroup g(mesh, axes);
  const int64_t size = global / g.size();
  return {size, g.rank(device) * size};
}

namespace {
std::span<const std::string> dim_axes(const PartitionSpec& spec, int i) {
  if (i >= spec.rank()) return {};
  return spec.dim(i);
}
}  // namespace

Shape local_shape(const Mesh& mesh, const PartitionSpec& spec, const Shape& global) {
  Shape s = global;
  for (int i = 0; i < global.rank(); ++i) s[i] = global[i] / axes_size(mesh, dim_axes(spec, i));
  return s;
}

int64_t local_numel(const Mesh& mesh, const PartitionSpec& spec, const Shape& global) {
  int64_t n = 1;
  for (int i = 0; i < global.rank(); ++i) n *= global[i] / axes_size(mesh, dim_axes(spec, i));
  return n;
}

std::vector<int64_t> local_offset(const Mesh& mesh, const PartitionSpec& spec, const Shape& global,
                                  int64_t device) {
  std::vector<int64_t> off(global.rank(), 0);
  for (int i = 0; i < global.rank(); ++i)
    off[i] = shard_block(mesh, dim_axes(spec, i), global[i], device).offset;
  return off;
}

Status check_divisible(const Mesh& mesh, const PartitionSpec& spec, const Shape& global,
                       std::string_view what) {
  for (int i = 0; i < global.rank(); ++i) {
    const int64_t n = axes_size(mesh, dim_axes(spec, i));
    if (global[i] % n != 0)
      return invalid_argument(
          "{}: dimension {} of size {} is not divisible by {} (the product of axes {} in spec "
          "{}, shape {})",
          what, i, global[i], n, dim_axes_string(spec.dim_or_none(i)), spec.to_string(),
          global.to_string());
  }
  return ok_status();
}

PartitionSpec::DimAxes remove_size_one_axes(const PartitionSpec::DimAxes& axes, const Mesh& mesh) {
  PartitionSpec::DimAxes kept;
  for (const auto& a : axes)
    if (mesh.axis_size(a) != 1) kept.push_back(a);
  return kept;
}

PartitionSpec remove_size_one_mesh_axis(const PartitionSpec& spec, const Mesh& mesh) {
  std::vector<PartitionSpec::DimAxes> dims;
  for (const auto& d : spec.dims()) dims.push_back(remove_size_one_axes(d, mesh));
  return PartitionSpec(std::move(dims), spec.partial());
}

std::string dim_axes_string(const PartitionSpec::DimAxes& axes) {
  if (axes.empty()) return "None";
  if (axes.size() == 1) return fmt::format("'{}'", axes[0]);
  std::vector<std::string> q;
  for (const auto& a : axes) q.push_back(fmt::format("'{}'", a));
  return fmt::format("({})", fmt::join(q, ", "));
}

}  // namespace eng
