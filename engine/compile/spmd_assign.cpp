// engine/compile/spmd_assign.cpp: argument sharding assignment (MaxText's state and input
// shardings, ZeRO-1) and the collective byte model shared by compile and runtime tests.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/compile/spmd.h"

namespace eng {

namespace {

// ValueInfo::logical ("" = None, or empty: none known) as LogicalAxes of `rank` entries.
LogicalAxes to_logical(const std::vector<std::string>& names, int rank) {
  LogicalAxes out = to_logical_axes(names);
  out.resize(rank);
  return out;
}

bool has_axis(const PartitionSpec& s, std::string_view a) {
  for (const auto& d : s.dims())
    for (const auto& x : d)
      if (x == a) return true;
  return false;
}

// Validates spec for argument `info`, naming it, the dim and the axes on failure.
Status validate_arg(const ValueInfo& info, const PartitionSpec& spec, const Mesh& mesh) {
  if (spec.rank() > info.shape.rank())
    return invalid_argument("sharding of '{}' {}: spec {} has {} entries for rank {}", info.name,
                            info.type_string(), spec.to_string(), spec.rank(),
                            info.shape.rank());
  for (int i = 0; i < spec.rank(); ++i) {
    for (const auto& a : spec.dim(i)) {
      if (!mesh.has_axis(a))
        return invalid_argument("sharding of '{}' {}: spec {} names axis '{}', which is not in {}",
                                info.name, info.type_string(), spec.to_string(), a,
                                mesh.to_string());
    }
  }
  ENG_RETURN_IF_ERROR(check_divisible(
      mesh, spec, info.shape, fmt::format("sharding of '{}' {}", info.name, info.type_string())));
  NamedSharding ns{mesh, spec};
  Status s = ns.validate(info.shape);
  if (!s.ok()) return invalid_argument("sharding of '{}': {}", info.name, s.message());
  return ok_status();
}

}  // namespace

std::string_view shard_mode_name(ShardMode m) { return m == ShardMode::kAuto ? "auto" : "explicit"; }

Result<ShardMode> parse_shard_mode(std::string_view name) {
  if (name == "auto") return ShardMode::kAuto;
  if (name == "explicit") return ShardMode::kExplicit;
  return invalid_argument("shard_mode must be 'auto' or 'explicit', got '{}'", name);
}

Status assign_argument_shardings(Program& p, const Mesh& mesh, const SpmdOptions& o) {
  // Params first: mu/nu copy them by path.
  std::map<std::string, PartitionSpec> param_spec;
  for (const Argument& a : p.args()) {
    ValueInfo& info = p.mutable_value(a.value);
    if (a.role != ArgRole::kParam) continue;
    if (!info.spec) {
      Result<PartitionSpec> s =
          logical_to_mesh(to_logical(info.logical, info.shape.rank()), mesh, o.rules);
      if (!s.ok())
        return invalid_argument("sharding of parameter '{}': {}", info.name, s.status().message());
      info.spec = *s;
    }
    ENG_RETURN_IF_ERROR(validate_arg(info, *info.spec, mesh));
    const std::string path = info.name.rfind("params/", 0) == 0 ? info.name.substr(7) : info.name;
    param_spec[path] = *info.spec;
  }
  const int64_t data = mesh.axis_size(o.axes.zero1);
  for (const Argument& a : p.args()) {
    ValueInfo& info = p.mutable_value(a.value);
    if (a.role == ArgRole::kParam || info.spec) {
      if (info.spec) ENG_RETURN_IF_ERROR(validate_arg(info, *info.spec, mesh));
      continue;
    }
    switch (a.role) {
      case ArgRole::kOptMu:
      case ArgRole::kOptNu: {
        const std::string prefix = a.role == ArgRole::kOptMu ? "opt_state/mu/" : "opt_state/nu/";
        std::string path = info.name.rfind(prefix, 0) == 0 ? info.name.substr(prefix.size()) : "";
        auto it = param_spec.find(path);
        PartitionSpec s;
        if (it != param_spec.end()) {
          s = it->second;
        } else {
          Result<PartitionSpec> r =
              logical_to_mesh(to_logical(info.logical, info.shape.rank()), mesh, o.rules);
          if (!r.ok()) return invalid_argument("sharding of '{}': {}", info.name, r.status().message());
          s = *r;
        }
        if (o.shard_optimizer_over_data && data > 1 && !has_axis(s, o.axes.zero1)) {
          // MaxText (shard_optimizer_over_data, layers/pipeline.py): `data` prepended on the first dim divisible by
          // the data size whose spec has no `tensor` (axes.zero1 and axes.zero1_skip).
          std::vector<PartitionSpec::DimAxes> dims(info.shape.rank());
          for (int i = 0; i < s.rank() && i < info.shape.rank(); ++i) dims[i] = s.dim(i);
          for (int i = 0; i < info.shape.rank(); ++i) {
            const bool tensor =
                std::find(dims[i].begin(), dims[i].end(), o.axes.zero1_skip) != dims[i].end();
            if (tensor || info.shape[i] % (axes_size(mesh, dims[i]) * data) != 0) continue;
            dims[i].insert(dims[i].begin(), o.axes.zero1);
            break;
          }
          s = PartitionSpec(dims);
        }
        info.spec = s;
        break;
      }
      case ArgRole::kStep: info.spec = PartitionSpec(); break;
      case ArgRole::kBatch: {
        // The batch array's own logical axes (input_data_logical_axes: MaxText's default,
        // or activation_batch when pipelined), else MaxText's default.
        Result<NamedSharding> r =
            info.logical.empty()
                ? get_input_data_sharding(mesh, o.rules)
                : get_input_data_sharding(mesh, o.rules, to_logical(info.logical, info.shape.rank()));
        if (!r.ok()) return invalid_argument("sharding of '{}': {}", info.name, r.status().message());
        info.spec = r->spec;
        break;
      }
      case ArgRole::kParam: break;
    }
    ENG_RETURN_IF_ERROR(validate_arg(info, *info.spec, mesh));
  }
  return ok_status();
}

Result<std::vector<NamedSharding>> argument_shardings(const Program& program, const Mesh& mesh,
                                                      const SpmdOptions& options) {
  std::vector<NamedSharding> out;
  if (mesh.num_devices() <= 1) {
    for (size_t k = 0; k < program.args().size(); ++k) out.push_back({mesh, PartitionSpec()});
    return out;
  }
  Program p = program;
  ENG_RETURN_IF_ERROR(assign_argument_shardings(p, mesh, options));
  for (const Argument& a : p.args()) out.push_back({mesh, *p.value(a.value).spec});
  return out;
}

std::string collective_axes_key(const std::vector<std::string>& mesh_axes) {
  std::vector<std::string> sorted = mesh_axes;
  std::sort(sorted.begin(), sorted.end());
  return fmt::format("{}", fmt::join(sorted, ","));
}

}  // namespace eng
