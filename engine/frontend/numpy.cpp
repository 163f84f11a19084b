// engine/frontend/numpy.cpp: numpy-like operations as checked sequences of the engine's ops.
#include "engine/frontend/numpy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "engine/base/limits.h"
#include "engine/sharding/broadcast_sharding.h"
#include "engine/sharding/shard_geometry.h"

namespace eng::frontend::np {
namespace {

Status need_f32(Trace& tr, std::string_view op, ValueId v) {
  if (info(tr, v).dtype != DType::kF32)
    return invalid_argument("{}: the engine's kernel takes float32, got {} (use astype)", op,
                            info(tr, v).type_string());
  return ok_status();
}

int normalize_axis(int axis, int rank) { return axis < 0 ? axis + rank : axis; }

// JAX's promotion of an int32 operand beside a float one: to the float's dtype
// (jnp.int32 + jnp.float32 -> float32).
Status promote_int(Trace& tr, ValueId& a, ValueId& b) {
  const DType da = info(tr, a).dtype, db = info(tr, b).dtype;
  if (da == DType::kI32 && db != DType::kI32) {
    ENG_ASSIGN_OR_RETURN(a, astype(tr, a, db));
  } else if (db == DType::kI32 && da != DType::kI32) {
    ENG_ASSIGN_OR_RETURN(b, astype(tr, b, da));
  }
  return ok_status();
}

// add and multiply: float operands of one dtype, or int32 ones (the engine's integer
// arithmetic, op.h OpDef::integer). prim: JAX's primitive, for explicit mode's errors.
Result<ValueId> elementwise(Trace& tr, std::string_view op, std::string_view prim, OpKind kind,
                            ValueId a, ValueId b) {
  ENG_RETURN_IF_ERROR(check_elementwise_sharding(tr, prim, {a, b}));
  ENG_RETURN_IF_ERROR(promote_int(tr, a, b));
  if (info(tr, a).dtype != info(tr, b).dtype)
    return invalid_argument("{}: operands have different dtypes: {} and {} (use astype)", op,
                            dtype_long_name(info(tr, a).dtype), dtype_long_name(info(tr, b).dtype));
  ENG_ASSIGN_OR_RETURN(Shape s, broadcast_shapes(info(tr, a).shape, info(tr, b).shape));
  ENG_ASSIGN_OR_RETURN(a, broadcast_to(tr, a, s));
  ENG_ASSIGN_OR_RETURN(b, broadcast_to(tr, b, s));
  return tr.builder().emit(kind, {a, b})[0];
}

// A vector of n ones shaped (n, 1) or (1, n), f32.
Result<ValueId> ones(Trace& tr, int64_t n, bool column, DType dtype = DType::kF32) {
  return tr.constant(std::vector<double>(static_cast<size_t>(n), 1.0),
                     column ? Shape{n, 1} : Shape{1, n}, dtype);
}

// The logical names (Trace::logical_name) of x's sharding without dim `axis` (-1: none kept):
// a sum keeps the other dims where they are, as JAX's reductions do.
Result<std::vector<std::string>> kept_logical(Trace& tr, ValueId x, int axis, int extra_dims) {
  ENG_ASSIGN_OR_RETURN(PartitionSpec s, tr.sharding_of(x));
  std::vector<std::string> out;
  for (int i = 0; axis >= 0 && i < info(tr, x).shape.rank(); ++i)
    if (i != axis) out.push_back(tr.logical_name(s.dim_or_none(i)));
  for (int i = 0; i < extra_dims; ++i) out.push_back("");
  return out;
}

}  // namespace

Status need_float(const Trace& tr, std::string_view op, ValueId v) {
  if (info(tr, v).dtype == DType::kI32)
    return invalid_argument("{}: needs a floating-point array, got {}", op,
                            info(tr, v).type_string());
  return ok_status();
}

Result<int> checked_axis(std::string_view op, int axis, int rank, std::string_view what) {
  const int a = normalize_axis(axis, rank);
  if (a < 0 || a >= rank)
    return invalid_argument("{}: {} {} is out of bounds for array of dimension {}", op, what, axis,
                            rank);
  return a;
}

Shape with_dim(const Shape& s, int axis, int64_t size) {
  std::vector<int64_t> d = s.dims();
  d.insert(d.begin() + axis, size);
  return Shape(std::move(d));
}

Shape without_dim(const Shape& s, int axis, bool keepdims) {
  std::vector<int64_t> d = s.dims();
  if (keepdims)
    d[axis] = 1;
  else
    d.erase(d.begin() + axis);
  return Shape(std::move(d));
}

namespace {

// n copies of x (size 1 along dim) concatenated along dim, in O(log n) concatenations of the
// doubled pieces (no instruction with n inputs).
ValueId repeat_along(Trace& tr, ValueId x, int dim, int64_t n) {
  std::vector<ValueId> parts;
  ValueId doubled = x;  // 2^k copies
  for (int64_t rest = n; rest > 0; rest >>= 1) {
    if (rest & 1) parts.push_back(doubled);
    if (rest > 1) doubled = tr.builder().concat({doubled, doubled}, dim);
  }
  return parts.size() == 1 ? parts[0] : tr.builder().concat(parts, dim);
}

}  // namespace

std::string py_shape(const Shape& s) { return s.to_string(); }

Result<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const int r = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(r);
  for (int i = 0; i < r; ++i) {
    const int ia = i - (r - a.rank()), ib = i - (r - b.rank());
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      return invalid_argument("Incompatible shapes for broadcasting: shapes=[{}, {}]", py_shape(a),
                              py_shape(b));
    out[i] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

Result<ValueId> broadcast_to(Trace& tr, ValueId x, const Shape& shape) {
  const Shape s = info(tr, x).shape;  // a copy: emitting below grows the values
  if (s == shape) return x;
  ENG_RETURN_IF_ERROR(check_rank(shape.rank(), "broadcast_to", py_shape(shape)));
  if (s.rank() > shape.rank())
    return invalid_argument("broadcast_to: cannot broadcast {} to {} (rank {} > {})", py_shape(s),
                            py_shape(shape), s.rank(), shape.rank());
  std::vector<int64_t> padded(shape.rank() - s.rank(), 1);
  padded.insert(padded.end(), s.dims().begin(), s.dims().end());
  for (int i = 0; i < shape.rank(); ++i)
    if (padded[i] != shape[i] && padded[i] != 1)
      return invalid_argument("broadcast_to: cannot broadcast {} to {} (dimension {}: {} vs {})",
                              py_shape(s), py_shape(shape), i, padded[i], shape[i]);
  if (Shape(padded) != s) x = tr.builder().reshape(x, Shape(padded));
  for (int i = 0; i < shape.rank(); ++i) {
    if (padded[i] == shape[i]) continue;
    if (shape[i] == 0)
      return invalid_argument("broadcast_to: {} to {}: a dimension of size 0 is not supported",
                              py_shape(s), py_shape(shape));
    x = repeat_along(tr, x, i, shape[i]);
  }
  return x;
}

Status check_elementwise_sharding(Trace& tr, std::string_view prim,
                                  std::initializer_list<ValueId> operands) {
  const Mesh& mesh = tr.mesh();
  if (tr.manual() || mesh.num_devices() == 1) return ok_status();
  // The axis types in scope (the mesh's, or an auto_axes / explicit_axes region's): explicit
  // mode's rule concerns the Explicit axes only; the partitioner resolves the Auto ones.
  const std::vector<AxisType>& types = tr.axis_types();
  auto is_explicit = [&](const std::string& axis) {
    const int i = mesh.axis_index(axis);
    return i >= 0 && static_cast<size_t>(i) < types.size() && types[i] == AxisType::kExplicit;
  };
  if (std::none_of(types.begin(), types.end(), [](AxisType t) { return t == AxisType::kExplicit; }))
    return ok_status();
  int r = 0;
  for (ValueId v : operands) {
    if (!info(tr, v).spec) return ok_status();  // the partitioner checks it
    r = std::max(r, info(tr, v).shape.rank());
  }
  const bool compare = prim == "eq" || prim == "ne" || prim == "lt" || prim == "le" ||
                       prim == "gt" || prim == "ge";
  std::vector<ShardedType> ops;
  DType out = DType::kI32;
  for (ValueId v : operands) {
    const ValueInfo& i = info(tr, v);
    std::vector<int64_t> dims(r - i.shape.rank(), 1);  // jnp's rank promotion
    dims.insert(dims.end(), i.shape.dims().begin(), i.shape.dims().end());
    PartitionSpec::DimAxes none;
    std::vector<PartitionSpec::DimAxes> spec(r - i.shape.rank(), none);
    for (int d = 0; d < i.shape.rank(); ++d) {
      PartitionSpec::DimAxes axes;
      for (const std::string& a : i.spec->dim_or_none(d))
        if (is_explicit(a)) axes.push_back(a);
      spec.push_back(axes);
    }
    const bool predicate = prim == "select_n" && ops.empty();  // not the result's dtype
    ops.push_back({std::string(dtype_name(i.dtype)), Shape(dims), PartitionSpec(spec)});
    if (!predicate && i.dtype != DType::kI32 && out == DType::kI32) out = i.dtype;  // promoted
  }
  const Result<PartitionSpec> s =
      broadcast_sharding(prim, compare ? "bool" : dtype_name(out), ops, mesh);
  return s.ok() ? ok_status() : s.status();
}

Result<ValueId> add(Trace& tr, ValueId a, ValueId b) {
  return elementwise(tr, "add", "add", OpKind::kAdd, a, b);
}
Result<ValueId> multiply(Trace& tr, ValueId a, ValueId b) {
  return elementwise(tr, "multiply", "mul", OpKind::kMul, a, b);
}
Result<ValueId> subtract(Trace& tr, ValueId a, ValueId b) {
  ENG_RETURN_IF_ERROR(check_elementwise_sharding(tr, "sub", {a, b}));
  ENG_RETURN_IF_ERROR(promote_int(tr, a, b));
  return elementwise(tr, "subtract", "sub", OpKind::kAdd, a, tr.builder().scale(b, -1.0));
}
Result<ValueId> divide(Trace& tr, ValueId a, ValueId b) {
  ENG_RETURN_IF_ERROR(check_elementwise_sharding(tr, "div", {a, b}));
  ENG_ASSIGN_OR_RETURN(ValueId r, unary(tr, "reciprocal", b));
  return elementwise(tr, "divide", "div", OpKind::kMul, a, r);
}
Result<ValueId> scale(Trace& tr, ValueId x, double c, bool divide) {
  if (info(tr, x).dtype == DType::kI32 && (divide || c != std::trunc(c))) {
    ENG_ASSIGN_OR_RETURN(x, astype(tr, x, DType::kF32));
  }
  return tr.builder().scale(x, c);
}

Result<ValueId> unary(Trace& tr, std::string_view name, ValueId x) {
  std::vector<std::string> names;
  for (int k = 0; k < kNumOps; ++k) {
    const OpKind kind = static_cast<OpKind>(k);
    if (op_class(kind) != OpClass::kUnary) continue;
    if (op_name(kind) == name) {
      // JAX's promote_args_inexact: sin, exp, sqrt ... of an int32 array compute in float32
      // (jnp.sin(np.arange(8)) is f32[8]); abs, sign and floor keep an integer dtype in JAX,
      // which the engine's kernels lack, so they stay errors on int32.
      const bool keeps_int = name == "abs" || name == "sign" || name == "floor";
      if (!keeps_int && info(tr, x).dtype == DType::kI32) {
        ENG_ASSIGN_OR_RETURN(x, astype(tr, x, DType::kF32));
      }
      ENG_RETURN_IF_ERROR(need_float(tr, name, x));
      return tr.builder().emit(kind, {x})[0];
    }
    names.emplace_back(op_name(kind));
  }
  return invalid_argument("no unary op '{}' in the engine's op table (it has: {})", name,
                          fmt::join(names, ", "));
}

Status check_spec(const Trace& tr, const PartitionSpec& spec, const Shape& shape,
                  std::string_view what) {
  Status s = NamedSharding{tr.mesh(), spec}.validate(shape);
  if (!s.ok()) return invalid_argument("{}: {}", what, s.message());
  return ok_status();
}

Result<ValueId> matmul(Trace& tr, ValueId a, ValueId b, const std::optional<PartitionSpec>& out) {
  // float32, or int32 on both sides (the engine's wrapping int32 matmul, as jnp's int32 dot);
  // int32 beside float32 computes in float32 (JAX's promotion).
  ENG_RETURN_IF_ERROR(promote_int(tr, a, b));
  if (info(tr, a).dtype != DType::kI32 || info(tr, b).dtype != DType::kI32) {
    ENG_RETURN_IF_ERROR(need_f32(tr, "matmul", a));
    ENG_RETURN_IF_ERROR(need_f32(tr, "matmul", b));
  }
  const Shape sa = info(tr, a).shape, sb = info(tr, b).shape;
  if (sa.rank() == 0 || sb.rank() == 0)
    return invalid_argument("matmul: operands must have rank >= 1, got {} and {} (use multiply)",
                            py_shape(sa), py_shape(sb));
  if (sb.rank() > 2)
    return invalid_argument(
        "matmul: a batched right operand {} is not supported (the engine's matmul has no batch "
        "dims; left operand {})",
        py_shape(sb), py_shape(sa));
  if (sa[sa.rank() - 1] != sb[0])
    return invalid_argument(
        "dot_general requires contracting dimensions to have the same shape, got ({},) and "
        "({},): matmul of {} and {}",
        sa[sa.rank() - 1], sb[0], py_shape(sa), py_shape(sb));
  // The op wants rank >= 2 on both sides: vectors become (1, K) and (K, 1), removed after.
  const bool va = sa.rank() == 1, vb = sb.rank() == 1;
  std::vector<int64_t> result(sa.dims().begin(), sa.dims().end() - 1);
  if (!vb) result.push_back(sb[1]);
  if (out && (va || vb))
    return invalid_argument(
        "matmul: out_sharding is supported for operands of rank >= 2, got {} and {}", py_shape(sa),
        py_shape(sb));
  std::vector<std::string> out_logical;
  if (out) {
    ENG_RETURN_IF_ERROR(check_spec(tr, *out, Shape(result), "matmul out_sharding"));
    for (size_t i = 0; i < result.size(); ++i)
      out_logical.push_back(tr.logical_name(out->dim_or_none(static_cast<int>(i))));
  }
  if (va) a = tr.builder().reshape(a, Shape{1, sa[0]});
  if (vb) b = tr.builder().reshape(b, Shape{sb[0], 1});
  const int a_split = info(tr, a).shape.rank() - 1;
  ValueId y = tr.builder().matmul(a, b, a_split, 1, false, false, std::move(out_logical));
  if (va || vb) y = tr.builder().reshape(y, Shape(result));
  return y;
}

Result<ValueId> reshape(Trace& tr, ValueId x, std::vector<int64_t> dims) {
  const Shape s = info(tr, x).shape;
  ENG_RETURN_IF_ERROR(check_rank(static_cast<int>(dims.size()), "reshape",
                                 fmt::format("({})", fmt::join(dims, ", "))));
  int fill = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1 && fill < 0) {
      fill = static_cast<int>(i);
      continue;
    }
    if (dims[i] < 0)
      return invalid_argument("reshape: cannot reshape {} into shape ({}): bad dimension {}",
                              py_shape(s), fmt::join(dims, ", "), dims[i]);
    if (dims[i] != 0 && known > kMaxTensorElements / dims[i])
      return invalid_argument("reshape: shape ({}) is too large", fmt::join(dims, ", "));
    known *= dims[i];
  }
  if (fill >= 0 && known != 0 && s.numel() % known == 0) dims[fill] = s.numel() / known;
  Shape target(dims);
  if ((fill >= 0 && dims[fill] < 0) || target.numel() != s.numel())
    return invalid_argument("cannot reshape array of shape {} (size {}) into shape ({})",
                            py_shape(s), s.numel(), fmt::join(dims, ", "));
  if (target == s) return x;
  return tr.builder().reshape(x, target);
}

