// engine/frontend/numpy_jax.cpp: JAX's remaining jax.numpy / jax.nn names as checked sequences
// of the engine's ops (numpy_jax.h says how each maps onto the op set).
#include "engine/frontend/numpy_jax.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/frontend/numpy_ops.h"

namespace eng::frontend::np {
namespace {

using Dir = CompareDirection;

Shape shape_of(Trace& tr, ValueId v) { return tr.info(v).shape; }  // a copy: emits grow values
ValueId scalar_like(Trace& tr, double c, ValueId x) { return tr.scalar(c, tr.info(x).dtype); }

// The reduction axis, checked; nullopt (all axes) stays nullopt.
Result<std::optional<int>> reduction_axis(std::string_view op, std::optional<int> axis, int rank) {
  if (!axis) return std::optional<int>();
  ENG_ASSIGN_OR_RETURN(const int d, checked_axis(op, *axis, rank));
  return std::optional<int>(d);
}

// x as (n) when axis is nullopt, with the axis then 0; the shape the result keeps otherwise.
struct Reduced {
  ValueId x;
  int axis;
  Shape out;  // the result's shape (keepdims applied)
};
Result<Reduced> prepare_reduction(Trace& tr, std::string_view op, ValueId x,
                                  std::optional<int> axis, bool keepdims) {
  ENG_RETURN_IF_ERROR(need_float(tr, op, x));
  const Shape s = shape_of(tr, x);
  if (s.numel() == 0)
    return invalid_argument("{}: a reduction over an empty array of {}", op, py_shape(s));
  ENG_ASSIGN_OR_RETURN(std::optional<int> d, reduction_axis(op, axis, s.rank()));
  if (!d) {
    ENG_ASSIGN_OR_RETURN(ValueId flat, reshape(tr, x, {s.numel()}));
    return Reduced{flat, 0,
                   keepdims ? Shape(std::vector<int64_t>(s.rank(), 1)) : Shape{}};
  }
  return Reduced{x, *d, without_dim(s, *d, keepdims)};
}

}  // namespace

Result<ValueId> square(Trace& tr, ValueId x) { return multiply(tr, x, x); }

Result<ValueId> power(Trace& tr, ValueId x, double p) {
  ENG_RETURN_IF_ERROR(need_float(tr, "power", x));
  if (p == 0.5) return unary(tr, "sqrt", x);
  if (p == std::floor(p) && std::abs(p) <= 64) {
    int64_t e = static_cast<int64_t>(std::abs(p));
    if (e == 0) return broadcast_to(tr, scalar_like(tr, 1.0, x), shape_of(tr, x));
    std::optional<ValueId> acc;
    ValueId base = x;
    while (e > 0) {  // repeated squaring: x^13 = x * x^4 * x^8
      if (e & 1) {
        if (acc) {
          ENG_ASSIGN_OR_RETURN(acc, multiply(tr, *acc, base));
        } else {
          acc = base;
        }
      }
      e >>= 1;
      if (e > 0) {
        ENG_ASSIGN_OR_RETURN(base, multiply(tr, base, base));
      }
    }
    if (p < 0) return unary(tr, "reciprocal", *acc);
    return *acc;
  }
  ENG_ASSIGN_OR_RETURN(ValueId l, unary(tr, "log", x));
  ENG_ASSIGN_OR_RETURN(ValueId pl, scale(tr, l, p));
  return unary(tr, "exp", pl);
}

Result<ValueId> power(Trace& tr, ValueId x, ValueId y) {
  ENG_RETURN_IF_ERROR(need_float(tr, "power", x));
  ENG_RETURN_IF_ERROR(need_float(tr, "power", y));
  ENG_ASSIGN_OR_RETURN(ValueId l, unary(tr, "log", x));
  ENG_ASSIGN_OR_RETURN(ValueId yl, multiply(tr, y, l));
  return unary(tr, "exp", yl);
}

Result<ValueId> clip(Trace& tr, ValueId x, std::optional<ValueId> lo, std::optional<ValueId> hi) {
  ENG_RETURN_IF_ERROR(need_float(tr, "clip", x));
  if (lo) {
    ENG_ASSIGN_OR_RETURN(x, maximum(tr, x, *lo));
  }
  if (hi) {
    ENG_ASSIGN_OR_RETURN(x, minimum(tr, x, *hi));
  }
  return x;
}

Result<ValueId> logaddexp(Trace& tr, ValueId a, ValueId b) {
  ENG_ASSIGN_OR_RETURN(ValueId m, maximum(tr, a, b));
  ENG_ASSIGN_OR_RETURN(ValueId da, subtract(tr, a, m));
  ENG_ASSIGN_OR_RETURN(ValueId db, subtract(tr, b, m));
  ENG_ASSIGN_OR_RETURN(ValueId ea, unary(tr, "exp", da));
  ENG_ASSIGN_OR_RETURN(ValueId eb, unary(tr, "exp", db));
  ENG_ASSIGN_OR_RETURN(ValueId s, add(tr, ea, eb));
  ENG_ASSIGN_OR_RETURN(ValueId l, unary(tr, "log", s));
  return add(tr, m, l);
}

Result<ValueId> allclose(Trace& tr, ValueId a, ValueId b, double rtol, double atol) {
  for (ValueId* v : {&a, &b}) {  // integers compare in float32 (JAX's promote_args_inexact)
    if (info(tr, *v).dtype == DType::kI32) {
      ENG_ASSIGN_OR_RETURN(*v, astype(tr, *v, DType::kF32));
    }
  }
  ENG_ASSIGN_OR_RETURN(ValueId d, subtract(tr, a, b));
  ENG_ASSIGN_OR_RETURN(d, unary(tr, "abs", d));
  ENG_ASSIGN_OR_RETURN(ValueId bound, unary(tr, "abs", b));
  ENG_ASSIGN_OR_RETURN(bound, scale(tr, bound, rtol));
  ENG_ASSIGN_OR_RETURN(bound, add(tr, bound, tr.scalar(atol, info(tr, bound).dtype)));
  // d <= bound is false for a NaN on either side, so NaN is never close (equal_nan=False).
  ENG_ASSIGN_OR_RETURN(ValueId close, compare(tr, d, bound, Dir::kLe));
  return all(tr, close, std::nullopt, false);
}

Result<ValueId> prod(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims) {
  ENG_ASSIGN_OR_RETURN(Reduced r, prepare_reduction(tr, "prod", x, axis, keepdims));
  Builder& b = tr.builder();
  ValueId v = r.x;
  int64_t n = shape_of(tr, v)[r.axis];
  while (n > 1) {  // the two halves multiplied; an odd last element carried along
    const int64_t h = n / 2;
    ValueId m = b.mul(b.slice(v, r.axis, 0, h), b.slice(v, r.axis, h, h));
    if (n % 2) m = b.concat({m, b.slice(v, r.axis, 2 * h, 1)}, r.axis);
    v = m;
    n = h + n % 2;
  }
  return reshape(tr, v, r.out.dims());
}

Result<ValueId> var(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims, double ddof) {
  ENG_ASSIGN_OR_RETURN(Reduced r, prepare_reduction(tr, "var", x, axis, keepdims));
  const int64_t n = shape_of(tr, r.x)[r.axis];
  if (!(ddof >= 0) || ddof >= static_cast<double>(n))
    return invalid_argument("var: ddof {} must be >= 0 and below the {} elements reduced", ddof, n);
  ENG_ASSIGN_OR_RETURN(ValueId m, mean(tr, r.x, r.axis, true));
  ENG_ASSIGN_OR_RETURN(ValueId c, subtract(tr, r.x, m));
  ENG_ASSIGN_OR_RETURN(ValueId c2, multiply(tr, c, c));
  ENG_ASSIGN_OR_RETURN(ValueId s, sum(tr, c2, r.axis, true));
  ENG_ASSIGN_OR_RETURN(ValueId v, scale(tr, s, 1.0 / (static_cast<double>(n) - ddof)));
  return reshape(tr, v, r.out.dims());
}

Result<ValueId> std_(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims, double ddof) {
  ENG_ASSIGN_OR_RETURN(ValueId v, var(tr, x, axis, keepdims, ddof));
  return unary(tr, "sqrt", v);
}

Result<ValueId> any(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims) {
  ENG_RETURN_IF_ERROR(need_float(tr, "any", x));
  ENG_ASSIGN_OR_RETURN(ValueId nz, compare(tr, x, scalar_like(tr, 0, x), Dir::kNe));
  return max(tr, nz, axis, keepdims);
}

Result<ValueId> all(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims) {
  ENG_RETURN_IF_ERROR(need_float(tr, "all", x));
  ENG_ASSIGN_OR_RETURN(ValueId nz, compare(tr, x, scalar_like(tr, 0, x), Dir::kNe));
  return min(tr, nz, axis, keepdims);
}

Result<ValueId> logsumexp(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims) {
  ENG_ASSIGN_OR_RETURN(Reduced r, prepare_reduction(tr, "logsumexp", x, axis, keepdims));
  ENG_ASSIGN_OR_RETURN(ValueId m, max(tr, r.x, r.axis, true));
  ENG_ASSIGN_OR_RETURN(ValueId z, subtract(tr, r.x, m));
  ENG_ASSIGN_OR_RETURN(ValueId e, unary(tr, "exp", z));
  ENG_ASSIGN_OR_RETURN(ValueId s, sum(tr, e, r.axis, true));
  ENG_ASSIGN_OR_RETURN(ValueId l, unary(tr, "log", s));
  ENG_ASSIGN_OR_RETURN(ValueId y, add(tr, m, l));
  return reshape(tr, y, r.out.dims());
}

Result<ValueId> cumsum(Trace& tr, ValueId x, std::optional<int> axis) {
  ENG_RETURN_IF_ERROR(need_float(tr, "cumsum", x));
  const Shape s = shape_of(tr, x);
  int d = 0;
  if (axis) {
    ENG_ASSIGN_OR_RETURN(d, checked_axis("cumsum", *axis, s.rank()));
  } else if (s.rank() != 1) {
    ENG_ASSIGN_OR_RETURN(x, reshape(tr, x, {s.numel()}));
  }
  if (s.rank() == 0) {
    ENG_ASSIGN_OR_RETURN(x, reshape(tr, x, {1}));
  }
  Builder& b = tr.builder();
  const int64_t n = shape_of(tr, x)[d];
  for (int64_t k = 1; k < n; k *= 2) x = b.add(x, b.shift(x, d, k));  // x[i] += x[i - k]
  return x;
}

Result<ValueId> expand_dims(Trace& tr, ValueId x, int axis) {
  const Shape s = shape_of(tr, x);
  ENG_ASSIGN_OR_RETURN(const int d, checked_axis("expand_dims", axis, s.rank() + 1));
  return reshape(tr, x, with_dim(s, d, 1).dims());
}

Result<ValueId> squeeze(Trace& tr, ValueId x, std::optional<int> axis) {
  const Shape s = shape_of(tr, x);
  std::vector<int64_t> dims;
  if (axis) {
    ENG_ASSIGN_OR_RETURN(const int d, checked_axis("squeeze", *axis, s.rank()));
    if (s[d] != 1)
      return invalid_argument(
          "squeeze: cannot select an axis to squeeze out which has size not equal to one, got "
          "shape={} and dimensions=({},)",
          py_shape(s), *axis);
    dims = without_dim(s, d, false).dims();
  } else {
    for (int64_t n : s.dims())
      if (n != 1) dims.push_back(n);
  }
  return reshape(tr, x, dims);
}

Result<ValueId> stack(Trace& tr, const std::vector<ValueId>& xs, int axis) {
  if (xs.empty()) return invalid_argument("stack: need at least one array to stack");
  const Shape s = shape_of(tr, xs[0]);
  ENG_ASSIGN_OR_RETURN(const int d, checked_axis("stack", axis, s.rank() + 1));
  std::vector<ValueId> parts;
  for (size_t k = 0; k < xs.size(); ++k) {
    if (shape_of(tr, xs[k]) != s)
      return invalid_argument("stack: all input arrays must have the same shape: array 1 is {}, "
                              "array {} is {}",
                              py_shape(s), k + 1, py_shape(shape_of(tr, xs[k])));
    ENG_ASSIGN_OR_RETURN(ValueId e, expand_dims(tr, xs[k], d));
    parts.push_back(e);
  }
  return concatenate(tr, parts, d);
}

Result<std::vector<ValueId>> split(Trace& tr, ValueId x, int64_t sections, int axis) {
  const Shape s = shape_of(tr, x);
  ENG_ASSIGN_OR_RETURN(const int d, checked_axis("split", axis, s.rank()));
  if (sections <= 0 || s[d] % sections != 0)
    return invalid_argument(
        "split: array split does not result in an equal division: {} sections of axis {} of size "
        "{}",
        sections, axis, s[d]);
  std::vector<int64_t> at;
  for (int64_t k = 1; k < sections; ++k) at.push_back(k * (s[d] / sections));
  return split_at(tr, x, at, d);
}

Result<std::vector<ValueId>> split_at(Trace& tr, ValueId x, const std::vector<int64_t>& indices,
                                      int axis) {
  const Shape s = shape_of(tr, x);
  ENG_ASSIGN_OR_RETURN(const int d, checked_axis("split", axis, s.rank()));
  const int64_t n = s[d];
  std::vector<ValueId> out;
  int64_t start = 0;
  for (size_t k = 0; k <= indices.size(); ++k) {
    int64_t stop = k < indices.size() ? indices[k] : n;
    stop = std::clamp<int64_t>(stop < 0 ? stop + n : stop, 0, n);
    if (stop <= start)
      return invalid_argument(
          "split: piece {} ([{}:{}] of axis {}, size {}) is empty (empty arrays are not supported)",
          k, start, stop, axis, n);
    ENG_ASSIGN_OR_RETURN(ValueId piece, slice(tr, x, d, start, stop));
    out.push_back(piece);
    start = stop;
  }
  return out;
}

Result<ValueId> swapaxes(Trace& tr, ValueId x, int axis1, int axis2) {
  const int r = shape_of(tr, x).rank();
  ENG_ASSIGN_OR_RETURN(const int a, checked_axis("swapaxes", axis1, r, "axis1"));
  ENG_ASSIGN_OR_RETURN(const int b, checked_axis("swapaxes", axis2, r, "axis2"));
  std::vector<int> perm(r);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[a], perm[b]);
  return transpose(tr, x, perm);
}

