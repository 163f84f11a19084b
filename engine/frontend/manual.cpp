// engine/frontend/manual.cpp: jax.lax.all_to_all and pmean inside sl.shard_map (manual.h).
#include "engine/frontend/manual.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "engine/frontend/numpy.h"

namespace eng::frontend::manual {
namespace {

constexpr std::string_view kOp = "all_to_all";

// The engine's op: split_dim divided by G, concat_dim multiplied by G (split != concat).
ValueId emit_all_to_all(Trace& tr, ValueId x, const std::vector<std::string>& axes, int split,
                        int concat) {
  OpAttrs a;
  a.dim = split;
  a.dim2 = concat;
  a.mesh_axes = axes;
  a.group_size = axes_size(tr.mesh(), axes);
  return tr.builder().emit(OpKind::kAllToAll, {x}, a)[0];
}

}  // namespace

Result<ValueId> all_to_all(Trace& tr, ValueId x, const std::vector<std::string>& axes_in,
                           int split_axis, int concat_axis, bool tiled) {
  ENG_ASSIGN_OR_RETURN(std::vector<std::string> axes, np::group_axes(tr, kOp, axes_in));
  const Shape s = tr.info(x).shape;
  const int64_t g = axes_size(tr.mesh(), axes);
  ENG_ASSIGN_OR_RETURN(const int split, np::checked_axis(kOp, split_axis, s.rank(), "split_axis"));
  if (tiled) {
    ENG_ASSIGN_OR_RETURN(const int concat,
                         np::checked_axis(kOp, concat_axis, s.rank(), "concat_axis"));
    if (s[split] % g != 0)
      return invalid_argument(
          "all_to_all: split_axis {} of {} has size {}, not divisible by the group size {}", split,
          np::py_shape(s), s[split], g);
    if (split == concat) {
      if (g == 1) return x;
      // One axis: view it as (G, n/G), exchange the G chunks into the n/G axis (member r gets
      // chunk r of every sender, in sender order), and view the result as x's shape again.
      std::vector<int64_t> dims = s.dims();
      dims[split] = s[split] / g;
      const Shape v = np::with_dim(Shape(dims), split, g);
      ValueId y = emit_all_to_all(tr, tr.builder().reshape(x, v), axes, split, split + 1);
      return tr.builder().reshape(y, s);
    }
    return emit_all_to_all(tr, x, axes, split, concat);
  }
  if (s[split] != g)
    return invalid_argument(
        "all_to_all: the size of split_axis {} of {} is {}, but it must equal the size of the "
        "mapped axis {} ({})",
        split, np::py_shape(s), s[split], fmt::join(axes, ","), g);
  // concat_axis is a position of the result (rank r: split removed, the senders' axis added).
  ENG_ASSIGN_OR_RETURN(const int concat,
                       np::checked_axis(kOp, concat_axis, s.rank(), "concat_axis"));
  // Insert the senders' axis (size 1) where it ends up, exchange chunks along the split axis
  // (G -> 1) into it (1 -> G), then drop the split axis.
  const int at = concat >= split ? concat + 1 : concat;  // in x with split still present
  const int split_now = split >= at ? split + 1 : split;
  ValueId y = tr.builder().reshape(x, np::with_dim(s, at, 1));
  y = emit_all_to_all(tr, y, axes, split_now, at);
  return tr.builder().reshape(y, np::without_dim(tr.info(y).shape, split_now, false));
}

Result<ValueId> pmean(Trace& tr, ValueId x, const std::vector<std::string>& axes_in) {
  ENG_ASSIGN_OR_RETURN(std::vector<std::string> axes, np::group_axes(tr, "pmean", axes_in));
  ENG_RETURN_IF_ERROR(np::need_float(tr, "pmean", x));
  ENG_ASSIGN_OR_RETURN(ValueId s, np::psum(tr, x, axes));
  return np::scale(tr, s, 1.0 / static_cast<double>(axes_size(tr.mesh(), axes)));
}

}  // namespace eng::frontend::manual