Result<ValueId> sum(Trace& tr, ValueId x, std::optional<int> axis_arg, bool keepdims) {
  // float32, or int32 (jnp's int32 sum: the int32 matmul with ones, wrapping as XLA's).
  const DType dt = info(tr, x).dtype;
  if (dt != DType::kI32) ENG_RETURN_IF_ERROR(need_f32(tr, "sum", x));
  const Shape s = info(tr, x).shape;
  Builder& b = tr.builder();
  if (!axis_arg) {
    if (s.rank() == 0) return x;
    ValueId flat = b.reshape(x, Shape{1, s.numel()});
    ENG_ASSIGN_OR_RETURN(ValueId col, ones(tr, s.numel(), true, dt));
    ValueId y = b.matmul(flat, col, 1, 1, false, false, {"", ""});  // (1, 1), replicated
    return b.reshape(y, keepdims ? Shape(std::vector<int64_t>(s.rank(), 1)) : Shape{});
  }
  ENG_ASSIGN_OR_RETURN(const int axis, checked_axis("sum", *axis_arg, s.rank()));
  const Shape out = without_dim(s, axis, keepdims);
  const int64_t n = s[axis];
  if (axis == s.rank() - 1 && s.rank() >= 2) {  // (..., n) . (n, 1) -> (..., 1)
    ENG_ASSIGN_OR_RETURN(ValueId col, ones(tr, n, true, dt));
    ENG_ASSIGN_OR_RETURN(std::vector<std::string> keep, kept_logical(tr, x, axis, 1));
    return b.reshape(b.matmul(x, col, s.rank() - 1, 1, false, false, keep), out);
  }
  if (axis == 0) {  // (1, n) . (n, ...) -> (1, ...)
    ValueId v = s.rank() == 1 ? b.reshape(x, Shape{n, 1}) : x;
    ENG_ASSIGN_OR_RETURN(ValueId row, ones(tr, n, false, dt));
    ENG_ASSIGN_OR_RETURN(std::vector<std::string> keep, kept_logical(tr, v, 0, 0));
    keep.insert(keep.begin(), "");
    return b.reshape(b.matmul(row, v, 1, 1, false, false, keep), out);
  }
  if (n > 4096)
    return invalid_argument("sum: a middle axis ({} of shape {}) longer than 4096 is not supported",
                            axis, py_shape(s));
  ValueId acc = b.slice(x, axis, 0, 1);
  for (int64_t i = 1; i < n; ++i) acc = b.add(acc, b.slice(x, axis, i, 1));
  return b.reshape(acc, out);
}