Result<ValueId> moveaxis(Trace& tr, ValueId x, const std::vector<int>& source,
                         const std::vector<int>& destination) {
  const int r = shape_of(tr, x).rank();
  if (source.size() != destination.size())
    return invalid_argument("moveaxis: `source` and `destination` arguments must have the same "
                            "number of elements, got ({}) and ({})",
                            fmt::join(source, ", "), fmt::join(destination, ", "));
  std::vector<std::pair<int, int>> moves;  // (destination, source), numpy's order
  std::vector<bool> moved(r, false);
  for (size_t i = 0; i < source.size(); ++i) {
    ENG_ASSIGN_OR_RETURN(const int s, checked_axis("moveaxis", source[i], r, "source"));
    ENG_ASSIGN_OR_RETURN(const int d, checked_axis("moveaxis", destination[i], r, "destination"));
    if (moved[s]) return invalid_argument("moveaxis: repeated axis in `source` argument");
    moved[s] = true;
    moves.emplace_back(d, s);
  }
  std::sort(moves.begin(), moves.end());
  for (size_t i = 1; i < moves.size(); ++i)
    if (moves[i].first == moves[i - 1].first)
      return invalid_argument("moveaxis: repeated axis in `destination` argument");
  std::vector<int> order;
  for (int i = 0; i < r; ++i)
    if (!moved[i]) order.push_back(i);
  for (const auto& [d, s] : moves) order.insert(order.begin() + d, s);
  return transpose(tr, x, order);
}

