// engine/ir/builder.cpp: shape, dtype and logical-axis inference for every op.
#include "engine/ir/builder.h"

#include <fmt/format.h>

#include <cmath>

#include "engine/base/check.h"
#include "engine/ir/op_table.h"

namespace eng {

namespace {

using Logical = std::vector<std::string>;

Logical logical_slice(const ValueInfo& v, int begin, int end) {
  if (v.logical.empty()) return Logical(end - begin);
  return Logical(v.logical.begin() + begin, v.logical.begin() + end);
}

Logical concat(Logical a, const Logical& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

ValueInfo like(const ValueInfo& v) {
  ValueInfo out;
  out.shape = v.shape;
  out.dtype = v.dtype;
  out.logical = v.logical;
  return out;
}

ValueInfo make(Shape shape, DType dtype = DType::kF32, Logical logical = {}) {
  ValueInfo out;
  out.shape = std::move(shape);
  out.dtype = dtype;
  out.logical = std::move(logical);
  return out;
}

ValueInfo scalar(DType dtype = DType::kF32) { return make(Shape{}, dtype); }

// JAX's promotion among the float types here: bf16 only when every float operand is bf16
// (bf16 . bf16 -> bf16, accumulated in f32 by the kernels; bf16 + f32 -> f32); i32 ignored.
DType promote(const std::vector<const ValueInfo*>& in) {
  bool any_float = false;
  for (const ValueInfo* v : in) {
    if (v->dtype == DType::kI32) continue;
    any_float = true;
    if (v->dtype != DType::kBF16) return DType::kF32;
  }
  return any_float ? DType::kBF16 : DType::kF32;
}

void check_same_shape(OpKind kind, const ValueInfo& a, const ValueInfo& b) {
  ENG_CHECK(a.shape == b.shape, "{}: shapes differ: {} vs {}", op_name(kind), a.shape.to_string(),
            b.shape.to_string());
}

void check_rank(OpKind kind, const ValueInfo& v, int rank, const char* what) {
  ENG_CHECK(v.shape.rank() == rank, "{}: {} must have rank {}, got {}", op_name(kind), what, rank,
            v.shape.to_string());
}

ValueInfo infer_matmul(const ValueInfo& a, const ValueInfo& b, const OpAttrs& at) {
  const int ra = a.shape.rank(), rb = b.shape.rank();  // the splits' range, then DotDims
  ENG_CHECK(at.a_split > 0 && at.a_split < ra && at.b_split > 0 && at.b_split < rb,
            "matmul: split points ({}, {}) out of range for {} x {}", at.a_split, at.b_split,
            a.shape.to_string(), b.shape.to_string());
  const DotDims d = dot_dims(at, a.shape, b.shape);
  const int64_t kb = b.shape.prod(d.b_contracting_begin, d.b_contracting_end);
  ENG_CHECK(d.K == kb, "matmul: inner dims differ: {} x {} (a_split={}, b_split={}, trans=({}, {}))",
            a.shape.to_string(), b.shape.to_string(), at.a_split, at.b_split, at.trans_a,
            at.trans_b);
  Shape sa = a.shape.slice(d.a_free_begin, d.a_free_end);
  Shape sb = b.shape.slice(d.b_free_begin, d.b_free_end);
  Logical la = logical_slice(a, d.a_free_begin, d.a_free_end);
  Logical lb = logical_slice(b, d.b_free_begin, d.b_free_end);
  return make(sa.concat(sb), promote({&a, &b}), concat(la, lb));
}

using In = std::vector<const ValueInfo*>;
using Outs = std::vector<ValueInfo>;
using InferFn = Outs (*)(OpKind, const In&, const OpAttrs&);

void n_in(OpKind kind, const In& in, size_t n) {
  ENG_CHECK(in.size() == n, "{}: expected {} inputs, got {}", op_name(kind), n, in.size());
}

// An optional trailing i32 () input (the vocab-block offset of per-device programs; op.h).
bool has_offset(const In& in, size_t n, size_t i) {
  return in.size() == n ||
         (in.size() == n + 1 && in[i]->dtype == DType::kI32 && in[i]->shape.rank() == 0);
}

Outs infer_embed_lookup(OpKind kind, const In& in, const OpAttrs&) {
  ENG_CHECK(has_offset(in, 2, 2),
            "embed_lookup: expected (table, ids[, offset i32 ()]), got {} inputs", in.size());
  check_rank(kind, *in[0], 2, "table");
  ENG_CHECK(in[1]->dtype == DType::kI32, "embed_lookup: ids must be i32");
  Shape s = in[1]->shape.concat(Shape{in[0]->shape[1]});
  return {make(s, in[0]->dtype,
               concat(in[1]->logical.empty() ? Logical(in[1]->shape.rank()) : in[1]->logical,
                      logical_slice(*in[0], 1, 2)))};
}

Outs infer_one_hot(OpKind kind, const In& in, const OpAttrs& at) {
  n_in(kind, in, 1);
  ENG_CHECK(in[0]->dtype == DType::kI32 && at.depth > 0, "one_hot: needs i32 ids and depth > 0");
  Logical l = in[0]->logical.empty() ? Logical(in[0]->shape.rank()) : in[0]->logical;
  l.push_back("");  // Builder::one_hot names it
  return {make(in[0]->shape.concat(Shape{at.depth}), DType::kF32, l)};
}

Outs infer_rmsnorm(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, 2);
  const Shape& x = in[0]->shape;
  ENG_CHECK(in[1]->shape == Shape{x.dim(-1)}, "rmsnorm: scale {} does not match x {}",
            in[1]->shape.to_string(), x.to_string());
  return {like(*in[0]), make(Shape{x.prod(0, x.rank() - 1)})};
}

Outs infer_layernorm(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, 3);
  const Shape& x = in[0]->shape;
  ENG_CHECK(in[1]->shape == Shape{x.dim(-1)} && in[2]->shape == Shape{x.dim(-1)},
            "layernorm: scale {} and bias {} must be ({}) for x {}", in[1]->shape.to_string(),
            in[2]->shape.to_string(), x.dim(-1), x.to_string());
  const Shape rows{x.prod(0, x.rank() - 1)};
  return {like(*in[0]), make(rows), make(rows)};
}

Outs infer_layernorm_grad(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, 5);  // x, scale, mean, rstd, dy -> dx, dscale, dbias
  return {like(*in[0]), like(*in[1]), like(*in[1])};
}

// bias_add: the bias has x's trailing dims; bias_add_grad: dy summed to its trailing `dim` dims.
Outs infer_bias_add(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, 2);
  const Shape& x = in[0]->shape;
  const int r = in[1]->shape.rank();
  ENG_CHECK(r >= 1 && r <= x.rank() && x.slice(x.rank() - r, x.rank()) == in[1]->shape,
            "bias_add: bias {} is not the trailing dims of x {}", in[1]->shape.to_string(),
            x.to_string());
  return {like(*in[0])};
}

