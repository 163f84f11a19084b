// engine/mesh/physical_mesh.cpp: mesh axes laid on torus dims (JAX's
// _create_device_mesh_for_nd_torus) and the scaling book's collective times.
#include "engine/mesh/physical_mesh.h"

#include <algorithm>

#include <fmt/format.h>

namespace eng {
namespace {

// Every combination of k indices out of n, in itertools.combinations order.
void combinations(int n, int k, std::vector<std::vector<int>>& out) {
  std::vector<int> idx(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) idx[static_cast<size_t>(i)] = i;
  if (k > n) return;
  while (true) {
    out.push_back(idx);
    int i = k - 1;
    while (i >= 0 && idx[static_cast<size_t>(i)] == n - k + i) --i;
    if (i < 0) return;
    ++idx[static_cast<size_t>(i)];
    for (int j = i + 1; j < k; ++j)
      idx[static_cast<size_t>(j)] = idx[static_cast<size_t>(j - 1)] + 1;
  }
}

// Fills one -1 so the product is `total`; errors as MaxText's fill_unspecified_mesh_axes.
Status fill(const std::vector<std::string>& names, std::vector<int64_t>& sizes, int64_t total,
            const char* kind, const char* target) {
  int fill_at = -1;
  int64_t known = 1;
  auto listing = [&] {
    std::vector<std::string> parts;
    for (size_t i = 0; i < names.size(); ++i)
      parts.push_back(fmt::format("{}={}", names[i], sizes[i]));
    return fmt::format("{}", fmt::join(parts, ", "));
  };
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      if (fill_at >= 0)
        return invalid_argument("mesh: only one {} axis may be -1, got '{}' and '{}'", kind,
                                names[static_cast<size_t>(fill_at)], names[i]);
      fill_at = static_cast<int>(i);
    } else if (sizes[i] < 1) {
      return invalid_argument("mesh: {} axis '{}' has size {}; sizes must be >= 1 or -1", kind,
                              names[i], sizes[i]);
    } else if (__builtin_mul_overflow(known, sizes[i], &known)) {
      return invalid_argument("mesh: the product of the {} sizes overflows at '{}'", kind,
                              names[i]);
    }
  }
  if (fill_at >= 0) {
    if (total % known != 0)
      return invalid_argument(
          "mesh: cannot fill {} axis '{}' (-1): {} {} are not divisible by {}, the product of "
          "the other axes ({})",
          kind, names[static_cast<size_t>(fill_at)], total, target, known, listing());
    sizes[static_cast<size_t>(fill_at)] = total / known;
    known = total;
  }
  if (known != total)
    return invalid_argument(
        "mesh: Number of {} {} does not match the product of the {} parallelism {} ({})", target,
        total, kind, known, listing());
  return ok_status();
}

const char* kDimNames[] = {"x", "y", "z"};

}  // namespace

std::string AxisPlacement::to_string() const {
  std::string out = fmt::format("{}: {}", axis, ici_size * dcn_size);
  if (!dims.empty()) {
    std::vector<std::string> names;
    for (int d : dims) names.push_back(kDimNames[d]);
    bool ring = std::all_of(dim_wraps.begin(), dim_wraps.end(), [](bool w) { return w; });
    out += switched ? fmt::format(" over the NVLink switch ({})", ici_size)
                    : fmt::format(" over {} ({}, {})", fmt::join(names, ","),
                                  fmt::join(dim_sizes, "x"), ring ? "ring" : "line");
  }
  if (dcn_size > 1) out += fmt::format("{} {} slices over DCN", dims.empty() ? " over" : " x",
                                       dcn_size);
  return out;
}

const AxisPlacement* PhysicalMesh::axis(std::string_view name) const {
  for (const AxisPlacement& a : axes)
    if (a.axis == name) return &a;
  return nullptr;
}