Result<ValueId> roll(Trace& tr, ValueId x, int64_t shift, std::optional<int> axis) {
  const Shape s = shape_of(tr, x);
  if (!axis) {  // of the flattened array, in its shape again
    if (s.rank() == 0) return x;
    ENG_ASSIGN_OR_RETURN(ValueId flat, reshape(tr, x, {s.numel()}));
    ENG_ASSIGN_OR_RETURN(flat, roll(tr, flat, shift, 0));
    return reshape(tr, flat, s.dims());
  }
  ENG_ASSIGN_OR_RETURN(const int d, checked_axis("roll", *axis, s.rank()));
  const int64_t n = s[d];
  const int64_t k = n == 0 ? 0 : ((shift % n) + n) % n;
  if (k == 0) return x;
  Builder& b = tr.builder();  // x[n-k:] then x[:n-k] along d
  return b.concat({b.slice(x, d, n - k, k), b.slice(x, d, 0, n - k)}, d);
}

Result<ValueId> tile(Trace& tr, ValueId x, const std::vector<int64_t>& reps_arg) {
  Shape s = shape_of(tr, x);
  std::vector<int64_t> reps = reps_arg;
  for (int64_t r : reps)
    if (r < 1 || r > 4096)
      return invalid_argument("tile: reps ({}) must be between 1 and 4096 (empty arrays are not "
                              "supported)",
                              fmt::join(reps, ", "));
  while (static_cast<int>(reps.size()) < s.rank()) reps.insert(reps.begin(), 1);
  if (s.rank() < static_cast<int>(reps.size())) {
    std::vector<int64_t> d(reps.size() - s.rank(), 1);
    d.insert(d.end(), s.dims().begin(), s.dims().end());
    ENG_ASSIGN_OR_RETURN(x, reshape(tr, x, d));
  }
  for (size_t i = 0; i < reps.size(); ++i) {
    if (reps[i] == 1) continue;
    ENG_ASSIGN_OR_RETURN(x, concatenate(tr, std::vector<ValueId>(reps[i], x), static_cast<int>(i)));
  }
  return x;
}