Result<ValueId> mean(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims) {
  if (info(tr, x).dtype == DType::kI32) {  // an int32 mean is float32 (jnp.mean)
    ENG_ASSIGN_OR_RETURN(x, astype(tr, x, DType::kF32));
  }
  const Shape s = info(tr, x).shape;
  ENG_ASSIGN_OR_RETURN(ValueId total, sum(tr, x, axis, keepdims));
  const int64_t n = axis ? s.dim(normalize_axis(*axis, s.rank())) : s.numel();
  if (n == 0) return invalid_argument("mean: of an empty axis of {}", py_shape(s));
  return tr.builder().scale(total, 1.0 / static_cast<double>(n));
}

Result<ValueId> concatenate(Trace& tr, const std::vector<ValueId>& xs, int axis_arg) {
  if (xs.empty()) return invalid_argument("concatenate: need at least one array to concatenate");
  const ValueInfo& first = info(tr, xs[0]);
  if (first.shape.rank() == 0)
    return invalid_argument("concatenate: zero-dimensional arrays cannot be concatenated");
  ENG_ASSIGN_OR_RETURN(const int axis, checked_axis("concatenate", axis_arg, first.shape.rank()));
  for (size_t k = 1; k < xs.size(); ++k) {
    const ValueInfo& v = info(tr, xs[k]);
    bool ok = v.shape.rank() == first.shape.rank() && v.dtype == first.dtype;
    for (int i = 0; ok && i < first.shape.rank(); ++i)
      ok = i == axis || v.shape[i] == first.shape[i];
    if (!ok)
      return invalid_argument(
          "concatenate: all the input arrays must have the same dtype and the same shape except "
          "along axis {}: array 1 is {}, array {} is {}",
          axis_arg, first.type_string(), k + 1, v.type_string());
  }
  if (xs.size() == 1) return xs[0];
  return tr.builder().concat(xs, axis);
}

