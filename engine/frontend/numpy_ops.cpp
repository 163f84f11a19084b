// engine/frontend/numpy_ops.cpp: comparisons, where, max/min/argmax, softmax, transpose,
// indexing and einsum as checked sequences of the engine's ops (numpy_ops.h).
#include "engine/frontend/numpy_ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace eng::frontend::np {
namespace {

using Dir = CompareDirection;

Shape shape_of(Trace& tr, ValueId v) { return tr.info(v).shape; }  // a copy: emits grow values

// a and b of one float dtype, broadcast to their common shape.
Result<std::pair<ValueId, ValueId>> broadcast_pair(Trace& tr, std::string_view op, ValueId a,
                                                  ValueId b) {
  ENG_RETURN_IF_ERROR(need_float(tr, op, a));
  ENG_RETURN_IF_ERROR(need_float(tr, op, b));
  if (info(tr, a).dtype != info(tr, b).dtype)
    return invalid_argument("{}: operands have different dtypes: {} and {} (use astype)", op,
                            dtype_long_name(info(tr, a).dtype), dtype_long_name(info(tr, b).dtype));
  const Result<Shape> s = broadcast_shapes(shape_of(tr, a), shape_of(tr, b));
  if (!s.ok()) return invalid_argument("{}: {}", op, s.status().message());
  ENG_ASSIGN_OR_RETURN(a, broadcast_to(tr, a, *s));
  ENG_ASSIGN_OR_RETURN(b, broadcast_to(tr, b, *s));
  return std::make_pair(a, b);
}

// b where `b dir a` holds or b is NaN, else a (same shapes): max for kGt, min for kLt.
ValueId pick(Trace& tr, ValueId a, ValueId b, Dir dir) {
  Builder& bl = tr.builder();
  const ValueId m = bl.select(bl.compare(b, a, dir), b, a);
  return bl.select(bl.compare(b, b, Dir::kNe), b, m);
}

// The max (kGt) or min (kLt) along dim d, which keeps size 1: halving rounds.
ValueId reduce_pick(Trace& tr, ValueId x, int d, Dir dir) {
  Builder& b = tr.builder();
  int64_t n = shape_of(tr, x)[d];
  while (n > 1) {
    const int64_t h = n / 2;
    ValueId m = pick(tr, b.slice(x, d, 0, h), b.slice(x, d, h, h), dir);
    if (n % 2) m = b.concat({m, b.slice(x, d, 2 * h, 1)}, d);
    x = m;
    n = h + n % 2;
  }
  return x;
}

Result<ValueId> reduce(Trace& tr, std::string_view op, ValueId x, std::optional<int> axis,
                       bool keepdims, Dir dir) {
  ENG_RETURN_IF_ERROR(need_float(tr, op, x));
  const Shape s = shape_of(tr, x);
  if (s.numel() == 0)
    return invalid_argument("{}: zero-size array to reduction operation {} which has no identity",
                            op, op);
  Builder& b = tr.builder();
  if (!axis) {
    if (s.rank() == 0) return x;
    ValueId flat = s.rank() == 1 ? x : b.reshape(x, Shape{s.numel()});
    ValueId r = reduce_pick(tr, flat, 0, dir);
    return b.reshape(r, keepdims ? Shape(std::vector<int64_t>(s.rank(), 1)) : Shape{});
  }
  ENG_ASSIGN_OR_RETURN(const int d, checked_axis(op, *axis, s.rank()));
  ValueId r = reduce_pick(tr, x, d, dir);
  return keepdims ? r : b.reshape(r, without_dim(s, d, false));
}

// The index of the first element equal to the max (kGt) / min (kLt) along axis, int32.
Result<ValueId> arg_reduce(Trace& tr, std::string_view op, ValueId x, std::optional<int> axis,
                           Dir dir) {
  ENG_RETURN_IF_ERROR(need_float(tr, op, x));
  if (shape_of(tr, x).numel() == 0)
    return invalid_argument("{}: attempt to get {} of an empty sequence", op, op);
  ENG_ASSIGN_OR_RETURN(x, astype(tr, x, DType::kF32));  // indices exact in f32
  if (!axis) {
    if (shape_of(tr, x).rank() != 1) {
      ENG_ASSIGN_OR_RETURN(x, reshape(tr, x, {-1}));
    }
    axis = 0;
  }
  const Shape s = shape_of(tr, x);
  ENG_ASSIGN_OR_RETURN(const int d, checked_axis(op, *axis, s.rank()));
  const int64_t n = s[d];
  ENG_ASSIGN_OR_RETURN(ValueId best, reduce(tr, op, x, d, true, dir));
  ENG_ASSIGN_OR_RETURN(best, broadcast_to(tr, best, s));
  std::vector<double> iota(n);
  for (int64_t i = 0; i < n; ++i) iota[i] = static_cast<double>(i);
  std::vector<int64_t> along(s.rank(), 1);
  along[d] = n;
  ENG_ASSIGN_OR_RETURN(ValueId idx, tr.constant(iota, Shape(along), DType::kF32));
  ENG_ASSIGN_OR_RETURN(idx, broadcast_to(tr, idx, s));
  ENG_ASSIGN_OR_RETURN(ValueId none, broadcast_to(tr, tr.scalar(n, DType::kF32), s));
  Builder& b = tr.builder();
  ValueId cand = b.select(b.compare(x, best, Dir::kEq), idx, none);
  ENG_ASSIGN_OR_RETURN(ValueId first, reduce(tr, op, cand, d, false, Dir::kLt));
  return b.convert(first, DType::kI32);
}

}  // namespace