Outs infer_bias_add_grad(OpKind kind, const In& in, const OpAttrs& at) {
  n_in(kind, in, 1);
  const ValueInfo& dy = *in[0];
  const int r = dy.shape.rank();
  ENG_CHECK(at.dim >= 1 && at.dim <= r, "bias_add_grad: dim {} out of range for dy {}", at.dim,
            dy.shape.to_string());
  return {make(dy.shape.slice(r - at.dim, r), dy.dtype, logical_slice(dy, r - at.dim, r))};
}

Outs infer_rope(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, 2);
  check_rank(kind, *in[0], 4, "x");
  ENG_CHECK(in[1]->shape == in[0]->shape.slice(0, 2) && in[1]->dtype == DType::kI32,
            "rope: positions {} must be i32 (B, T) of x {}", in[1]->shape.to_string(),
            in[0]->shape.to_string());
  ENG_CHECK(in[0]->shape[3] % 2 == 0, "rope: head dim {} must be even", in[0]->shape[3]);
  return {like(*in[0])};
}

// The optional trailing segment ids of attention (op.h): i32 (B, T) of q (B, T, H, D).
bool has_segment_ids(const In& in, size_t n) {
  if (in.size() == n) return false;
  const Shape& q = in[0]->shape;
  ENG_CHECK(in.size() == n + 1 && in[n]->dtype == DType::kI32 && q.rank() == 4 &&
                in[n]->shape == Shape({q[0], q[1]}),
            "attention: segment ids must be i32 (B, T) of q {}, got {} inputs", q.to_string(),
            in.size());
  return true;
}

Outs infer_attention(OpKind kind, const In& in, const OpAttrs&) {
  ENG_CHECK(in.size() >= 3, "attention: expected (q, k, v[, segment_ids]), got {} inputs",
            in.size());
  has_segment_ids(in, 3);
  check_rank(kind, *in[0], 4, "q");
  check_same_shape(kind, *in[0], *in[1]);
  check_same_shape(kind, *in[0], *in[2]);
  const Shape& q = in[0]->shape;
  return {like(*in[0]), make(Shape{q[0], q[2], q[1]})};
}

Outs infer_attention_grad(OpKind, const In& in, const OpAttrs&) {
  ENG_CHECK(in.size() >= 6, "attention_grad: expected (q, k, v, o, lse, do[, segment_ids]), got "
            "{} inputs", in.size());
  has_segment_ids(in, 6);
  return {like(*in[0]), like(*in[1]), like(*in[2])};
}

Outs infer_repeat_kv(OpKind kind, const In& in,
                     const OpAttrs& at) {  // (B,T,Hkv,D) <-> (B,T,Hkv*R,D)
  n_in(kind, in, 1);
  check_rank(kind, *in[0], 4, "x");
  ENG_CHECK(at.size >= 1, "{}: repeats must be positive, got {}", op_name(kind), at.size);
  ValueInfo out = like(*in[0]);
  std::vector<int64_t> dims(out.shape.dims().begin(), out.shape.dims().end());
  if (kind == OpKind::kRepeatKv) {
    dims[2] *= at.size;
  } else {
    ENG_CHECK(dims[2] % at.size == 0, "repeat_kv_grad: {} heads of {} not divisible by {}", dims[2],
              out.shape.to_string(), at.size);
    dims[2] /= at.size;
  }
  out.shape = Shape(dims);  // logical: x's (Builder::repeat_kv renames the heads dim)
  return {out};
}

// n same-shape inputs -> one output like the first (swiglu, add, mul, unary grads).
// Integer arithmetic (OpDef::integer): every operand i32 or none, and an integral kScale.
void check_integer_operands(OpKind kind, const In& in, const OpAttrs& at) {
  size_t ints = 0;
  for (const ValueInfo* v : in) ints += v->dtype == DType::kI32;
  if (ints == 0 || !has_integer_kernel(kind)) return;
  for (const ValueInfo* v : in)
    ENG_CHECK(v->dtype == DType::kI32, "{}: integer arithmetic needs every operand i32: {} vs {}",
              op_name(kind), in[0]->type_string(), v->type_string());
  ENG_CHECK(kind != OpKind::kScale || at.scale == std::trunc(at.scale),
            "scale: {} is not an integer, and {} is", at.scale, in[0]->type_string());
}

template <size_t N>
Outs infer_same_shape(OpKind kind, const In& in, const OpAttrs& at) {
  n_in(kind, in, N);
  for (size_t i = 1; i < N; ++i) check_same_shape(kind, *in[0], *in[i]);
  check_integer_operands(kind, in, at);
  ValueInfo out = like(*in[0]);
  if (out.dtype != DType::kI32) out.dtype = promote(in);  // kIncrement stays i32
  return {out};
}

Outs infer_convert(OpKind kind, const In& in, const OpAttrs& at) {
  n_in(kind, in, 1);
  ValueInfo out = like(*in[0]);
  out.dtype = at.dtype;
  return {out};
}

Outs infer_constraint(OpKind kind, const In& in, const OpAttrs& at) {
  n_in(kind, in, 1);
  ENG_CHECK(static_cast<int>(at.logical.size()) == in[0]->shape.rank(),
            "constraint: {} logical names for rank {}", at.logical.size(), in[0]->shape.rank());
  ValueInfo out = like(*in[0]);
  out.logical = logical_axis_names(at.logical);
  return {out};
}

// Logits f32 or bf16 (read in f32: MaxText's cast_logits_to_fp32 fused into the loss); xent and
// lse are f32; the grad's dlogits take the logits' dtype (the convert's VJP, fused too).
Outs infer_xent(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, 2);
  const Shape& l = in[0]->shape;
  ENG_CHECK(in[1]->shape == l.slice(0, l.rank() - 1) && in[1]->dtype == DType::kI32,
            "softmax_cross_entropy: targets {} do not match logits {}", in[1]->shape.to_string(),
            l.to_string());
  Logical lg = logical_slice(*in[0], 0, l.rank() - 1);
  return {make(in[1]->shape, DType::kF32, lg), make(in[1]->shape, DType::kF32, lg)};
}

Outs infer_masked_mean_loss(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, 2);
  ENG_CHECK(in[0]->shape == in[1]->shape, "masked_mean_loss: xent {} vs segmentation {}",
            in[0]->shape.to_string(), in[1]->shape.to_string());
  return {scalar(), scalar()};
}