Result<ValueId> slice(Trace& tr, ValueId x, int axis_arg, int64_t start, int64_t stop) {
  const Shape s = info(tr, x).shape;
  ENG_ASSIGN_OR_RETURN(const int axis, checked_axis("slice", axis_arg, s.rank()));
  const int64_t n = s[axis];
  auto clamp = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  start = clamp(start);
  stop = clamp(stop);
  if (stop <= start)
    return invalid_argument("slice: [{}:{}] of axis {} (size {}) of {} is empty (not supported)",
                            start, stop, axis_arg, n, py_shape(s));
  if (start == 0 && stop == n) return x;
  return tr.builder().slice(x, axis, start, stop - start);
}

Result<ValueId> astype(Trace& tr, ValueId x, DType dtype) {
  if (info(tr, x).dtype == dtype) return x;
  return tr.builder().convert(x, dtype);
}

Result<ValueId> rmsnorm(Trace& tr, ValueId x, ValueId scale, double eps) {
  ENG_RETURN_IF_ERROR(need_f32(tr, "rmsnorm", x));
  ENG_RETURN_IF_ERROR(need_f32(tr, "rmsnorm", scale));
  const Shape xs = info(tr, x).shape, ss = info(tr, scale).shape;
  if (xs.rank() < 2 || ss != Shape{xs.dim(-1)})
    return invalid_argument("rmsnorm: x {} must have rank >= 2 and scale {} be ({},)", py_shape(xs),
                            py_shape(ss), xs.rank() ? xs.dim(-1) : 0);
  if (!(eps > 0)) return invalid_argument("rmsnorm: eps must be > 0, got {}", eps);
  return tr.builder().rmsnorm(x, scale, eps).first;
}

