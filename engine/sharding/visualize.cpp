// engine/sharding/visualize.cpp: the device-grid drawing and MaxText's replicated-parameter audit.
#include "engine/sharding/visualize.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "engine/sharding/shard_geometry.h"

namespace eng {

namespace {

constexpr int kMaxWidth = 80;   // every line fits (JAX's max_width)
constexpr int kMinCell = 9;     // preferred minimum cell width (JAX's min_width)
constexpr int kNarrowCell = 5;  // below this, drop columns instead of shrinking further
constexpr int kMaxRows = 32;    // block rows drawn at most

struct Rgb {
  int r, g, b;
};
// matplotlib's tab20b, the colour map JAX uses.
constexpr Rgb kTab20b[20] = {
    {0x39, 0x3b, 0x79}, {0x52, 0x54, 0xa3}, {0x6b, 0x6e, 0xcf}, {0x9c, 0x9e, 0xde},
    {0x63, 0x79, 0x39}, {0x8c, 0xa2, 0x52}, {0xb5, 0xcf, 0x6b}, {0xce, 0xdb, 0x9c},
    {0x8c, 0x6d, 0x31}, {0xbd, 0x9e, 0x39}, {0xe7, 0xba, 0x52}, {0xe7, 0xcb, 0x94},
    {0x84, 0x3c, 0x39}, {0xad, 0x49, 0x4a}, {0xd6, 0x61, 0x6b}, {0xe7, 0x96, 0x9c},
    {0x7b, 0x41, 0x73}, {0xa5, 0x51, 0x94}, {0xce, 0x6d, 0xbd}, {0xde, 0x9e, 0xd6}};

std::string repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Which dims to draw (0, 1 or 2 of them); see the header for the default.
Result<std::vector<int>> shown_dims(const Shape& shape, const NamedSharding& s, int dim0,
                                    int dim1) {
  const int rank = shape.rank();
  auto in_range = [&](int d) -> Status {
    if (d >= rank)
      return invalid_argument("visualize_sharding: dim {} is out of range for shape {} (rank {})",
                              d, shape.to_string(), rank);
    return ok_status();
  };
  if (dim0 >= 0 || dim1 >= 0) {
    if (dim0 < 0) return invalid_argument("visualize_sharding: dim1 = {} given without dim0", dim1);
    ENG_RETURN_IF_ERROR(in_range(dim0));
    if (dim1 < 0) return std::vector<int>{dim0};
    ENG_RETURN_IF_ERROR(in_range(dim1));
    if (dim0 == dim1)
      return invalid_argument("visualize_sharding: dim0 and dim1 are both {}", dim0);
    return std::vector<int>{dim0, dim1};
  }
  std::vector<int> dims;
  if (rank <= 2) {
    for (int d = 0; d < rank; ++d) dims.push_back(d);
    return dims;
  }
  for (int d = 0; d < rank && dims.size() < 2; ++d)
    if (s.shards_along(d) > 1) dims.push_back(d);
  for (int d = rank - 1; d >= 0 && dims.size() < 2; --d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) dims.push_back(d);
  std::sort(dims.begin(), dims.end());
  return dims;
}

// Index of a device's block along `dim`: its rank along the dim's axes (major axis first).
int64_t block_index(const NamedSharding& s, int dim, int64_t device) {
  return AxesGroup(s.mesh, s.spec.dim_or_none(dim)).rank(device);
}

// "CPU 0,1,2" broken into lines of at most `width` characters, after the space or a comma.
std::vector<std::string> wrap_label(const std::vector<int64_t>& devices, int width) {
  std::vector<std::string> pieces = {"CPU "};
  for (size_t i = 0; i < devices.size(); ++i)
    pieces.push_back(fmt::format("{}{}", devices[i], i + 1 < devices.size() ? "," : ""));
  std::vector<std::string> lines;
  std::string line;
  auto flush = [&] {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    if (!line.empty()) lines.push_back(line);
    line.clear();
  };
  for (const auto& p : pieces) {
    if (static_cast<int>(line.size() + p.size()) > width) flush();
    line += p;
    while (static_cast<int>(line.size()) > width) {  // one piece wider than the cell
      lines.push_back(line.substr(0, width));
      line = line.substr(width);
    }
  }
  flush();
  return lines;
}

std::string label_of(const std::vector<int64_t>& devices) {
  return fmt::format("CPU {}", fmt::join(devices, ","));
}

// The block grid of the shown dims: `rows` blocks down (dims[0] of a 2-D view, else 1),
// `cols` across (the last shown dim, else 1); cells[r * cols + c] lists the devices holding
// block (r, c), ascending.
struct BlockGrid {
  int64_t rows = 1;
  int64_t cols = 1;
  std::vector<std::vector<int64_t>> cells;
};

BlockGrid block_grid(const NamedSharding& s, const std::vector<int>& dims) {
  const bool grid = dims.size() == 2;
  BlockGrid g;
  g.rows = grid ? s.shards_along(dims[0]) : 1;
  g.cols = dims.empty() ? 1 : s.shards_along(dims.back());
  g.cells.resize(g.rows * g.cols);
  for (int64_t d = 0; d < s.mesh.num_devices(); ++d) {
    int64_t r = grid ? block_index(s, dims[0], d) : 0;
    int64_t c = dims.empty() ? 0 : block_index(s, dims.back(), d);
    g.cells[r * g.cols + c].push_back(d);
  }
  return g;
}

// The header lines: which dims are shown (unless it is the natural view of a rank <= 2
// shape), and every hidden dim that is sharded too.
std::vector<std::string> dims_notes(const Shape& shape, const NamedSharding& s,
                                    const std::vector<int>& dims) {
  std::vector<std::string> out;
  bool natural = shape.rank() <= 2 && static_cast<int>(dims.size()) == shape.rank() &&
                 (dims.size() < 2 || dims[0] < dims[1]);
  if (!natural) {
    if (dims.size() == 2)
      out.push_back(fmt::format("showing dims {} (down) and {} (across) of shape {}", dims[0],
                                dims[1], shape.to_string()));
    else
      out.push_back(fmt::format("showing dim {} of shape {}", dims[0], shape.to_string()));
  }
  for (int d = 0; d < shape.rank(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end() && s.shards_along(d) > 1)
      out.push_back(fmt::format(
          "dim {} is sharded too ({} ways): each cell lists the devices of all its blocks", d,
          s.shards_along(d)));
  return out;
}

// What is drawn: the leading shown_rows x shown_cols blocks, each cell `width` columns wide.
struct CellLayout {
  int width = kMinCell;
  int64_t shown_rows = 1;
  int64_t shown_cols = 1;
};

// Cell width: room for the longest label, at least kMinCell, shrunk (labels wrap) or
// columns dropped so that a row fits in kMaxWidth; at most kMaxRows rows.
CellLayout fit_cells(const BlockGrid& g) {
  CellLayout l;
  l.shown_rows = std::min<int64_t>(g.rows, kMaxRows);
  int longest = 0;
  for (int64_t i = 0; i < l.shown_rows * g.cols; ++i)
    longest = std::max<int>(longest, static_cast<int>(label_of(g.cells[i]).size()));
  l.width = std::max(kMinCell, longest + 2);
  l.shown_cols = g.cols;
  if (l.shown_cols * (l.width + 1) + 1 > kMaxWidth) {
    l.width = static_cast<int>((kMaxWidth - 1) / g.cols) - 1;
    if (l.width < kNarrowCell) {
      l.width = kNarrowCell;
      l.shown_cols = (kMaxWidth - 1) / (l.width + 1);
    }
  }
  return l;
}

// A horizontal box line across the shown columns: `left`, then `mid` between cells, `right`.
std::string rule(const CellLayout& l, std::string_view left, std::string_view mid,
                 std::string_view right) {
  std::string line(left);
  for (int64_t c = 0; c < l.shown_cols; ++c) {
    line += repeat("─", l.width);
    line += c + 1 < l.shown_cols ? mid : right;
  }
  return line;
}

// Text line `y` of a cell `height` lines tall whose label is `lab`: the label centred both
// ways, on the cell's tab20b background when `color` (block index `block` picks the colour).
std::string cell_line(const std::vector<std::string>& lab, int y, int height, int width,
                      bool color, int64_t block) {
  int top = (height - static_cast<int>(lab.size())) / 2;
  std::string text = y >= top && y - top < static_cast<int>(lab.size()) ? lab[y - top] : "";
  int left = (width - static_cast<int>(text.size())) / 2;
  std::string body = std::string(left, ' ') + text +
                     std::string(width - left - static_cast<int>(text.size()), ' ');
  if (!color) return body;
  Rgb bg = kTab20b[block % 20];
  bool light = 0.299 * bg.r + 0.587 * bg.g + 0.114 * bg.b > 140;
  return fmt::format("\x1b[48;2;{};{};{}m\x1b[{}m{}\x1b[0m", bg.r, bg.g, bg.b, light ? 30 : 97,
                     body);
}

// The lines of block row `r` (without the rules around it): as tall as its longest wrapped
// label, at least `base_height`.
void draw_row(const BlockGrid& g, const CellLayout& l, int64_t r, int base_height, bool color,
              std::vector<std::string>& out) {
  std::vector<std::vector<std::string>> labels(l.shown_cols);
  int height = base_height;
  for (int64_t c = 0; c < l.shown_cols; ++c) {
    labels[c] = wrap_label(g.cells[r * g.cols + c], l.width - 2);
    height = std::max(height, static_cast<int>(labels[c].size()));
  }
  for (int y = 0; y < height; ++y) {
    std::string line = "│";
    for (int64_t c = 0; c < l.shown_cols; ++c)
      line += cell_line(labels[c], y, height, l.width, color, r * g.cols + c) + "│";
    out.push_back(line);
  }
}

// The boxed grid of the shown blocks; a 2-D view gives short grids taller cells.
void draw_grid(const BlockGrid& g, const CellLayout& l, bool grid, bool color,
               std::vector<std::string>& out) {
  const int base_height = grid ? std::clamp(static_cast<int>(6 / g.rows), 1, 3) : 1;
  out.push_back(rule(l, "┌", "┬", "┐"));
  for (int64_t r = 0; r < l.shown_rows; ++r) {
    draw_row(g, l, r, base_height, color, out);
    out.push_back(r + 1 < l.shown_rows ? rule(l, "├", "┼", "┤") : rule(l, "└", "┴", "┘"));
  }
}

}  // namespace

Result<std::string> visualize_sharding(const Shape& shape, const NamedSharding& s, int dim0,
                                       int dim1, bool color) {
  ENG_RETURN_IF_ERROR(s.validate(shape));
  ENG_ASSIGN_OR_RETURN(std::vector<int> dims, shown_dims(shape, s, dim0, dim1));
  const BlockGrid g = block_grid(s, dims);
  std::vector<std::string> out = dims_notes(shape, s, dims);
  const CellLayout l = fit_cells(g);
  if (l.shown_rows < g.rows)
    out.push_back(fmt::format("showing the first {} of {} blocks along dim {}", l.shown_rows,
                              g.rows, dims[0]));
  if (l.shown_cols < g.cols)
    out.push_back(fmt::format("showing the first {} of {} blocks along dim {}", l.shown_cols,
                              g.cols, dims.back()));
  draw_grid(g, l, dims.size() == 2, color, out);
  return fmt::format("{}\n", fmt::join(out, "\n"));
}

namespace {

// The axes MaxText's _get_nontrival_mesh_axes considers (MaxText's utils/sharding.py).
const std::vector<std::string>& audit_axes() {
  static const std::vector<std::string> axes = {
      "fsdp",    "fsdp_transpose",      "sequence",
      "context", "context_usp_ulysses", "context_autoregressive",
      "tensor",  "tensor_sequence",     "stage",
      "expert"};
  return axes;
}

std::string py_list(const std::vector<std::string>& items) {
  std::vector<std::string> q;
  for (const auto& i : items) q.push_back(fmt::format("'{}'", i));
  return fmt::format("[{}]", fmt::join(q, ", "));
}

}  // namespace

ReplicationReport audit_replicated(const std::vector<ParamShardingInfo>& params, const Mesh& mesh,
                                   double tolerance, int weight_bytes) {
  ReplicationReport rep;
  rep.tolerance = tolerance;
  rep.target_axes = remove_size_one_axes(audit_axes(), mesh);  // absent axes count as size 1
  std::sort(rep.target_axes.begin(), rep.target_axes.end());
  for (const auto& p : params) rep.total_elements += p.shape.numel();
  if (rep.target_axes.empty()) return rep;  // MaxText returns early: nothing to check

  for (const auto& p : params) {
    std::set<std::string> used;
    for (const auto& d : p.spec.dims()) used.insert(d.begin(), d.end());
    std::vector<std::string> missing;
    for (const auto& a : rep.target_axes)
      if (!used.count(a)) missing.push_back(a);
    if (missing.empty()) continue;
    rep.unsharded_elements += p.shape.numel();
    rep.offenders.push_back({p.path, p.shape.numel(), p.shape, p.spec.to_string(), missing});
  }
  std::stable_sort(rep.offenders.begin(), rep.offenders.end(),
                   [](const auto& a, const auto& b) { return a.size > b.size; });
  if (rep.total_elements > 0) {
    rep.fraction = static_cast<double>(rep.unsharded_elements) / rep.total_elements;
    rep.maxtext_fraction = rep.fraction / weight_bytes;
  }
  rep.exceeds = rep.fraction > tolerance;
  return rep;
}

std::string ReplicationReport::to_string(int top) const {
  if (target_axes.empty()) return "no non-trivial sharding axes in the mesh: nothing to check\n";
  std::vector<std::string> lines;
  if (!exceeds) {
    lines.push_back(fmt::format(
        "Unsharded parameter percentage ({:.2f}%) is within tolerance ({:.2f}%); axes checked: {}",
        100 * fraction, 100 * tolerance, py_list(target_axes)));
  } else {
    lines.push_back(
        fmt::format("Unsharded parameter percentage ({:.2f}%) exceeds tolerance ({:.2f}%).",
                    100 * fraction, 100 * tolerance));
    lines.push_back(
        "The following large tensors are replicated (unsharded) but could be sharded on at least "
        "one of the available axes:");
    for (int i = 0; i < top && i < static_cast<int>(offenders.size()); ++i) {
      const Offender& o = offenders[i];
      lines.push_back(fmt::format(
          " - Name: {} (Size: {}, Shape: {}, Spec: {}) is unsharded on axis: {} could be sharded "
          "on: {}",
          o.path, o.size, o.shape.to_string(), o.spec, py_list(o.unsharded_axes),
          py_list(target_axes)));
    }
  }
  return fmt::format("{}\n", fmt::join(lines, "\n"));
}

}  // namespace eng