Outs infer_embed_lookup_grad(OpKind, const In& in, const OpAttrs& at) {
  ENG_CHECK(has_offset(in, 2, 2),
            "embed_lookup_grad: expected (ids, dy[, offset i32 ()]), got {} inputs", in.size());
  const Shape& dy = in[1]->shape;
  Logical l{"", dy.rank() > 0 && !in[1]->logical.empty() ? in[1]->logical.back() : ""};
  return {make(Shape{at.depth, dy.dim(-1)}, in[1]->dtype, l)};  // a cotangent: dy's dtype
}

// The outputs like inputs `Like...` (rmsnorm_grad, attention_grad, swiglu_grad, ...).
template <size_t N, size_t... Like>
Outs infer_like(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, N);
  return {like(*in[Like])...};
}

Outs infer_xent_grad(OpKind, const In& in, const OpAttrs&) {
  ENG_CHECK(has_offset(in, 4, 4),
            "softmax_cross_entropy_grad: expected 4 inputs (5 with a vocab offset), got {}",
            in.size());
  return {like(*in[0])};
}

Outs infer_vocab_max(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, 1);
  const Shape& l = in[0]->shape;
  return {make(l.slice(0, l.rank() - 1))};
}

Outs infer_vocab_stats(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, 4);
  const Shape& l = in[0]->shape;
  const Shape rows = l.slice(0, l.rank() - 1);
  ENG_CHECK(in[1]->shape == rows && in[2]->shape == rows && in[2]->dtype == DType::kI32 &&
                in[3]->shape.rank() == 0 && in[3]->dtype == DType::kI32,
            "vocab_stats: (logits {}, max {}, targets {}, offset {}) do not fit", l.to_string(),
            in[1]->shape.to_string(), in[2]->shape.to_string(), in[3]->shape.to_string());
  return {make(rows), make(rows)};
}

Outs infer_xent_from_stats(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, 3);
  ENG_CHECK(in[1]->shape == in[0]->shape && in[2]->shape == in[0]->shape,
            "xent_from_stats: max, sumexp and picked must have one shape");
  return {make(in[0]->shape), make(in[0]->shape)};
}

Outs infer_masked_mean_loss_grad(OpKind, const In& in, const OpAttrs&) {  // (seg, weights[, dloss])
  ENG_CHECK(in.size() == 2 || in.size() == 3,
            "masked_mean_loss_grad: expected 2 or 3 inputs, got {}", in.size());
  ENG_CHECK(in[1]->shape.rank() == 0 && (in.size() == 2 || in[2]->shape.rank() == 0),
            "masked_mean_loss_grad: total_weights and dloss must be scalars");
  return {make(in[0]->shape, DType::kF32, in[0]->logical)};
}

// N inputs (0: at least one) -> one f32 scalar.
template <size_t N>
Outs infer_scalar(OpKind kind, const In& in, const OpAttrs&) {
  if (N == 0) {
    ENG_CHECK(!in.empty(), "{}: needs at least one input", op_name(kind));
  } else {
    n_in(kind, in, N);
  }
  return {scalar()};
}

Outs infer_adamw(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, 7);
  for (int i = 1; i < 4; ++i) check_same_shape(kind, *in[0], *in[i]);
  return {like(*in[0]), like(*in[2]), like(*in[3])};
}

// all_gather, reduce_scatter, dynamic_slice, all_to_all: dim (and dim2) scaled by the group.
Outs infer_regroup(OpKind kind, const In& in, const OpAttrs& at) {
  n_in(kind, in, 1);
  ValueInfo out = like(*in[0]);
  const int r = out.shape.rank();
  const int d = kind == OpKind::kAllToAll ? at.dim2 : at.dim;
  ENG_CHECK(at.dim >= 0 && at.dim < r && d >= 0 && d < r && at.group_size >= 1,
            "{}: dim {} / {} out of range for {}", op_name(kind), at.dim, d, out.shape.to_string());
  std::vector<int64_t> dims(out.shape.dims().begin(), out.shape.dims().end());
  if (kind == OpKind::kAllGather) {
    dims[at.dim] *= at.group_size;
  } else {
    ENG_CHECK(dims[at.dim] % at.group_size == 0, "{}: dim {} of {} not divisible by {}",
              op_name(kind), at.dim, out.shape.to_string(), at.group_size);
    dims[at.dim] /= at.group_size;
    if (kind == OpKind::kAllToAll) dims[at.dim2] *= at.group_size;
  }
  out.shape = Shape(dims);
  return {out};
}

Outs infer_reshape(OpKind kind, const In& in, const OpAttrs& at) {
  n_in(kind, in, 1);
  Shape ns{std::vector<int64_t>(at.new_shape.begin(), at.new_shape.end())};
  ENG_CHECK(ns.numel() == in[0]->shape.numel(), "reshape: {} to {} changes the element count",
            in[0]->shape.to_string(), ns.to_string());
  return {make(ns, in[0]->dtype)};
}

// slice, pad, shift: along at.dim.
Outs infer_rows(OpKind kind, const In& in, const OpAttrs& at) {
  n_in(kind, in, 1);
  ValueInfo out = like(*in[0]);
  const int r = out.shape.rank();
  ENG_CHECK(at.dim >= 0 && at.dim < r, "{}: dim {} out of range for {}", op_name(kind), at.dim,
            out.shape.to_string());
  if (kind == OpKind::kShift) return {out};
  const int64_t n = in[0]->shape[at.dim];
  std::vector<int64_t> dims(out.shape.dims().begin(), out.shape.dims().end());
  if (kind == OpKind::kSlice) {
    ENG_CHECK(at.start >= 0 && at.size >= 1 && at.start + at.size <= n,
              "slice: [{}, {}) out of range for dim {} of {}", at.start, at.start + at.size, at.dim,
              out.shape.to_string());
  } else {
    ENG_CHECK(at.start >= 0 && at.start + n <= at.size,
              "pad: {} rows at {} do not fit in {} (dim {} of {})", n, at.start, at.size, at.dim,
              out.shape.to_string());
  }
  dims[at.dim] = at.size;
  out.shape = Shape(dims);
  return {out};
}