Result<ValueId> softmax_cross_entropy(Trace& tr, ValueId logits, ValueId labels) {
  ENG_RETURN_IF_ERROR(need_f32(tr, "softmax_cross_entropy", logits));
  const Shape ls = info(tr, logits).shape, ts = info(tr, labels).shape;
  if (ls.rank() < 2 || ts != ls.slice(0, ls.rank() - 1) || info(tr, labels).dtype != DType::kI32)
    return invalid_argument(
        "softmax_cross_entropy: labels {} must be int32 of the logits' shape {} without its "
        "last dim (and logits of rank >= 2)",
        info(tr, labels).type_string(), py_shape(ls));
  return tr.builder().softmax_cross_entropy(logits, labels).first;
}

Result<ValueId> causal_attention(Trace& tr, ValueId q, ValueId k, ValueId v) {
  for (ValueId x : {q, k, v}) ENG_RETURN_IF_ERROR(need_f32(tr, "dot_product_attention", x));
  const Shape qs = info(tr, q).shape;
  if (qs.rank() != 4 || info(tr, k).shape != qs || info(tr, v).shape != qs)
    return invalid_argument(
        "dot_product_attention: query, key and value must be (B, T, N, H) of one shape, got {}, "
        "{} and {}",
        py_shape(qs), py_shape(info(tr, k).shape), py_shape(info(tr, v).shape));
  return tr.builder().attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(qs[3]))).first;
}