Result<PhysicalMesh> lay_out_mesh(const Topology& t, const std::vector<std::string>& names,
                                  std::vector<int64_t> ici, std::vector<int64_t> dcn,
                                  AxisType axis_type) {
  if (ici.size() != names.size() || dcn.size() != names.size())
    return invalid_argument("mesh: {} axis names but {} ici and {} dcn sizes", names.size(),
                            ici.size(), dcn.size());
  if (Status s = fill(names, ici, t.devices_per_slice, "ICI", "devices per slice"); !s.ok())
    return invalid_argument("{} on {}", s.message(), t.name);
  if (Status s = fill(names, dcn, t.num_slices, "DCN", "slices"); !s.ok())
    return invalid_argument("{} on {} x {} slices", s.message(), t.name, t.num_slices);

  // The physical mesh: TPU (x, y, z), 2D slices with z = 1, tpu7x's cores folded into z.
  std::vector<int64_t> phys = t.torus;
  std::vector<bool> wraps = t.wrap;
  const bool switched = t.chip.interconnect == Interconnect::kSwitch;
  if (!switched) {
    while (phys.size() < 3) phys.push_back(1), wraps.push_back(false);
    phys[2] *= t.chip.devices_per_chip;
  }
  const int nd = static_cast<int>(phys.size());
  std::vector<int64_t> free = phys;  // 0 once assigned
  std::vector<std::vector<int>> assignment(names.size());
  for (size_t a = names.size(); a-- > 0;) {
    if (ici[a] == 1) continue;
    bool found = false;
    for (int k = std::min(3, nd); k >= 1 && !found; --k) {
      std::vector<std::vector<int>> combos;
      combinations(nd, k, combos);
      for (const std::vector<int>& c : combos) {
        int64_t prod = 1;
        for (int d : c) prod *= free[static_cast<size_t>(d)];
        if (prod != ici[a]) continue;
        assignment[a] = c;
        for (int d : c) free[static_cast<size_t>(d)] = 0;
        found = true;
        break;
      }
    }
    if (!found) {
      std::vector<int64_t> left;
      for (int64_t f : free) left.push_back(f);
      return invalid_argument(
          "mesh: cannot lay axis '{}' of size {} on {}'s torus ({}): no set of the remaining "
          "physical dims [{}] multiplies to {} (jax's create_device_mesh; splitting physical "
          "axes, allow_split_physical_axes, is not modelled)",
          names[a], ici[a], t.name, fmt::join(phys, "x"), fmt::join(left, ", "), ici[a]);
    }
  }

  PhysicalMesh pm;
  pm.topology = t;
  std::vector<int64_t> sizes(names.size());
  for (size_t a = 0; a < names.size(); ++a) sizes[a] = ici[a] * dcn[a];
  ENG_ASSIGN_OR_RETURN(pm.mesh, Mesh::create(names, sizes, axis_type));
  const double link = t.chip.ici_bytes_per_s_per_link / t.chip.devices_per_chip;
  for (size_t a = 0; a < names.size(); ++a) {
    AxisPlacement p;
    p.axis = names[a];
    p.ici_size = ici[a];
    p.dcn_size = dcn[a];
    p.switched = switched && ici[a] > 1;
    for (int d : assignment[a]) {
      if (phys[static_cast<size_t>(d)] == 1) continue;  // a size-1 dim has no links
      p.dims.push_back(d);
      p.dim_sizes.push_back(phys[static_cast<size_t>(d)]);
      p.dim_wraps.push_back(switched || wraps[static_cast<size_t>(d)]);
      if (switched)
        p.ici_bytes_per_s += t.chip.ici_bytes_per_s_per_link;
      else
        p.ici_bytes_per_s += (wraps[static_cast<size_t>(d)] ? 2.0 : 1.0) * link;
    }
    if (dcn[a] > 1) p.dcn_bytes_per_s = t.dcn_bytes_per_s_per_device();
    pm.axes.push_back(std::move(p));
  }
  return pm;
}

CollectiveGroup group_of(const PhysicalMesh& pm, const std::vector<std::string>& axes) {
  CollectiveGroup g;
  const Topology& t = pm.topology;
  for (const std::string& name : axes) {
    const AxisPlacement* a = pm.axis(name);
    ENG_CHECK(a != nullptr, "group_of: no mesh axis '{}'", name);
    g.ici_size *= a->ici_size;
    g.dcn_size *= a->dcn_size;
    g.ici_bytes_per_s += a->ici_bytes_per_s;
    for (size_t k = 0; k < a->dims.size(); ++k)
      g.ici_hops += a->dim_wraps[k] ? a->dim_sizes[k] / 2 : a->dim_sizes[k] - 1;
    if (a->switched) g.ici_hops = std::max<int64_t>(g.ici_hops, 1), g.switched = true;
  }
  g.dcn_bytes_per_s = t.dcn_bytes_per_s_per_device();
  g.neighbour_bytes_per_s = t.chip.ici_bytes_per_s_per_link / t.chip.devices_per_chip;
  return g;
}

double collective_seconds(CollectiveKind kind, double s, const CollectiveGroup& g) {
  const double gi = static_cast<double>(g.ici_size), gd = static_cast<double>(g.dcn_size);
  if (g.size() <= 1) return 0;
  const double latency = static_cast<double>(g.ici_hops) * kHopLatencySeconds;
  auto ici = [&](double bytes_in) { return gi > 1 ? bytes_in / g.ici_bytes_per_s : 0.0; };
  auto dcn = [&](double bytes_in) { return gd > 1 ? bytes_in / g.dcn_bytes_per_s : 0.0; };
  switch (kind) {
    case CollectiveKind::kAllGather:      // DCN first (the smaller pieces), then ICI
    case CollectiveKind::kReduceScatter:  // ICI first, then DCN on the smaller pieces
      return dcn((gd - 1) * s) + ici((gi - 1) * gd * s) + latency;
    case CollectiveKind::kAllReduce:  // ICI reduce-scatter, DCN all-reduce, ICI all-gather
      return 2 * ici((gi - 1) / gi * s) + dcn(2 * (gd - 1) / gd * s / gi) + 2 * latency;
    case CollectiveKind::kAllToAll:  // a ring: all_gather / 4; a switch: each sends (G-1)/G
      return ici(g.switched ? (gi - 1) / gi * s : (gi - 1) * s / 4) + dcn((gd - 1) / gd * s) +
             latency;
    case CollectiveKind::kPermute:
      return gi > 1 ? s / g.neighbour_bytes_per_s + kHopLatencySeconds : dcn(s);
  }
  return 0;
}

}  // namespace eng