Result<ValueId> compare(Trace& tr, ValueId a, ValueId b, CompareDirection direction) {
  static constexpr const char* kNames[] = {"equal",   "not_equal", "less",
                                           "less_equal", "greater", "greater_equal"};
  static constexpr const char* kPrims[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  const std::string_view op = kNames[static_cast<int>(direction)];
  ENG_RETURN_IF_ERROR(check_elementwise_sharding(tr, kPrims[static_cast<int>(direction)], {a, b}));
  const bool ia = info(tr, a).dtype == DType::kI32, ib = info(tr, b).dtype == DType::kI32;
  if (ia && ib) {  // int32 compares exactly (an int32 mask); jnp.equal(stage, 0)
    const Result<Shape> s = broadcast_shapes(shape_of(tr, a), shape_of(tr, b));
    if (!s.ok()) return invalid_argument("{}: {}", op, s.status().message());
    ENG_ASSIGN_OR_RETURN(a, broadcast_to(tr, a, *s));
    ENG_ASSIGN_OR_RETURN(b, broadcast_to(tr, b, *s));
    return tr.builder().compare(a, b, direction);
  }
  if (ia != ib) {  // int32 beside a float: the float's dtype, as JAX promotes
    ValueId& i = ia ? a : b;
    ENG_ASSIGN_OR_RETURN(i, astype(tr, i, info(tr, ia ? b : a).dtype));
  }
  ENG_ASSIGN_OR_RETURN(auto ab, broadcast_pair(tr, op, a, b));
  return tr.builder().compare(ab.first, ab.second, direction);
}

Result<ValueId> where(Trace& tr, ValueId cond, ValueId x, ValueId y) {
  ENG_RETURN_IF_ERROR(check_elementwise_sharding(tr, "select_n", {cond, x, y}));
  ENG_ASSIGN_OR_RETURN(auto xy, broadcast_pair(tr, "where", x, y));
  const DType dt = info(tr, xy.first).dtype;
  if (info(tr, cond).dtype != dt) cond = tr.builder().convert(cond, dt);  // nonzero stays so
  const Result<Shape> s = broadcast_shapes(shape_of(tr, cond), shape_of(tr, xy.first));
  if (!s.ok()) return invalid_argument("where: {}", s.status().message());
  ENG_ASSIGN_OR_RETURN(cond, broadcast_to(tr, cond, *s));
  ENG_ASSIGN_OR_RETURN(x, broadcast_to(tr, xy.first, *s));
  ENG_ASSIGN_OR_RETURN(y, broadcast_to(tr, xy.second, *s));
  return tr.builder().select(cond, x, y);
}

Result<ValueId> maximum(Trace& tr, ValueId a, ValueId b) {
  ENG_RETURN_IF_ERROR(check_elementwise_sharding(tr, "max", {a, b}));
  ENG_ASSIGN_OR_RETURN(auto ab, broadcast_pair(tr, "maximum", a, b));
  return pick(tr, ab.first, ab.second, Dir::kGt);
}
Result<ValueId> minimum(Trace& tr, ValueId a, ValueId b) {
  ENG_RETURN_IF_ERROR(check_elementwise_sharding(tr, "min", {a, b}));
  ENG_ASSIGN_OR_RETURN(auto ab, broadcast_pair(tr, "minimum", a, b));
  return pick(tr, ab.first, ab.second, Dir::kLt);
}

Result<ValueId> max(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims) {
  return reduce(tr, "max", x, axis, keepdims, Dir::kGt);
}
Result<ValueId> min(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims) {
  return reduce(tr, "min", x, axis, keepdims, Dir::kLt);
}
Result<ValueId> argmax(Trace& tr, ValueId x, std::optional<int> axis) {
  return arg_reduce(tr, "argmax", x, axis, Dir::kGt);
}
Result<ValueId> argmin(Trace& tr, ValueId x, std::optional<int> axis) {
  return arg_reduce(tr, "argmin", x, axis, Dir::kLt);
}

namespace {

// z = x - max, exp(z) and its sum over the axis (keepdims): softmax is exp(z) / sum,
// log_softmax z - log(sum), each from the one exp.
struct ShiftedExp {
  ValueId z, e, sum;
};
Result<ShiftedExp> shifted_exp(Trace& tr, std::string_view op, ValueId x, int axis) {
  ENG_RETURN_IF_ERROR(need_float(tr, op, x));
  ENG_ASSIGN_OR_RETURN(const int d, checked_axis(op, axis, shape_of(tr, x).rank()));
  ENG_ASSIGN_OR_RETURN(ValueId m, reduce(tr, op, x, d, true, Dir::kGt));
  ENG_ASSIGN_OR_RETURN(ValueId z, subtract(tr, x, m));
  ENG_ASSIGN_OR_RETURN(ValueId e, unary(tr, "exp", z));
  ENG_ASSIGN_OR_RETURN(ValueId s, sum(tr, e, d, true));
  return ShiftedExp{z, e, s};
}

}  // namespace

Result<ValueId> softmax(Trace& tr, ValueId x, int axis) {
  ENG_ASSIGN_OR_RETURN(const ShiftedExp zs, shifted_exp(tr, "softmax", x, axis));
  ENG_ASSIGN_OR_RETURN(ValueId r, unary(tr, "reciprocal", zs.sum));
  return multiply(tr, zs.e, r);
}

Result<ValueId> log_softmax(Trace& tr, ValueId x, int axis) {
  ENG_ASSIGN_OR_RETURN(const ShiftedExp zs, shifted_exp(tr, "log_softmax", x, axis));
  ENG_ASSIGN_OR_RETURN(ValueId l, unary(tr, "log", zs.sum));
  return subtract(tr, zs.z, l);
}

Result<ValueId> transpose(Trace& tr, ValueId x, std::vector<int> axes) {
  const Shape s = shape_of(tr, x);
  const int r = s.rank();
  if (r > kMaxTransposeRank)
    return invalid_argument("transpose: an operand of rank {} (the kernel transposes up to rank {})",
                            r, kMaxTransposeRank);
  if (axes.empty())
    for (int i = r - 1; i >= 0; --i) axes.push_back(i);
  std::vector<int64_t> perm;
  std::vector<bool> seen(r, false);
  bool ok = static_cast<int>(axes.size()) == r;
  for (size_t i = 0; ok && i < axes.size(); ++i) {
    ENG_ASSIGN_OR_RETURN(const int a, checked_axis("transpose", axes[i], r));
    ok = !seen[a];
    seen[a] = true;
    perm.push_back(a);
  }
  if (!ok)
    return invalid_argument(
        "transpose permutation isn't a permutation of operand dimensions, got permutation ({}) "
        "for operand shape {}",
        fmt::join(axes, ", "), py_shape(s));
  bool identity = true;
  for (int i = 0; i < r; ++i) identity = identity && perm[i] == i;
  if (identity) return x;
  return tr.builder().transpose(x, perm);
}

// ---- indexing ------------------------------------------------------------------------------

namespace {

// x[..., i, ...] along d, that dim removed: a slice and a reshape (both differentiable).
ValueId take(Trace& tr, ValueId x, int d, int64_t i) {
  Builder& b = tr.builder();
  return b.reshape(b.slice(x, d, i, 1), without_dim(shape_of(tr, x), d, false));
}

// x[start:stop:step] along d (step > 0; numpy's clamping), which keeps its position.
Result<ValueId> slice_dim(Trace& tr, ValueId x, int d, const IndexItem& it) {
  const int64_t n = shape_of(tr, x)[d];
  int64_t step = it.step.value_or(1);
  if (step == 0) return invalid_argument("index: slice step cannot be zero");
  if (step < 0)
    return invalid_argument("index: a negative slice step ({}) is not supported (the op set has "
                            "no reverse)",
                            step);
  step = std::min<int64_t>(step, std::max<int64_t>(n, 1));  // larger steps take one element
  auto clamp = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  const int64_t start = clamp(it.start.value_or(0)), stop = clamp(it.stop.value_or(n));
  const int64_t len = stop > start ? (stop - start + step - 1) / step : 0;
  if (len == 0)
    return invalid_argument(
        "index: the slice {}:{}:{} of axis {} (size {}) is empty (empty arrays are not supported)",
        it.start ? fmt::format("{}", *it.start) : "", it.stop ? fmt::format("{}", *it.stop) : "",
        step, d, n);
  Builder& b = tr.builder();
  const int64_t span = std::min(n - start, len * step);
  if (start != 0 || span != n) x = b.slice(x, d, start, span);
  if (step == 1) return x;
  if (span < len * step) x = b.pad(x, d, 0, len * step);
  std::vector<int64_t> split = shape_of(tr, x).dims();
  split[d] = len;
  split.insert(split.begin() + d + 1, step);
  return take(tr, b.reshape(x, Shape(split)), d + 1, 0);
}

}  // namespace

Result<ValueId> index(Trace& tr, ValueId x, const std::vector<IndexItem>& items_in) {
  const Shape s = shape_of(tr, x);
  int regular = 0, ellipses = 0;
  for (const IndexItem& it : items_in) {
    regular += it.kind == IndexItem::kInteger || it.kind == IndexItem::kSlice;
    ellipses += it.kind == IndexItem::kEllipsis;
  }
  if (ellipses > 1)
    return invalid_argument("index: an index can only have a single ellipsis ('...')");
  if (regular > s.rank())
    return invalid_argument("Too many indices: {}-dimensional array indexed with {} regular {}.",
                            s.rank(), regular, regular == 1 ? "index" : "indices");
  std::vector<IndexItem> items;  // the ellipsis expanded, trailing dims filled with ':'
  for (const IndexItem& it : items_in) {
    if (it.kind != IndexItem::kEllipsis) {
      items.push_back(it);
      continue;
    }
    for (int k = 0; k < s.rank() - regular; ++k) items.push_back(IndexItem{});
  }
  if (ellipses == 0)
    for (int k = regular; k < s.rank(); ++k) items.push_back(IndexItem{});
  std::vector<std::pair<int, int64_t>> ints;  // (dim, index)
  std::vector<int64_t> out;                   // the result's shape
  int d = 0;
  for (const IndexItem& it : items) {
    if (it.kind == IndexItem::kNewAxis) {
      out.push_back(1);
      continue;
    }
    const int64_t n = s[d];
    if (it.kind == IndexItem::kInteger) {
      if (it.index < -n || it.index >= n)
        return invalid_argument("index {} is out of bounds for axis {} with size {}", it.index, d,
                                n);
      ints.emplace_back(d, it.index < 0 ? it.index + n : it.index);
    } else {
      ENG_ASSIGN_OR_RETURN(x, slice_dim(tr, x, d, it));
      out.push_back(shape_of(tr, x)[d]);
    }
    ++d;
  }
  for (auto k = ints.rbegin(); k != ints.rend(); ++k)
    x = take(tr, x, k->first, k->second);
  if (Shape(out) != shape_of(tr, x)) x = tr.builder().reshape(x, Shape(out));
  return x;
}

// ---- einsum --------------------------------------------------------------------------------

namespace {

struct Subscripts {
  std::vector<std::string> in;
  std::string out;
};

Result<Subscripts> parse_subscripts(const std::string& text, const std::vector<ValueId>& xs,
                                    Trace& tr) {
  std::string t;
  for (char c : text)
    if (c != ' ') t += c;
  Subscripts sub;
  const size_t arrow = t.find("->");
  const std::string lhs = t.substr(0, arrow);
  for (size_t at = 0;;) {
    const size_t comma = lhs.find(',', at);
    sub.in.push_back(lhs.substr(at, comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  for (char c : t)
    if (!std::isalpha(static_cast<unsigned char>(c)) && c != ',' && c != '-' && c != '>')
      return invalid_argument("einsum: subscripts '{}': only letters are supported as labels "
                              "(no ellipsis), got '{}'",
                              text, c);
  if (sub.in.size() != xs.size())
    return invalid_argument("einsum: {} operands provided to einstein sum function than "
                            "specified in the subscripts string '{}' ({} vs {})",
                            xs.size() > sub.in.size() ? "more" : "fewer", text, xs.size(),
                            sub.in.size());
  std::map<char, int> count;
  for (const std::string& term : sub.in)
    for (char c : term) ++count[c];
  if (arrow != std::string::npos) {
    sub.out = t.substr(arrow + 2);
    for (size_t i = 0; i < sub.out.size(); ++i) {
      if (!count.count(sub.out[i]))
        return invalid_argument("einstein sum subscripts string included output subscript '{}' "
                                "which never appeared in an input",
                                sub.out[i]);
      if (sub.out.find(sub.out[i], i + 1) != std::string::npos)
        return invalid_argument("einstein sum subscripts string includes output subscript '{}' "
                                "multiple times",
                                sub.out[i]);
    }
  } else {
    for (const auto& [c, k] : count)
      if (k == 1) sub.out += c;
  }
  std::map<char, int64_t> size;
  for (size_t k = 0; k < xs.size(); ++k) {
    const Shape s = shape_of(tr, xs[k]);
    const std::string& term = sub.in[k];
    if (static_cast<int>(term.size()) != s.rank())
      return invalid_argument("Einstein sum subscript {} does not contain the correct number of "
                              "indices for operand {}.",
                              term, k);
    for (size_t i = 0; i < term.size(); ++i) {
      if (term.find(term[i], i + 1) != std::string::npos)
        return invalid_argument("einsum: label '{}' repeats in operand {} ('{}'): diagonals "
                                "and traces are not supported",
                                term[i], k, term);
      auto [it, fresh] = size.emplace(term[i], s[static_cast<int>(i)]);
      if (!fresh && it->second != s[static_cast<int>(i)])
        return invalid_argument(
            "Size of label '{}' for operand {} ({}) does not match previous terms ({}).", term[i],
            k, s[static_cast<int>(i)], it->second);
    }
  }
  return sub;
}

// x (labelled `have`) summed over the labels no other term needs; `have` updated.
Result<ValueId> sum_own(Trace& tr, ValueId x, std::string& have, const std::string& keep) {
  for (int i = static_cast<int>(have.size()) - 1; i >= 0; --i) {
    if (keep.find(have[i]) != std::string::npos) continue;
    ENG_ASSIGN_OR_RETURN(x, sum(tr, x, i, false));
    have.erase(have.begin() + i);
  }
  return x;
}

// x (labelled `have`) transposed into the order `want` (the same labels).
Result<ValueId> to_order(Trace& tr, ValueId x, const std::string& have, const std::string& want) {
  std::vector<int> perm;
  for (char c : want) perm.push_back(static_cast<int>(have.find(c)));
  return transpose(tr, x, perm);
}

std::string labels_in(const std::string& from, auto&& pred) {
  std::string r;
  for (char c : from)
    if (pred(c)) r += c;
  return r;
}

std::vector<int64_t> dims_of(const std::string& labels, const std::map<char, int64_t>& size) {
  std::vector<int64_t> d;
  for (char c : labels) d.push_back(size.at(c));
  return d;
}

// The labels' logical names under out_sharding (by their place in `out`), "" for a size-1
// filler (no label); empty without out_sharding.
std::vector<std::string> out_names(Trace& tr, const std::optional<PartitionSpec>& spec,
                                   const std::string& out, const std::string& labels) {
  std::vector<std::string> names;
  if (!spec) return names;
  for (char c : labels)
    names.push_back(tr.logical_name(spec->dim_or_none(static_cast<int>(out.find(c)))));
  if (names.empty()) names.push_back("");
  return names;
}

std::vector<int64_t> cat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

constexpr int64_t kMaxBatch = 256;  // batch labels are looped over: one matmul per element

// Two operands whose every label is in the output or in the other operand: batch labels
// (both and output) looped over, contracted labels (both, not output) one matmul's K.
Result<ValueId> einsum_pair(Trace& tr, const std::string& la, const std::string& lb,
                            const std::string& out, ValueId a, ValueId b,
                            const std::map<char, int64_t>& size,
                            const std::optional<PartitionSpec>& spec) {
  auto in = [](const std::string& l) { return [&l](char c) { return l.find(c) != l.npos; }; };
  const std::string batch = labels_in(out, [&](char c) { return in(la)(c) && in(lb)(c); });
  const std::string contract = labels_in(la, [&](char c) { return in(lb)(c) && !in(out)(c); });
  const std::string afree = labels_in(out, [&](char c) { return in(la)(c) && !in(lb)(c); });
  const std::string bfree = labels_in(out, [&](char c) { return in(lb)(c) && !in(la)(c); });
  ENG_ASSIGN_OR_RETURN(a, to_order(tr, a, la, batch + afree + contract));
  ENG_ASSIGN_OR_RETURN(b, to_order(tr, b, lb, batch + contract + bfree));
  // The matmul wants >= 1 free and contracted dim a side: size-1 fillers where there are none.
  auto or_one = [](std::vector<int64_t> d) { return d.empty() ? std::vector<int64_t>{1} : d; };
  const std::vector<int64_t> bd = dims_of(batch, size);
  const std::vector<int64_t> fa = or_one(dims_of(afree, size)), fb = or_one(dims_of(bfree, size));
  const std::vector<int64_t> kc = or_one(dims_of(contract, size));
  std::vector<std::string> names = out_names(tr, spec, out, afree);
  if (spec) {
    const std::vector<std::string> nb = out_names(tr, spec, out, bfree);
    names.insert(names.end(), nb.begin(), nb.end());
  }
  Builder& bl = tr.builder();
  int64_t n = 1;
  for (int64_t d : bd) n *= d;
  if (n > kMaxBatch)
    return invalid_argument("einsum: '{}' has {} batch elements (labels '{}'), more than {}: "
                            "the engine's matmul has no batch dims, so each is one matmul",
                            out, n, batch, kMaxBatch);
  const std::vector<int64_t> lead = batch.empty() ? std::vector<int64_t>{} : std::vector{n};
  ValueId A = bl.reshape(a, Shape(cat(cat(lead, fa), kc)));
  ValueId B = bl.reshape(b, Shape(cat(cat(lead, kc), fb)));
  auto mm = [&](ValueId x, ValueId w) {
    return bl.matmul(x, w, static_cast<int>(fa.size()), static_cast<int>(kc.size()), false, false,
                     names);
  };
  ValueId y;
  if (batch.empty()) {
    y = mm(A, B);
  } else {
    std::vector<ValueId> parts;
    for (int64_t i = 0; i < n; ++i) {
      ValueId yi = mm(take(tr, A, 0, i), take(tr, B, 0, i));
      parts.push_back(bl.reshape(yi, Shape(cat({1}, cat(fa, fb)))));
    }
    y = parts.size() == 1 ? parts[0] : bl.concat(parts, 0);
  }
  const std::vector<int64_t> want = cat(cat(bd, dims_of(afree, size)), dims_of(bfree, size));
  if (shape_of(tr, y) != Shape(want)) y = bl.reshape(y, Shape(want));
  ENG_ASSIGN_OR_RETURN(y, to_order(tr, y, batch + afree + bfree, out));
  if (spec && !batch.empty()) return sharding_constraint(tr, y, *spec, false);
  return y;
}

}  // namespace

Result<ValueId> einsum(Trace& tr, const std::string& text, const std::vector<ValueId>& xs_in,
                       const std::optional<PartitionSpec>& out_sharding) {
  if (xs_in.empty() || xs_in.size() > 2)
    return invalid_argument("einsum: one or two operands are supported, got {}", xs_in.size());
  for (ValueId x : xs_in) ENG_RETURN_IF_ERROR(need_float(tr, "einsum", x));
  ENG_ASSIGN_OR_RETURN(Subscripts sub, parse_subscripts(text, xs_in, tr));
  std::map<char, int64_t> size;
  for (size_t k = 0; k < xs_in.size(); ++k)
    for (size_t i = 0; i < sub.in[k].size(); ++i)
      size[sub.in[k][i]] = shape_of(tr, xs_in[k])[static_cast<int>(i)];
  const std::vector<int64_t> out_dims = dims_of(sub.out, size);
  if (out_sharding)
    ENG_RETURN_IF_ERROR(check_spec(tr, *out_sharding, Shape(out_dims), "einsum out_sharding"));
  std::vector<ValueId> xs = xs_in;
  const bool two = xs.size() == 2;
  for (size_t k = 0; k < xs.size(); ++k) {
    const std::string keep = sub.out + (two ? sub.in[1 - k] : "");
    ENG_ASSIGN_OR_RETURN(xs[k], sum_own(tr, xs[k], sub.in[k], keep));
  }
  if (!two) {
    ENG_ASSIGN_OR_RETURN(ValueId y, to_order(tr, xs[0], sub.in[0], sub.out));
    if (!out_sharding) return y;
    return sharding_constraint(tr, y, *out_sharding, false);
  }
  return einsum_pair(tr, sub.in[0], sub.in[1], sub.out, xs[0], xs[1], size, out_sharding);
}

}  // namespace eng::frontend::np