// ---- manual mode ------------------------------------------------------------------------

Result<std::vector<std::string>> group_axes(Trace& tr, std::string_view op,
                                            const std::vector<std::string>& axes) {
  if (!tr.manual())
    return invalid_argument("{}: unbound axis name {}: collectives run inside sl.shard_map", op,
                            axes.empty() ? "(none)" : "'" + axes[0] + "'");
  if (axes.empty()) return invalid_argument("{}: needs at least one axis name", op);
  std::vector<std::string> out = axes;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!tr.mesh().has_axis(out[i]))
      return invalid_argument("{}: axis '{}' is not in {}", op, out[i], tr.mesh().to_string());
    for (size_t j = 0; j < i; ++j)
      if (out[j] == out[i]) return invalid_argument("{}: axis '{}' named twice", op, out[i]);
  }
  std::sort(out.begin(), out.end(), [&](const std::string& a, const std::string& b) {
    return tr.mesh().axis_index(a) < tr.mesh().axis_index(b);
  });
  return out;
}

namespace {

ValueId collective(Trace& tr, OpKind kind, ValueId x, const std::vector<std::string>& axes, int dim,
                   int64_t shift = 0, bool fill_zero = false) {
  OpAttrs a;
  a.dim = dim;
  a.mesh_axes = axes;
  a.group_size = axes_size(tr.mesh(), axes);
  a.shift = shift;
  a.fill_zero = fill_zero;
  return tr.builder().emit(kind, {x}, a)[0];
}

}  // namespace