// index_in_dim (x) -> x without dim; add_index_in_dim (update[, acc]) -> acc's shape.
Outs infer_index_in_dim(OpKind kind, const In& in, const OpAttrs& at) {
  const bool add = kind == OpKind::kAddIndexInDim;
  ENG_CHECK(in.size() == 1 || (add && in.size() == 2), "{}: {} inputs", op_name(kind), in.size());
  const ValueInfo& x = *in[0];
  std::vector<int64_t> dims(x.shape.dims().begin(), x.shape.dims().end());
  Logical logical = x.logical;
  if (!add) {
    ENG_CHECK(at.dim >= 0 && at.dim < x.shape.rank() && at.start >= 0 && at.start < dims[at.dim],
              "index_in_dim: index {} of dim {} out of range for {}", at.start, at.dim,
              x.shape.to_string());
    dims.erase(dims.begin() + at.dim);
    if (!logical.empty()) logical.erase(logical.begin() + at.dim);
    return {make(Shape(dims), x.dtype, std::move(logical))};
  }
  ENG_CHECK(at.dim >= 0 && at.dim <= x.shape.rank() && at.start >= 0 && at.start < at.size,
            "add_index_in_dim: index {} of size {} at dim {} out of range for update {}", at.start,
            at.size, at.dim, x.shape.to_string());
  dims.insert(dims.begin() + at.dim, at.size);
  if (!logical.empty()) logical.insert(logical.begin() + at.dim, "");
  ValueInfo out = make(Shape(dims), x.dtype, std::move(logical));
  if (in.size() == 2) {
    check_same_shape(kind, out, *in[1]);
    out.logical = in[1]->logical;
  }
  return {out};
}

// index_per_row (x (N, S, ...)) -> (S, ...); add_index_per_row (update (S, ...)[, acc]) ->
// (N, S, ...). S is the local row count in a per-device program (axes set), where indices
// still hold one entry per global row.
Outs infer_index_per_row(OpKind kind, const In& in, const OpAttrs& at) {
  const bool add = kind == OpKind::kAddIndexPerRow;
  ENG_CHECK(in.size() == 1 || (add && in.size() == 2), "{}: {} inputs", op_name(kind), in.size());
  const ValueInfo& x = *in[0];
  const int rows_dim = add ? 0 : 1;
  ENG_CHECK(x.shape.rank() > rows_dim, "{}: {} has no rows dim", op_name(kind),
            x.shape.to_string());
  const int64_t rows = x.shape[rows_dim], n = add ? at.size : x.shape[0];
  const auto& idx = at.new_shape;
  ENG_CHECK(rows > 0 && static_cast<int64_t>(idx.size()) % rows == 0 &&
                (!at.mesh_axes.empty() || static_cast<int64_t>(idx.size()) == rows),
            "{}: {} indices for {} rows of {}", op_name(kind), idx.size(), rows,
            x.shape.to_string());
  for (int64_t i : idx)
    ENG_CHECK(i >= 0 && i < n, "{}: index {} out of range for {} slots", op_name(kind), i, n);
  std::vector<int64_t> dims(x.shape.dims().begin(), x.shape.dims().end());
  Logical logical = x.logical;
  if (!add) {
    dims.erase(dims.begin());
    if (!logical.empty()) logical.erase(logical.begin());
    return {make(Shape(dims), x.dtype, std::move(logical))};
  }
  dims.insert(dims.begin(), n);
  if (!logical.empty()) logical.insert(logical.begin(), "");
  ValueInfo out = make(Shape(dims), x.dtype, std::move(logical));
  if (in.size() == 2) {
    check_same_shape(kind, out, *in[1]);
    out.logical = in[1]->logical;
  }
  return {out};
}

Outs infer_concat(OpKind, const In& in, const OpAttrs& at) {
  ENG_CHECK(!in.empty(), "concatenate: needs at least one input");
  ValueInfo out = like(*in[0]);
  const int r = out.shape.rank();
  ENG_CHECK(at.dim >= 0 && at.dim < r, "concatenate: dim {} out of range for {}", at.dim,
            out.shape.to_string());
  std::vector<int64_t> dims(out.shape.dims().begin(), out.shape.dims().end());
  dims[at.dim] = 0;
  for (const ValueInfo* v : in) {
    ENG_CHECK(v->shape.rank() == r && v->dtype == in[0]->dtype, "concatenate: {} vs {}",
              v->type_string(), in[0]->type_string());
    for (int i = 0; i < r; ++i)
      ENG_CHECK(i == at.dim || v->shape[i] == in[0]->shape[i],
                "concatenate: {} vs {} differ off dim {}", v->shape.to_string(),
                in[0]->shape.to_string(), at.dim);
    dims[at.dim] += v->shape[at.dim];
  }
  out.shape = Shape(dims);
  return {out};
}

// transpose: y.shape[i] = x.shape[perm[i]], the logical names permuted alike.
Outs infer_transpose(OpKind kind, const In& in, const OpAttrs& at) {
  n_in(kind, in, 1);
  const ValueInfo& x = *in[0];
  const int r = x.shape.rank();
  std::vector<bool> seen(r, false);
  ENG_CHECK(static_cast<int>(at.new_shape.size()) == r, "transpose: permutation ({}) for {}",
            fmt::join(at.new_shape, ","), x.shape.to_string());
  std::vector<int64_t> dims(r);
  Logical logical;
  for (int i = 0; i < r; ++i) {
    const int64_t p = at.new_shape[i];
    ENG_CHECK(p >= 0 && p < r && !seen[p], "transpose: permutation ({}) for {}",
              fmt::join(at.new_shape, ","), x.shape.to_string());
    seen[p] = true;
    dims[i] = x.shape[static_cast<int>(p)];
    if (!x.logical.empty()) logical.push_back(x.logical[p]);
  }
  return {make(Shape(dims), x.dtype, std::move(logical))};
}

// compare (a, b): a mask like a (float, or i32 for i32 operands); select (pred, t, f): like t,
// float operands only.
Outs infer_compare_select(OpKind kind, const In& in, const OpAttrs& at) {
  const bool select = kind == OpKind::kSelect;
  n_in(kind, in, select ? 3 : 2);
  for (const ValueInfo* v : in) {
    check_same_shape(kind, *in[0], *v);
    ENG_CHECK(v->dtype == in[0]->dtype && (!select || v->dtype != DType::kI32), "{}: {} vs {}",
              op_name(kind), v->type_string(), in[0]->type_string());
  }
  ENG_CHECK(select || (at.dim >= 0 && at.dim <= static_cast<int>(CompareDirection::kGe)),
            "compare: direction {}", at.dim);
  return {like(*in[select ? 1 : 0])};
}

// ---- mixture of experts (op.h): B,S,E,C,M as in MaxText's moe.py einsums ----
Logical pick(const ValueInfo& v, std::initializer_list<int> dims) {  // "" for -1
  Logical l;
  for (int d : dims) l.push_back(d < 0 || v.logical.empty() ? std::string() : v.logical[d]);
  return l;
}

