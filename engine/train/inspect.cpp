// engine/train/inspect.cpp: the sharding table of a trainer's state, its printed forms, the
// audit and store snapshots.
#include "engine/train/inspect.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/compile/spmd.h"
#include "engine/sharding/logical_rules.h"
#include "engine/train/train_step.h"
#include "engine/train/trainer.h"

namespace eng {

namespace {

std::string quoted(const std::string& s) { return fmt::format("'{}'", s); }

// Python's tuple form of a list of entries: ('a', None), ('a',), ().
std::string tuple_string(const std::vector<std::string>& parts) {
  if (parts.size() == 1) return fmt::format("({},)", parts[0]);
  return fmt::format("({})", fmt::join(parts, ", "));
}

// The spec padded (or cut) to `rank` entries, size-1 axes dropped: one entry per dim.
PartitionSpec display_spec(const PartitionSpec& spec, const Mesh& mesh, int rank) {
  PartitionSpec s = remove_size_one_mesh_axis(spec, mesh);
  std::vector<PartitionSpec::DimAxes> dims;
  for (int i = 0; i < rank; ++i) dims.push_back(s.dim_or_none(i));
  return PartitionSpec(std::move(dims), s.partial());
}

std::string shape_tuple(const Shape& s) {
  std::vector<std::string> parts;
  for (int64_t d : s.dims()) parts.push_back(std::to_string(d));
  return tuple_string(parts);
}

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double b = static_cast<double>(bytes);
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.{}f} {}", b, u == 0 ? 0 : 1, units[u]);
}

}  // namespace

std::string ShardingRow::logical_string() const {
  return logical.empty() ? "None" : logical_axes_string(logical);
}

std::string ShardingRow::physical_string() const {
  std::vector<std::string> parts;
  for (const PartitionSpec::DimAxes& d : spec.dims()) {
    if (d.empty()) parts.push_back("None");
    else if (d.size() == 1) parts.push_back(quoted(d[0]));
    else {
      std::vector<std::string> q;
      for (const std::string& a : d) q.push_back(quoted(a));
      parts.push_back(fmt::format("({})", fmt::join(q, ", ")));
    }
  }
  return tuple_string(parts);
}

const ShardingRow* ShardingTable::find(std::string_view path) const {
  for (const ShardingRow& r : rows)
    if (r.path == path) return &r;
  return nullptr;
}

int64_t ShardingTable::bytes_per_device() const {
  int64_t total = 0;
  for (const ShardingRow& r : rows) total += r.bytes_per_device;
  return total;
}

std::string ShardingTable::debug_string() const {
  std::string axes = mesh.nontrivial_axes_string();
  std::string out = (axes.empty() ? "(no non-trivial axes)" : axes) + "\n";
  for (const ShardingRow& r : rows) {
    out += fmt::format(" {}\n    Shape:     {}\n    Logical:   {}\n    Physical:  {}\n", r.path,
                       r.type, r.logical_string(), r.physical_string());
  }
  return out;
}

std::string ShardingTable::to_string() const {
  const std::vector<std::string> head = {"path", "type", "logical", "spec", "local", "bytes/device"};
  std::vector<std::vector<std::string>> cells;
  for (const ShardingRow& r : rows)
    cells.push_back({r.path, r.type, r.logical_string(), r.spec.to_string(),
                     shape_tuple(r.local_shape), human_bytes(r.bytes_per_device)});
  std::vector<size_t> width(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string s;
    for (size_t c = 0; c < row.size(); ++c) {
      // Bytes right-aligned (they compare by magnitude); the rest left-aligned.
      if (c + 1 == row.size()) s += fmt::format("{:>{}}", row[c], width[c]);
      else s += fmt::format("{:<{}}  ", row[c], width[c]);
    }
    return s + "\n";
  };
  std::string axes = mesh.nontrivial_axes_string();
  std::string out = fmt::format("{} ({} devices)\n", axes.empty() ? "one device" : axes,
                                mesh.num_devices());
  out += line(head);
  for (const auto& row : cells) out += line(row);
  out += fmt::format("{} arrays, {} per device\n", rows.size(), human_bytes(bytes_per_device()));
  return out;
}

Result<ShardingTable> sharding_table(const Program& program, const Mesh& mesh,
                                     const std::vector<NamedSharding>& shardings) {
  const auto& args = program.args();
  if (shardings.size() != args.size())
    return invalid_argument("sharding_table: {} shardings for {} arguments", shardings.size(),
                            args.size());
  ShardingTable t;
  t.mesh = mesh;
  for (size_t i = 0; i < args.size(); ++i) {
    const ValueInfo& v = program.value(args[i].value);
    ENG_RETURN_IF_ERROR(shardings[i].validate(v.shape));
    ShardingRow r;
    r.path = v.name;
    r.role = std::string(arg_role_name(args[i].role));
    r.dtype = v.dtype;
    r.shape = v.shape;
    r.logical = to_logical_axes(v.logical);
    r.spec = display_spec(shardings[i].spec, mesh, v.shape.rank());
    const NamedSharding placed{mesh, r.spec};
    r.local_shape = placed.local_shape(v.shape);
    r.bytes_per_device = r.local_shape.numel() * dtype_size(v.dtype);
    r.type = typeof_string(dtype_name(v.dtype), v.shape, &r.spec, &mesh);
    t.rows.push_back(std::move(r));
  }
  return t;
}