Result<ValueId> psum(Trace& tr, ValueId x, const std::vector<std::string>& axes_in) {
  ENG_ASSIGN_OR_RETURN(std::vector<std::string> axes, group_axes(tr, "psum", axes_in));
  if (info(tr, x).dtype != DType::kI32) ENG_RETURN_IF_ERROR(need_f32(tr, "psum", x));
  return collective(tr, OpKind::kAllReduce, x, axes, 0);
}

Result<ValueId> all_gather(Trace& tr, ValueId x, const std::vector<std::string>& axes_in, int axis,
                           bool tiled) {
  ENG_ASSIGN_OR_RETURN(std::vector<std::string> axes, group_axes(tr, "all_gather", axes_in));
  const Shape s = info(tr, x).shape;
  ENG_ASSIGN_OR_RETURN(const int a, checked_axis("all_gather", axis, s.rank() + (tiled ? 0 : 1)));
  if (!tiled) x = tr.builder().reshape(x, with_dim(s, a, 1));
  return collective(tr, OpKind::kAllGather, x, axes, a);
}

Result<ValueId> psum_scatter(Trace& tr, ValueId x, const std::vector<std::string>& axes_in,
                             int scatter_dimension, bool tiled) {
  ENG_ASSIGN_OR_RETURN(std::vector<std::string> axes, group_axes(tr, "psum_scatter", axes_in));
  if (info(tr, x).dtype != DType::kI32) ENG_RETURN_IF_ERROR(need_f32(tr, "psum_scatter", x));
  const Shape s = info(tr, x).shape;
  ENG_ASSIGN_OR_RETURN(const int d, checked_axis("psum_scatter", scatter_dimension, s.rank()));
  const int64_t g = axes_size(tr.mesh(), axes);
  if (tiled ? s[d] % g != 0 : s[d] != g)
    return invalid_argument("psum_scatter: dimension {} of {} is {}, {} the group size {}", d,
                            py_shape(s), s[d], tiled ? "not divisible by" : "not equal to", g);
  ValueId y = collective(tr, OpKind::kReduceScatter, x, axes, d);
  if (tiled) return y;
  return tr.builder().reshape(y, without_dim(info(tr, y).shape, d, false));
}