Result<ValueId> take(Trace& tr, ValueId a, ValueId indices, std::optional<int> axis) {
  if (tr.info(a).dtype != DType::kF32)
    return invalid_argument("take: the engine's gather takes float32, got {} (use astype)",
                            tr.info(a).type_string());
  if (tr.info(indices).dtype != DType::kI32)
    return invalid_argument("take: indices must be int32, got {}", tr.info(indices).type_string());
  Shape s = shape_of(tr, a);
  if (!axis) {
    ENG_ASSIGN_OR_RETURN(a, reshape(tr, a, {s.numel()}));
    s = shape_of(tr, a);
    axis = 0;
  }
  ENG_ASSIGN_OR_RETURN(const int d, checked_axis("take", *axis, s.rank()));
  const int64_t n = s[d];
  // The axis first, the rest one row: a table of n rows (n, rest).
  ENG_ASSIGN_OR_RETURN(ValueId moved, moveaxis(tr, a, {d}, {0}));
  const Shape ms = shape_of(tr, moved);
  ENG_ASSIGN_OR_RETURN(ValueId table, reshape(tr, moved, {n, s.numel() / n}));
  // Negative indices count from the end (numpy's): i + n where i < 0, in f32 (exact below 2^24).
  const Shape is = shape_of(tr, indices);
  Builder& b = tr.builder();
  ValueId f = b.convert(indices, DType::kF32);
  ENG_ASSIGN_OR_RETURN(ValueId neg, compare(tr, f, tr.scalar(0, DType::kF32), Dir::kLt));
  ENG_ASSIGN_OR_RETURN(ValueId wrapped, add(tr, f, tr.scalar(static_cast<double>(n), DType::kF32)));
  ENG_ASSIGN_OR_RETURN(f, where(tr, neg, wrapped, f));
  ValueId ids = b.convert(f, DType::kI32);
  ENG_ASSIGN_OR_RETURN(ids, reshape(tr, ids, {std::max<int64_t>(is.numel(), 1)}));
  ValueId g = b.embed_lookup(table, ids);  // (numel(indices), rest)
  std::vector<int64_t> dims = is.dims();   // indices' dims, then a's other dims
  dims.insert(dims.end(), ms.dims().begin() + 1, ms.dims().end());
  ENG_ASSIGN_OR_RETURN(g, reshape(tr, g, dims));
  if (d == 0) return g;
  // a.shape[:d] + indices.shape + a.shape[d+1:]
  const int k = is.rank(), r = static_cast<int>(dims.size());
  std::vector<int> perm;
  for (int i = k; i < k + d; ++i) perm.push_back(i);
  for (int i = 0; i < k; ++i) perm.push_back(i);
  for (int i = k + d; i < r; ++i) perm.push_back(i);
  return transpose(tr, g, perm);
}