Outs infer_moe_route(OpKind kind, const In& in, const OpAttrs& at) {
  // An optional router bias (E) f32 last: routed_bias (op.h kMoeRoute).
  const size_t n = kind == OpKind::kMoeRoute ? 1 : 2;
  n_in(kind, in, in.size() == n + 1 ? n + 1 : n);
  const ValueInfo& x = *in[0];
  check_rank(kind, x, 3, "logits");
  ENG_CHECK(x.dtype == DType::kF32 || x.dtype == DType::kBF16, "{}: logits must be f32 or bf16, got {}",
            op_name(kind), x.type_string());
  const int64_t B = x.shape[0], S = x.shape[1], E = x.shape[2];
  ENG_CHECK(at.size >= 1 && at.size <= E && at.start >= 1 && at.dim >= 0 && at.dim <= 2,
            "{}: k {} of {} experts, capacity {}, score_func {}", op_name(kind), at.size, E,
            at.start, at.dim);
  const bool bias = in.size() == n + 1;
  if (bias)
    ENG_CHECK(in[n]->shape == Shape({E}) && in[n]->dtype == DType::kF32,
              "{}: bias {} for logits {}", op_name(kind), in[n]->type_string(), x.type_string());
  if (kind == OpKind::kMoeRouteGrad) {
    ENG_CHECK(in[1]->shape == Shape({B, S, E, at.start}), "moe_route_grad: dcombine {} for {}",
              in[1]->type_string(), x.type_string());
    ENG_CHECK(!at.raw || bias, "moe_route_grad: bias_grad without a bias");
    return {at.raw ? like(*in[n]) : like(x)};
  }
  // combine in the logits' dtype (MaxText's combine_mask is in dtype), lb and load f32.
  return {make(Shape{B, S, E, at.start}, x.dtype, pick(x, {0, 1, -1, -1})), scalar(),
          make(Shape{2, E})};
}

// (combine (B,S,E,C), x (B,S,M)) -> (E,B,C,M); (combine, y (E,B,C,M)) -> (B,S,M).
Outs infer_moe_dispatch(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, 2);
  const ValueInfo &c = *in[0], &x = *in[1];
  check_rank(kind, c, 4, "combine");
  const int64_t B = c.shape[0], S = c.shape[1], E = c.shape[2], C = c.shape[3];
  if (kind == OpKind::kMoeDispatch) {
    check_rank(kind, x, 3, "x");
    ENG_CHECK(x.shape[0] == B && x.shape[1] == S, "moe_dispatch: x {} for combine {}",
              x.type_string(), c.type_string());
    return {make(Shape{E, B, C, x.shape[2]}, x.dtype, pick(x, {-1, 0, -1, 2}))};
  }
  check_rank(kind, x, 4, "y");
  ENG_CHECK(x.shape[0] == E && x.shape[1] == B && x.shape[2] == C,
            "moe_combine: y {} for combine {}", x.type_string(), c.type_string());
  return {make(Shape{B, S, x.shape[3]}, x.dtype, concat(pick(c, {0, 1}), pick(x, {3})))};
}

// (dout (B,S,M), y (E,B,C,M)) -> (B,S,E,C), bf16 when both are
Outs infer_moe_combine_weights_grad(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, 2);
  const ValueInfo &d = *in[0], &y = *in[1];
  check_rank(kind, d, 3, "dout");
  check_rank(kind, y, 4, "y");
  ENG_CHECK(y.shape[1] == d.shape[0] && y.shape[3] == d.shape[2],
            "moe_combine_weights_grad: dout {} for y {}", d.type_string(), y.type_string());
  return {make(Shape{d.shape[0], d.shape[1], y.shape[0], y.shape[2]}, promote(in),
               pick(d, {0, 1, -1, -1}))};
}

// (a (G,...,K), w (G,K,N) or (G,N,K) with trans_b) -> (G,...,N); grad: (a, dy) -> (G,K,N).
Outs infer_expert_matmul(OpKind kind, const In& in, const OpAttrs& at) {
  n_in(kind, in, 2);
  const ValueInfo &a = *in[0], &w = *in[1];
  const int r = a.shape.rank();
  ENG_CHECK(r >= 2 && w.shape.rank() >= 2 && a.shape[0] == w.shape[0], "{}: {} and {}",
            op_name(kind), a.type_string(), w.type_string());
  const int64_t K = a.shape[r - 1];
  if (kind == OpKind::kExpertMatmulGrad) {
    ENG_CHECK(w.shape.rank() == r && w.shape.slice(0, r - 1) == a.shape.slice(0, r - 1),
              "expert_matmul_grad: a {} and dy {}", a.type_string(), w.type_string());
    return {make(Shape{a.shape[0], K, w.shape[r - 1]}, promote(in))};
  }
  ENG_CHECK(w.shape.rank() == 3 && w.shape[at.trans_b ? 2 : 1] == K,
            "expert_matmul: inner dims differ: {} x {}{}", a.shape.to_string(),
            w.shape.to_string(), at.trans_b ? " (trans_b)" : "");
  const int64_t N = w.shape[at.trans_b ? 1 : 2];
  std::vector<int64_t> dims(a.shape.dims().begin(), a.shape.dims().end());
  dims.back() = N;
  Logical l = logical_slice(a, 0, r - 1);
  l.push_back(w.logical.empty() ? std::string() : w.logical[at.trans_b ? 1 : 2]);
  return {make(Shape(dims), promote(in), std::move(l))};
}

// (logits (B,S,E)[, bias (E)]) -> weights (B,S,k), order, rank (B,S*k) i32, group_sizes (B,E)
// i32, lb (), load (2,E); grad: (logits, dweights[, bias]) -> dlogits (or dbias).
Outs infer_moe_top_k(OpKind kind, const In& in, const OpAttrs& at) {
  const size_t n = kind == OpKind::kMoeTopK ? 1 : 2;
  n_in(kind, in, in.size() == n + 1 ? n + 1 : n);
  const ValueInfo& x = *in[0];
  check_rank(kind, x, 3, "logits");
  ENG_CHECK(x.dtype == DType::kF32 || x.dtype == DType::kBF16,
            "{}: logits must be f32 or bf16, got {}", op_name(kind), x.type_string());
  const int64_t B = x.shape[0], S = x.shape[1], E = x.shape[2], k = at.size;
  ENG_CHECK(k >= 1 && k <= E && at.dim >= 0 && at.dim <= 2, "{}: k {} of {} experts, score_func {}",
            op_name(kind), k, E, at.dim);
  const bool bias = in.size() == n + 1;
  if (bias)
    ENG_CHECK(in[n]->shape == Shape({E}) && in[n]->dtype == DType::kF32, "{}: bias {} for logits {}",
              op_name(kind), in[n]->type_string(), x.type_string());
  if (kind == OpKind::kMoeTopKGrad) {
    ENG_CHECK(in[1]->shape == Shape({B, S, k}), "moe_top_k_grad: dweights {} for {} with k {}",
              in[1]->type_string(), x.type_string(), k);
    ENG_CHECK(!at.raw || bias, "moe_top_k_grad: bias_grad without a bias");
    return {at.raw ? like(*in[n]) : like(x)};
  }
  const Logical rows = pick(x, {0, -1});
  return {make(Shape{B, S, k}, x.dtype, pick(x, {0, 1, -1})),
          make(Shape{B, S * k}, DType::kI32, rows),
          make(Shape{B, S * k}, DType::kI32, rows),
          make(Shape{B, E}, DType::kI32, rows),
          scalar(),
          make(Shape{2, E})};
}