Result<ValueId> ppermute(Trace& tr, ValueId x, const std::string& axis,
                         const std::vector<std::pair<int64_t, int64_t>>& perm) {
  ENG_ASSIGN_OR_RETURN(std::vector<std::string> axes, group_axes(tr, "ppermute", {axis}));
  const int64_t g = axes_size(tr.mesh(), axes);
  if (perm.empty()) return invalid_argument("ppermute: perm is empty");
  const int64_t shift = ((perm[0].second - perm[0].first) % g + g) % g;
  std::vector<bool> src(g, false), dst(g, false);
  bool cyclic = true, partial = true;  // every pair moves by `shift` mod g / by exactly it
  for (const auto& [from, to] : perm) {
    if (from < 0 || from >= g || to < 0 || to >= g || src[from] || dst[to])
      return invalid_argument(
          "ppermute: perm pair ({}, {}) is out of range 0..{} or repeats a "
          "source or destination",
          from, to, g - 1);
    src[from] = dst[to] = true;
    cyclic = cyclic && ((to - from) % g + g) % g == shift;
    partial = partial && to - from == perm[0].second - perm[0].first;
  }
  const bool full = static_cast<int64_t>(perm.size()) == g;
  const int64_t step = perm[0].second - perm[0].first;
  if (full && cyclic) return collective(tr, OpKind::kCollectivePermute, x, axes, 0, shift);
  // A partial shift: every member whose destination r + step is in range sends.
  if (partial && static_cast<int64_t>(perm.size()) == g - std::abs(step))
    return collective(tr, OpKind::kCollectivePermute, x, axes, 0, step, true);
  return invalid_argument(
      "ppermute: only shifts are in the op set (every i -> (i + s) mod {} or "
      "every i -> i + s in range), got a perm of {} pairs",
      g, perm.size());
}

Result<ValueId> axis_index(Trace& tr, const std::string& axis) {
  ENG_ASSIGN_OR_RETURN(std::vector<std::string> axes, group_axes(tr, "axis_index", {axis}));
  OpAttrs a;
  a.mesh_axes = axes;
  a.group_size = axes_size(tr.mesh(), axes);
  a.size = 1;
  return tr.builder().emit(OpKind::kAxisIndex, {}, a)[0];
}

Result<int64_t> axis_size(Trace& tr, const std::vector<std::string>& axes_in) {
  ENG_ASSIGN_OR_RETURN(std::vector<std::string> axes, group_axes(tr, "axis_size", axes_in));
  return axes_size(tr.mesh(), axes);
}

Result<ValueId> sharding_constraint(Trace& tr, ValueId x, const PartitionSpec& named,
                                    bool assert_) {
  // Under use_abstract_mesh the spec names the view's axes (Trace::begin_view).
  const PartitionSpec spec = tr.view() ? tr.from_view(*tr.view(), named) : named;
  if (tr.manual())
    return invalid_argument("{}: inside sl.shard_map values are per-device blocks",
                            assert_ ? "with_sharding_constraint" : "reshard");
  const Shape s = info(tr, x).shape;
  ENG_RETURN_IF_ERROR(check_spec(tr, spec, s, assert_ ? "with_sharding_constraint" : "reshard"));
  if (!spec.partial().empty())
    return invalid_argument(
        "{}: a target {} with unreduced axes is not supported (the engine's constraints hold "
        "reduced values; sl.device_put places an unreduced array)",
        assert_ ? "with_sharding_constraint" : "reshard", spec.to_string());
  std::vector<std::string> logical;
  for (int i = 0; i < s.rank(); ++i) logical.push_back(tr.logical_name(spec.dim_or_none(i)));
  return assert_ ? tr.builder().raw_constraint(x, logical) : tr.builder().constraint(x, logical);
}

}  // namespace eng::frontend::np