Result<ValueId> relu(Trace& tr, ValueId x) {
  // jax.nn.relu is max(x, 0), so NaN stays NaN; its custom JVP is select(x > 0, g, 0), so the
  // gradient at NaN is 0: the NaN comes from a constant, not from x.
  ENG_RETURN_IF_ERROR(need_float(tr, "relu", x));
  const ValueId zero = scalar_like(tr, 0, x);
  ENG_ASSIGN_OR_RETURN(ValueId pos, compare(tr, x, zero, Dir::kGt));
  ENG_ASSIGN_OR_RETURN(ValueId y, where(tr, pos, x, zero));
  ENG_ASSIGN_OR_RETURN(ValueId nan, compare(tr, x, x, Dir::kNe));
  return where(tr, nan, scalar_like(tr, std::numeric_limits<double>::quiet_NaN(), x), y);
}

Result<ValueId> softplus(Trace& tr, ValueId x) {
  ENG_RETURN_IF_ERROR(need_float(tr, "softplus", x));
  return logaddexp(tr, x, scalar_like(tr, 0, x));
}

Result<ValueId> one_hot(Trace& tr, ValueId x, int64_t num_classes, DType dtype, int axis) {
  if (num_classes < 1 || num_classes > (int64_t{1} << 24))
    return invalid_argument("one_hot: num_classes must be between 1 and 2^24, got {}",
                            num_classes);
  if (dtype == DType::kI32)
    return invalid_argument("one_hot: dtype int32 is not supported (a float mask: float32 or "
                            "bfloat16)");
  const Shape s = shape_of(tr, x);
  ENG_ASSIGN_OR_RETURN(const int d, checked_axis("one_hot", axis, s.rank() + 1));
  ENG_ASSIGN_OR_RETURN(ValueId f, astype(tr, x, DType::kF32));
  ENG_ASSIGN_OR_RETURN(ValueId e, expand_dims(tr, f, s.rank()));
  std::vector<double> iota(static_cast<size_t>(num_classes));
  std::iota(iota.begin(), iota.end(), 0.0);
  ENG_ASSIGN_OR_RETURN(ValueId classes, tr.constant(iota, Shape{num_classes}, DType::kF32));
  ENG_ASSIGN_OR_RETURN(ValueId m, compare(tr, e, classes, Dir::kEq));
  ENG_ASSIGN_OR_RETURN(m, astype(tr, m, dtype));
  if (d == s.rank()) return m;
  return moveaxis(tr, m, {s.rank()}, {d});
}

}  // namespace eng::frontend::np