// (x, order, rank[, weights]) [k, inverse]: (B,S,M) -> (B,S*k,M), inverse (B,S*k,M) -> (B,S,M).
Outs infer_moe_permute(OpKind kind, const In& in, const OpAttrs& at) {
  ENG_CHECK(in.size() == 3 || in.size() == 4, "moe_permute: {} inputs (x, order, rank[, weights])",
            in.size());
  const ValueInfo &x = *in[0], &order = *in[1], &rank = *in[2];
  check_rank(kind, x, 3, "x");
  check_rank(kind, order, 2, "order");
  const int64_t B = x.shape[0], k = at.size, N = order.shape[1];
  ENG_CHECK(k >= 1 && N % k == 0 && order.shape[0] == B && rank.shape == order.shape,
            "moe_permute: x {}, order {}, rank {}, k {}", x.type_string(), order.type_string(),
            rank.type_string(), k);
  const int64_t S = N / k, M = x.shape[2];
  ENG_CHECK(x.shape[1] == (at.inverse ? N : S), "moe_permute: x {} for order {} with k {}{}",
            x.type_string(), order.type_string(), k, at.inverse ? " (inverse)" : "");
  if (in.size() == 4)
    ENG_CHECK(in[3]->shape == Shape({B, S, k}), "moe_permute: weights {} for order {} with k {}",
              in[3]->type_string(), order.type_string(), k);
  return {make(Shape{B, at.inverse ? S : N, M}, promote({in[0], in.size() == 4 ? in[3] : in[0]}),
               pick(x, {0, -1, 2}))};
}

// (a (B,S,M), y (B,N,M), order, rank) [k] -> (B,S,k)
Outs infer_moe_permute_weights_grad(OpKind kind, const In& in, const OpAttrs& at) {
  n_in(kind, in, 4);
  const ValueInfo &a = *in[0], &y = *in[1];
  check_rank(kind, a, 3, "a");
  check_rank(kind, y, 3, "y");
  const int64_t B = a.shape[0], S = a.shape[1], k = at.size;
  ENG_CHECK(y.shape == Shape({B, S * k, a.shape[2]}) && in[2]->shape == Shape({B, S * k}) &&
                in[3]->shape == in[2]->shape,
            "moe_permute_weights_grad: a {}, y {}, order {}, rank {} with k {}", a.type_string(),
            y.type_string(), in[2]->type_string(), in[3]->type_string(), k);
  return {make(Shape{B, S, k}, promote({in[0], in[1]}), pick(a, {0, 1, -1}))};
}

// (lhs ([B,]N,K), rhs (E,K,P) or (E,P,K), group_sizes ([B,]E)) -> ([B,]N,P);
// grad: (lhs, dout ([B,]N,P), group_sizes) -> (E,K,P).
Outs infer_ragged_dot(OpKind kind, const In& in, const OpAttrs& at) {
  n_in(kind, in, 3);
  const ValueInfo &l = *in[0], &r = *in[1], &g = *in[2];
  const int lr = l.shape.rank();
  ENG_CHECK((lr == 2 || lr == 3) && g.shape.rank() == lr - 1 &&
                (lr == 2 || g.shape[0] == l.shape[0]),
            "{}: lhs {} and group_sizes {}", op_name(kind), l.type_string(), g.type_string());
  const int64_t E = g.shape[lr - 2], K = l.shape[lr - 1];
  if (kind == OpKind::kRaggedDotGrad) {
    ENG_CHECK(r.shape.rank() == lr && r.shape.slice(0, lr - 1) == l.shape.slice(0, lr - 1),
              "ragged_dot_grad: lhs {} and dout {}", l.type_string(), r.type_string());
    return {make(Shape{E, K, r.shape[lr - 1]}, promote({in[0], in[1]}))};
  }
  ENG_CHECK(r.shape.rank() == 3 && r.shape[0] == E && r.shape[at.trans_b ? 2 : 1] == K,
            "ragged_dot: lhs {} x rhs {}{} with group_sizes {}", l.type_string(), r.type_string(),
            at.trans_b ? " (trans_b)" : "", g.type_string());
  std::vector<int64_t> dims(l.shape.dims().begin(), l.shape.dims().end());
  dims.back() = r.shape[at.trans_b ? 1 : 2];
  Logical lg = logical_slice(l, 0, lr - 1);
  lg.push_back(r.logical.empty() ? std::string() : r.logical[at.trans_b ? 1 : 2]);
  return {make(Shape(dims), promote({in[0], in[1]}), std::move(lg))};
}

// (x ([L..,]G,N,F), input_offsets, send_sizes, output_offsets i32 ([L..,]G,G)) [size=R]
// -> ([L..,]G,R,F) in x's dtype. Per-device (axes set): G is this device's block of members
// and the index arrays' last dim the whole group's.
Outs infer_ragged_all_to_all(OpKind kind, const In& in, const OpAttrs& at) {
  n_in(kind, in, 4);
  const ValueInfo& x = *in[0];
  const int r = x.shape.rank();
  ENG_CHECK(r >= 3, "ragged_all_to_all: x {} needs rank >= 3 (members, rows, features)",
            x.type_string());
  ENG_CHECK(at.size >= 1, "ragged_all_to_all: buffer {} must be >= 1 row", at.size);
  const int64_t G = x.shape[r - 3] * std::max<int64_t>(at.group_size, 1);
  std::vector<int64_t> idx(x.shape.dims().begin(), x.shape.dims().begin() + r - 2);
  idx.push_back(G);
  for (int k = 1; k < 4; ++k)
    ENG_CHECK(in[k]->shape == Shape(idx) && in[k]->dtype == DType::kI32,
              "ragged_all_to_all: x {} needs i32 offsets and sizes of shape {} ({} members), "
              "got input {} {}",
              x.type_string(), Shape(idx).to_string(), G, k, in[k]->type_string());
  std::vector<int64_t> dims(x.shape.dims().begin(), x.shape.dims().end());
  dims[r - 2] = at.size;
  Logical lg = logical_slice(x, 0, r);
  lg[r - 2].clear();
  return {make(Shape(dims), x.dtype, std::move(lg))};
}