Result<ShardingTable> trainer_shardings(const Trainer& trainer) {
  ENG_ASSIGN_OR_RETURN(CompileOptions opts, compile_options_from_config(trainer.raw_config()));
  ENG_ASSIGN_OR_RETURN(std::vector<NamedSharding> s,
                       argument_shardings(trainer.program(), trainer.mesh(), opts));
  return sharding_table(trainer.program(), trainer.mesh(), s);
}

std::vector<ParamShardingInfo> param_sharding_infos(const ShardingTable& table) {
  std::vector<ParamShardingInfo> out;
  for (const ShardingRow& r : table.rows)
    if (r.role == arg_role_name(ArgRole::kParam)) out.push_back({r.path, r.shape, r.spec});
  return out;
}

Result<ReplicationReport> audit_trainer(const Trainer& trainer, double tolerance) {
  if (tolerance < 0 || tolerance > 1)
    return invalid_argument("audit: sharding_tolerance must be in [0, 1], got {}", tolerance);
  ENG_ASSIGN_OR_RETURN(ShardingTable t, trainer_shardings(trainer));
  return audit_replicated(param_sharding_infos(t), t.mesh, tolerance);
}

Result<int64_t> record_sharding_snapshot(MetricsStore& store, const std::string& run_id,
                                         std::optional<int64_t> step, const ShardingTable& table) {
  MeshRow m;
  m.run_id = run_id;
  m.axis_names = table.mesh.axis_names();
  m.axis_sizes = table.mesh.axis_sizes();
  for (AxisType t : table.mesh.axis_types()) m.axis_types.push_back(std::string(axis_type_name(t)));
  m.repr = table.mesh.to_string();
  ENG_ASSIGN_OR_RETURN(int64_t mesh_id, store.record_mesh(m));
  std::vector<TensorShardingRow> rows;
  for (const ShardingRow& r : table.rows) {
    TensorShardingRow s;
    s.path = r.path;
    s.dtype = std::string(dtype_name(r.dtype));
    s.shape = r.shape.dims();
    s.logical_axes = r.logical.empty() ? "" : r.logical_string();
    s.spec = r.spec.to_string();
    s.type = r.type;
    s.bytes_per_device = r.bytes_per_device;
    rows.push_back(std::move(s));
  }
  return store.record_tensor_shardings(run_id, step, mesh_id, rows);
}

namespace {

// "#51" (1-based, as base.yml's rows are numbered) and the rule itself.
std::string rule_ref(const LogicalAxisRules& rules, int k) {
  return fmt::format("#{} {}", k + 1, rules[k].to_string());
}

// The rules column of a row: "('embed' #51, 'mlp' #48)"; "None" dims and names no rule
// settled print as such ("'foo' -").
std::string fired_column(const std::vector<DimResolution>& dims) {
  if (dims.empty()) return "-";
  std::vector<std::string> parts;
  for (const DimResolution& d : dims) {
    if (!d.logical) parts.push_back("None");
    else if (d.fired < 0) parts.push_back(fmt::format("'{}' -", *d.logical));
    else parts.push_back(fmt::format("'{}' #{}", *d.logical, d.fired + 1));
  }
  return parts.size() == 1 ? fmt::format("({},)", parts[0])
                           : fmt::format("({})", fmt::join(parts, ", "));
}

// The show_skipped lines under a row: per named dim, the rule that fired (what it assigned and
// what size-1 removal left) and every rule of that name that did not, with the reason.
std::string skipped_lines(const std::vector<DimResolution>& dims, const LogicalAxisRules& rules) {
  std::string out;
  for (size_t i = 0; i < dims.size(); ++i) {
    const DimResolution& d = dims[i];
    if (!d.logical) continue;
    if (d.fired < 0)
      out += fmt::format("    dim {} '{}': no rule fired: None\n", i, *d.logical);
    else
      out += fmt::format("    dim {} '{}': fired {} -> {}\n", i, *d.logical,
                         rule_ref(rules, d.fired), dim_axes_string(d.axes));
    for (const SkippedRule& s : d.skipped)
      out += fmt::format("      skipped {}: {}\n", rule_ref(rules, s.rule), s.reason);
  }
  return out;
}

}  // namespace

ShardingTableView ShardingTableView::explained(ShardingTable table, const LogicalAxisRules& rules,
                                               bool show_skipped) {
  ShardingTableView v{std::move(table), {}, rules, show_skipped};
  for (const ShardingRow& r : v.table.rows) {
    Result<std::vector<DimResolution>> why = explain_logical_to_mesh(r.logical, v.table.mesh, rules);
    v.why.push_back(why.ok() ? std::move(*why) : std::vector<DimResolution>{});
  }
  return v;
}

std::string ShardingTableView::to_string() const {
  const std::string base = table.to_string();
  if (why.empty()) return base;
  std::vector<std::string> lines;
  for (size_t at = 0; at < base.size();) {
    const size_t nl = base.find('\n', at);
    lines.push_back(base.substr(at, nl - at));
    at = nl == std::string::npos ? base.size() : nl + 1;
  }
  std::string out;
  for (size_t k = 0; k < lines.size(); ++k) {
    const size_t row = k - 2;  // lines: mesh, header, rows..., total
    if (k == 1) out += lines[k] + "  rules\n";
    else if (k >= 2 && row < why.size()) {
      out += lines[k] + "  " + fired_column(why[row]) + "\n";
      if (show_skipped) out += skipped_lines(why[row], rules);
    } else {
      out += lines[k] + "\n";
    }
  }
  return out;
}

}  // namespace eng