// ---- traced indices: remainder, pad, dynamic slices, x[i] and x.at[i] ----------------------

namespace eng::frontend::np {
namespace {

// An int32 scalar start (JAX also takes other integer dtypes; the engine has int32 only).
Status need_start(Trace& tr, std::string_view op, ValueId start) {
  const ValueInfo& s = tr.info(start);
  if (s.dtype != DType::kI32 || s.shape.rank() != 0)
    return invalid_argument("{}: the index must be an int32 scalar, got {}", op, s.type_string());
  return ok_status();
}

}  // namespace

Result<ValueId> remainder(Trace& tr, ValueId a, ValueId b) {
  ENG_RETURN_IF_ERROR(check_elementwise_sharding(tr, "rem", {a, b}));
  const DType da = tr.info(a).dtype, db = tr.info(b).dtype;  // int32 beside a float: the float's
  if (da == DType::kI32 && db != DType::kI32) {
    ENG_ASSIGN_OR_RETURN(a, astype(tr, a, db));
  } else if (db == DType::kI32 && da != DType::kI32) {
    ENG_ASSIGN_OR_RETURN(b, astype(tr, b, da));
  }
  if (tr.info(a).dtype != tr.info(b).dtype)
    return invalid_argument("remainder: operands have different dtypes: {} and {} (use astype)",
                            dtype_long_name(tr.info(a).dtype), dtype_long_name(tr.info(b).dtype));
  ENG_ASSIGN_OR_RETURN(Shape s, broadcast_shapes(shape_of(tr, a), shape_of(tr, b)));
  ENG_ASSIGN_OR_RETURN(a, broadcast_to(tr, a, s));
  ENG_ASSIGN_OR_RETURN(b, broadcast_to(tr, b, s));
  return tr.builder().remainder(a, b);
}

Result<ValueId> pad(Trace& tr, ValueId x, const std::vector<std::pair<int64_t, int64_t>>& widths) {
  const Shape s = shape_of(tr, x);
  if (static_cast<int>(widths.size()) != s.rank())
    return invalid_argument("pad: {} (before, after) pairs for an array of dimension {} {}",
                            widths.size(), s.rank(), py_shape(s));
  for (int d = 0; d < s.rank(); ++d) {
    const auto [lo, hi] = widths[d];
    if (lo < 0 || hi < 0)
      return invalid_argument("pad: negative padding ({}, {}) for axis {}", lo, hi, d);
    if (lo == 0 && hi == 0) continue;
    x = tr.builder().pad(x, d, lo, s[d] + lo + hi);
  }
  return x;
}

Result<ValueId> dynamic_slice_in_dim(Trace& tr, ValueId x, ValueId start, int64_t size,
                                     int axis) {
  constexpr std::string_view op = "dynamic_slice_in_dim";
  ENG_RETURN_IF_ERROR(need_start(tr, op, start));
  const Shape s = shape_of(tr, x);
  ENG_ASSIGN_OR_RETURN(const int d, checked_axis(op, axis, s.rank()));
  if (size < 0 || size > s[d])
    return invalid_argument("{}: slice size {} out of range for axis {} of size {} (array {})",
                            op, size, axis, s[d], py_shape(s));
  return tr.builder().dynamic_slice_in_dim(x, start, d, size);
}

Result<ValueId> dynamic_update_slice_in_dim(Trace& tr, ValueId x, ValueId update, ValueId start,
                                            int axis, bool add) {
  const std::string_view op = add ? "at[].add" : "dynamic_update_slice_in_dim";
  ENG_RETURN_IF_ERROR(need_start(tr, op, start));
  const Shape s = shape_of(tr, x), us = shape_of(tr, update);
  ENG_ASSIGN_OR_RETURN(const int d, checked_axis(op, axis, s.rank()));
  bool fits = us.rank() == s.rank();
  for (int i = 0; fits && i < s.rank(); ++i) fits = i == d ? us[i] <= s[i] : us[i] == s[i];
  if (!fits)
    return invalid_argument("{}: update of shape {} does not fit array {} along axis {}", op,
                            py_shape(us), py_shape(s), axis);
  if (tr.info(update).dtype != tr.info(x).dtype) {
    ENG_ASSIGN_OR_RETURN(update, astype(tr, update, tr.info(x).dtype));
  }
  return tr.builder().dynamic_update_slice_in_dim(x, update, start, d, add);
}

Result<ValueId> dynamic_index(Trace& tr, ValueId x, ValueId index) {
  const Shape s = shape_of(tr, x);
  if (s.rank() == 0)
    return invalid_argument("index: a scalar array {} cannot be indexed", py_shape(s));
  ENG_ASSIGN_OR_RETURN(ValueId row, dynamic_slice_in_dim(tr, x, index, 1, 0));
  return reshape(tr, row, s.slice(1, s.rank()).dims());
}

Result<ValueId> at_update(Trace& tr, ValueId x, ValueId index, ValueId v, bool add,
                          bool drop_out_of_range) {
  const Shape s = shape_of(tr, x);
  if (s.rank() == 0)
    return invalid_argument("at: a scalar array {} cannot be indexed", py_shape(s));
  ENG_RETURN_IF_ERROR(need_start(tr, add ? "at[].add" : "at[].set", index));
  std::vector<int64_t> row = s.dims();
  row[0] = 1;
  const DType dt = tr.info(x).dtype;
  ENG_ASSIGN_OR_RETURN(v, broadcast_to(tr, v, s.slice(1, s.rank())));
  ENG_ASSIGN_OR_RETURN(v, reshape(tr, v, row));
  if (tr.info(v).dtype != dt) {
    ENG_ASSIGN_OR_RETURN(v, astype(tr, v, dt));
  }
  if (drop_out_of_range) {
    // JAX's scatter mode for x.at[i].set / .add (FILL_OR_DROP): i counts from the end when
    // negative, and an i outside [-n, n) drops the update. The row written is then x's own
    // row at the (clamped) start for set, zeros for add: x is unchanged.
    Builder& b = tr.builder();
    const int64_t n = s[0];
    const ValueId lo = tr.scalar(static_cast<double>(-n), DType::kI32);
    const ValueId hi = tr.scalar(static_cast<double>(n), DType::kI32);
    const ValueId at_least = b.compare(index, lo, Dir::kGe);
    const ValueId ok = b.mul(at_least, b.compare(index, hi, Dir::kLt));  // int32 0/1
    const ValueId keep = add ? tr.scalar(0.0, dt) : b.dynamic_slice_in_dim(x, index, 0, 1);
    ENG_ASSIGN_OR_RETURN(ValueId kept, broadcast_to(tr, keep, Shape(row)));
    if (dt == DType::kI32) {  // kept + ok * (v - kept): exact in wrapping int32
      ENG_ASSIGN_OR_RETURN(ValueId okb, broadcast_to(tr, ok, Shape(row)));
      ENG_ASSIGN_OR_RETURN(ValueId d, subtract(tr, v, kept));
      ENG_ASSIGN_OR_RETURN(v, np::add(tr, kept, b.mul(okb, d)));
    } else {
      ENG_ASSIGN_OR_RETURN(ValueId okb, broadcast_to(tr, b.convert(ok, dt), Shape(row)));
      v = b.select(okb, v, kept);
    }
  }
  return dynamic_update_slice_in_dim(tr, x, v, index, 0, add);
}

}  // namespace eng::frontend::np