// (x (B,N,F), group_sizes i32 (B,E)) -> like x (the identity; its layout is the partitioner's).
Outs infer_moe_ep(OpKind kind, const In& in, const OpAttrs&) {
  n_in(kind, in, 2);
  const ValueInfo &x = *in[0], &g = *in[1];
  ENG_CHECK(x.shape.rank() == 3 && g.shape.rank() == 2 && g.shape[0] == x.shape[0] &&
                g.dtype == DType::kI32,
            "{}: x {} (B, N, F) and group_sizes {} (B, E) i32", op_name(kind), x.type_string(),
            g.type_string());
  return {like(x)};
}

// (counts i32 (G,Bl,E), shard i32 ()) [size=R, start=N] -> send_order, send_rank (1,Bl*N),
// six (1,G) offsets and sizes, local_order, local_rank (1,R), local_group_sizes (E/G).
Outs infer_moe_ep_plan(OpKind kind, const In& in, const OpAttrs& at) {
  n_in(kind, in, 2);
  const ValueInfo& c = *in[0];
  check_rank(kind, c, 3, "counts");
  check_rank(kind, *in[1], 0, "shard");
  const int64_t G = c.shape[0], Bl = c.shape[1], E = c.shape[2];
  ENG_CHECK(G >= 1 && E % G == 0 && at.size >= 1 && at.start >= 1,
            "moe_ep_plan: counts {} ({} members must divide {} experts), buffer {}, rows {}",
            c.type_string(), G, E, at.size, at.start);
  Outs o = {make(Shape{1, Bl * at.start}, DType::kI32), make(Shape{1, Bl * at.start}, DType::kI32)};
  for (int k = 0; k < 6; ++k) o.push_back(make(Shape{1, G}, DType::kI32));
  o.push_back(make(Shape{1, at.size}, DType::kI32));
  o.push_back(make(Shape{1, at.size}, DType::kI32));
  o.push_back(make(Shape{E / G}, DType::kI32));
  return o;
}

// dynamic_slice_in_dim (x, start) -> x with dim of length size; dynamic_update_slice_in_dim
// (x, update, start) -> like x (update: x's shape but at most x's rows along dim). start: a
// scalar (its i32 dtype is the op table's int-input check).
Outs infer_dynamic_slice(OpKind kind, const In& in, const OpAttrs& at) {
  const bool update = kind == OpKind::kDynamicUpdateSliceInDim;
  n_in(kind, in, update ? 3 : 2);
  const ValueInfo& x = *in[0];
  ENG_CHECK(in.back()->shape.rank() == 0, "{}: start must be a scalar, got {}", op_name(kind),
            in.back()->shape.to_string());
  ENG_CHECK(at.dim >= 0 && at.dim < x.shape.rank(), "{}: dim {} out of range for {}",
            op_name(kind), at.dim, x.shape.to_string());
  if (update) {
    const ValueInfo& u = *in[1];
    bool fits = u.shape.rank() == x.shape.rank() && u.dtype == x.dtype;
    for (int d = 0; fits && d < x.shape.rank(); ++d)
      fits = d == at.dim ? u.shape[d] <= x.shape[d] : u.shape[d] == x.shape[d];
    ENG_CHECK(fits, "dynamic_update_slice_in_dim: update {} does not fit {} along dim {}",
              u.type_string(), x.type_string(), at.dim);
    return {like(x)};
  }
  ENG_CHECK(at.size >= 0 && at.size <= x.shape[at.dim],
            "dynamic_slice_in_dim: size {} out of range for dim {} of {}", at.size, at.dim,
            x.shape.to_string());
  ValueInfo out = like(x);
  std::vector<int64_t> dims(x.shape.dims().begin(), x.shape.dims().end());
  dims[at.dim] = at.size;
  out.shape = Shape(dims);
  return {out};
}

// Shape, dtype and logical-axis inference, one row per op (engine/ir/op_table.h).
constexpr OpTable<InferFn> kInfer = make_op_table<InferFn>(
    {
        {OpKind::kEmbedLookup, infer_embed_lookup},
        {OpKind::kOneHot, infer_one_hot},
        {OpKind::kMatmul,
         [](OpKind kind, const In& in, const OpAttrs& at) -> Outs {
           n_in(kind, in, 2);
           check_integer_operands(kind, in, at);
           ValueInfo out = infer_matmul(*in[0], *in[1], at);
           if (in[0]->dtype == DType::kI32) out.dtype = DType::kI32;  // both i32 (checked)
           return {out};
         }},
        {OpKind::kRmsNorm, infer_rmsnorm},
        {OpKind::kRope, infer_rope},
        {OpKind::kAttention, infer_attention},
        {OpKind::kRepeatKv, infer_repeat_kv},
        {OpKind::kRepeatKvGrad, infer_repeat_kv},
        {OpKind::kSwiglu, infer_same_shape<2>},
        {OpKind::kAdd, infer_same_shape<2>},
        {OpKind::kMul, infer_same_shape<2>},
        {OpKind::kScale, infer_same_shape<1>},
        {OpKind::kConvert, infer_convert},
        {OpKind::kConstraint, infer_constraint},
        {OpKind::kSoftmaxCrossEntropy, infer_xent},
        {OpKind::kMaskedMeanLoss, infer_masked_mean_loss},
        {OpKind::kEmbedLookupGrad, infer_embed_lookup_grad},
        {OpKind::kRmsNormGrad, infer_like<4, 0, 1>},
        {OpKind::kAttentionGrad, infer_attention_grad},
        {OpKind::kSwigluGrad, infer_like<3, 0, 1>},
        {OpKind::kSoftmaxCrossEntropyGrad, infer_xent_grad},
        {OpKind::kAxisIndex,
         [](OpKind kind, const In& in, const OpAttrs&) -> Outs {
           n_in(kind, in, 0);
           return {make(Shape{}, DType::kI32)};
         }},
        {OpKind::kVocabMax, infer_vocab_max},
        {OpKind::kVocabStats, infer_vocab_stats},
        {OpKind::kXentFromStats, infer_xent_from_stats},
        {OpKind::kMaskedMeanLossGrad, infer_masked_mean_loss_grad},
        {OpKind::kSumSquares, infer_scalar<1>},
        {OpKind::kGlobalNorm, infer_scalar<0>},
        {OpKind::kClipFactor, infer_scalar<1>},
        {OpKind::kLearningRate, infer_scalar<1>},
        {OpKind::kSafeDivide, infer_scalar<2>},
        {OpKind::kAdamW, infer_adamw},
        {OpKind::kIncrement, infer_same_shape<1>},
        {OpKind::kAllGather, infer_regroup},
        {OpKind::kReduceScatter, infer_regroup},
        {OpKind::kDynamicSlice, infer_regroup},
        {OpKind::kAllToAll, infer_regroup},
        {OpKind::kAllReduce, infer_same_shape<1>},
        {OpKind::kCollectivePermute, infer_same_shape<1>},
        {OpKind::kReshape, infer_reshape},
        {OpKind::kSlice, infer_rows},
        {OpKind::kPad, infer_rows},
        {OpKind::kShift, infer_rows},
        {OpKind::kConcat, infer_concat},
        {OpKind::kIndexInDim, infer_index_in_dim},
        {OpKind::kAddIndexInDim, infer_index_in_dim},
        {OpKind::kTranspose, infer_transpose},
        {OpKind::kCompare, infer_compare_select},
        {OpKind::kSelect, infer_compare_select},
        {OpKind::kIndexPerRow, infer_index_per_row},
        {OpKind::kAddIndexPerRow, infer_index_per_row},
        {OpKind::kMoeRoute, infer_moe_route},
        {OpKind::kMoeRouteGrad, infer_moe_route},
        {OpKind::kMoeDispatch, infer_moe_dispatch},
        {OpKind::kMoeCombine, infer_moe_dispatch},
        {OpKind::kMoeCombineWeightsGrad, infer_moe_combine_weights_grad},
        {OpKind::kExpertMatmul, infer_expert_matmul},
        {OpKind::kExpertMatmulGrad, infer_expert_matmul},
        {OpKind::kLayerNorm, infer_layernorm},
        {OpKind::kLayerNormGrad, infer_layernorm_grad},
        {OpKind::kBiasAdd, infer_bias_add},
        {OpKind::kBiasAddGrad, infer_bias_add_grad},
        {OpKind::kMoveToHost, infer_same_shape<1>},  // any dtype: the value, moved
        {OpKind::kMoveToDevice, infer_same_shape<1>},
        {OpKind::kMoeTopK, infer_moe_top_k},
        {OpKind::kMoeTopKGrad, infer_moe_top_k},
        {OpKind::kMoePermute, infer_moe_permute},
        {OpKind::kMoePermuteWeightsGrad, infer_moe_permute_weights_grad},
        {OpKind::kRaggedDot, infer_ragged_dot},
        {OpKind::kRaggedDotGrad, infer_ragged_dot},
        {OpKind::kRaggedAllToAll, infer_ragged_all_to_all},
        {OpKind::kMoeEpDispatch, infer_moe_ep},
        {OpKind::kMoeEpReturn, infer_moe_ep},
        {OpKind::kMoeEpPlan, infer_moe_ep_plan},
        {OpKind::kRemainder, infer_same_shape<2>},
        {OpKind::kDynamicSliceInDim, infer_dynamic_slice},
        {OpKind::kDynamicUpdateSliceInDim, infer_dynamic_slice},
    },
    infer_same_shape<1>, infer_same_shape<2>);  // unary: x -> like x; grad: (x, dy) -> like x

Outs infer(OpKind kind, const In& in, const OpAttrs& at) {
  return kInfer[op_index(kind)](kind, in, at);
}

}  // namespace

Builder::Builder(std::string name) { program_.name_ = std::move(name); }

ValueId Builder::new_value(ValueInfo info) {
  program_.values_.push_back(std::move(info));
  return static_cast<ValueId>(program_.values_.size() - 1);
}

ValueId Builder::argument(std::string name, Shape shape, DType dtype, Logical logical,
                          ArgRole role) {
  ENG_CHECK(logical.empty() || static_cast<int>(logical.size()) == shape.rank(),
            "argument {}: {} logical names for shape {}", name, logical.size(), shape.to_string());
  ValueInfo v = make(std::move(shape), dtype, std::move(logical));
  v.name = std::move(name);
  ValueId id = new_value(std::move(v));
  program_.args_.push_back({id, role});
  return id;
}

void Builder::output(ValueId v, std::string name, int aliased_arg) {
  ENG_CHECK(v >= 0 && v < static_cast<ValueId>(program_.values_.size()), "output: bad value {}", v);
  if (aliased_arg >= 0) {
    const ValueInfo& a = program_.values_[program_.args_[aliased_arg].value];
    ENG_CHECK(a.shape == program_.values_[v].shape && a.dtype == program_.values_[v].dtype,
              "output {}: alias of {} must keep its type", name, a.name);
  }
  program_.outputs_.push_back({v, std::move(name), aliased_arg});
}

std::vector<ValueId> Builder::emit(OpKind kind, std::vector<ValueId> inputs, OpAttrs attrs) {
  std::vector<const ValueInfo*> in;
  for (ValueId v : inputs) {
    ENG_CHECK(v >= 0 && v < static_cast<ValueId>(program_.values_.size()), "{}: bad input {}",
              op_name(kind), v);
    in.push_back(&program_.values_[v]);
  }
  if (attrs.vmap == 0) attrs.vmap = vmap_;
  std::vector<ValueInfo> outs;
  if (attrs.vmap > 0) {
    // jax.vmap over the leading dim (op.h): infer the per-slice op, then prepend the dim.
    std::vector<ValueInfo> inner(in.size());
    std::vector<const ValueInfo*> inner_ptrs;
    for (size_t i = 0; i < in.size(); ++i) {
      const Shape& s = in[i]->shape;
      ENG_CHECK(s.rank() >= 1 && s[0] == attrs.vmap, "{} vmapped over {}: input {} is {}",
                op_name(kind), attrs.vmap, i, in[i]->type_string());
      inner[i] = like(*in[i]);
      inner[i].shape = s.slice(1, s.rank());
      if (!in[i]->logical.empty()) inner[i].logical = logical_slice(*in[i], 1, s.rank());
      inner_ptrs.push_back(&inner[i]);
    }
    outs = infer(kind, inner_ptrs, attrs);
    for (ValueInfo& o : outs) {
      o.shape = Shape{attrs.vmap}.concat(o.shape);
      if (!o.logical.empty()) o.logical.insert(o.logical.begin(), vmap_logical_);
    }
  } else {
    outs = infer(kind, in, attrs);
  }
  const int32_t index = static_cast<int32_t>(program_.instrs_.size());
  Instr instr{kind, std::move(inputs), {}, std::move(attrs)};
  for (ValueInfo& o : outs) {
    o.producer = index;
    o.remat_scope = remat_scope_;
    o.pipeline_iteration = pipeline_iteration_;
    instr.outputs.push_back(new_value(std::move(o)));
  }
  program_.instrs_.push_back(std::move(instr));
  return program_.instrs_.back().outputs;
}

ValueId Builder::checkpoint_name(ValueId v, std::string name) {
  ENG_CHECK(v >= 0 && v < static_cast<ValueId>(program_.values_.size()),
            "checkpoint_name: bad value {}", v);
  program_.values_[v].checkpoint_name = std::move(name);
  return v;
}

Program Builder::finish() && { return std::move(program_); }

}  // namespace eng
