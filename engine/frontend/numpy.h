// engine/frontend/numpy.h: numpy-like operations on a Trace, each built from the engine's one
// op table (engine/ir/op.h) and checked before it is emitted (the Builder aborts on a shape
// mismatch, a bug in engine code; here a mismatch is the user's, so it is an error Status
// naming the op and both values, in jax.numpy's words where JAX has them).
//
//   ENG_ASSIGN_OR_RETURN(ValueId y, np::matmul(tr, x, w, P("X", nullopt)));
//   ENG_ASSIGN_OR_RETURN(ValueId s, np::sum(tr, y, 1));
//
// How each op maps onto the op set (there is no broadcast, reduce or transpose op):
//   broadcasting   reshape to the common rank, then concatenate copies along each dim of size 1
//                  (doubling: log2(n) concatenations)
//   sum(axis)      one matmul with a vector of ones (a captured constant) for a leading or
//                  trailing axis or all axes (a sharded axis becomes a partial sum: the
//                  partitioner's all-reduce / reduce-scatter); a middle axis adds its slices
//   subtract       add(a, scale(b, -1));  negative, x * c, x / c for a number c: scale
#pragma once

#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "engine/frontend/trace.h"

namespace eng::frontend::np {

// "(8, 4)", "(3,)", "()": Python's tuple form, as JAX's messages print shapes.
std::string py_shape(const Shape& s);
// numpy's broadcasting; error "Incompatible shapes for broadcasting: shapes=[(8, 4), (3,)]".
Result<Shape> broadcast_shapes(const Shape& a, const Shape& b);
Result<ValueId> broadcast_to(Trace& tr, ValueId x, const Shape& shape);
// s without dim `axis` (size 1 there when keepdims); s with a dim of `size` inserted at `axis`.
Shape without_dim(const Shape& s, int axis, bool keepdims);
Shape with_dim(const Shape& s, int axis, int64_t size);
// The checks the op files share (numpy.cpp, numpy_ops.cpp, manual.cpp). need_float: an error
// naming `op` for an integer array. checked_axis: axis (negative from the end) as 0..rank-1, or
// "op: axis 3 is out of bounds for array of dimension 2" (`what` names the argument).
inline const ValueInfo& info(const Trace& tr, ValueId v) { return tr.info(v); }
Status need_float(const Trace& tr, std::string_view op, ValueId v);
Result<int> checked_axis(std::string_view op, int axis, int rank, std::string_view what = "axis");
// The axes of a collective sorted major to minor (mesh order), checked: inside shard_map, in
// the mesh, each once; errors name `op`.
Result<std::vector<std::string>> group_axes(Trace& tr, std::string_view op,
                                            const std::vector<std::string>& axes);

// Explicit mode: jax.lax's sharding rule of the elementwise primitive `prim` ("add", "sub",
// "div", "eq", "select_n", ...) on the operands as given, rank-promoted as jnp does
// (engine/sharding/broadcast_sharding.h: JAX's errors, naming JAX's primitive).
// Checked when every operand's sharding is known without partitioning (a traced function's
// arguments, so every eager op); otherwise the partitioner checks it, naming the engine's op
// (x - y inside a jit is then reported as add). Ok in auto mode and inside shard_map.
Status check_elementwise_sharding(Trace& tr, std::string_view prim,
                                  std::initializer_list<ValueId> operands);

// Elementwise with broadcasting; both operands of one dtype (f32 or bf16).
Result<ValueId> add(Trace& tr, ValueId a, ValueId b);
Result<ValueId> subtract(Trace& tr, ValueId a, ValueId b);
Result<ValueId> multiply(Trace& tr, ValueId a, ValueId b);
// a / b: a * reciprocal(b) (true division: int32 operands compute in float32).
Result<ValueId> divide(Trace& tr, ValueId a, ValueId b);
// c * x. An int32 x stays int32 for an integer c (JAX's weak types: 2 * x), computes in float32
// for any other c or when `divide` (x / number is true division: float32, as jnp's).
Result<ValueId> scale(Trace& tr, ValueId x, double c, bool divide = false);
// A kUnary op of the table (gelu), by its printed name; error lists the unary ops. An int32
// x computes in float32 (JAX's promote_args_inexact), except abs, sign and floor (errors).
Result<ValueId> unary(Trace& tr, std::string_view name, ValueId x);

// numpy.matmul for a of rank >= 1 and b of rank 1 or 2 (the op has no batch dims); f32.
// out_sharding: JAX's out_sharding (settles an ambiguous result in explicit mode).
Result<ValueId> matmul(Trace& tr, ValueId a, ValueId b,
                       const std::optional<PartitionSpec>& out_sharding = std::nullopt);

// numpy.reshape; one dim may be -1.
Result<ValueId> reshape(Trace& tr, ValueId x, std::vector<int64_t> shape);
// Sum over one axis (negative from the end) or all (nullopt); keepdims as numpy's. f32.
Result<ValueId> sum(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims = false);
Result<ValueId> mean(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims = false);
Result<ValueId> concatenate(Trace& tr, const std::vector<ValueId>& xs, int axis);
// x[start:stop] along axis (numpy's slice clamping; step 1).
Result<ValueId> slice(Trace& tr, ValueId x, int axis, int64_t start, int64_t stop);
Result<ValueId> astype(Trace& tr, ValueId x, DType dtype);

// The engine's fused ops. rmsnorm: x (..., E) of rank >= 2, scale (E), f32. The softmax cross
// entropy with integer labels (optax's): logits (..., V) of rank >= 2, f32; labels i32 (...).
// Causal dot-product attention (jax.nn.dot_product_attention with is_causal): q, k, v
// (B, T, N, H) f32, scale 1/sqrt(H).
Result<ValueId> rmsnorm(Trace& tr, ValueId x, ValueId scale, double eps);
Result<ValueId> softmax_cross_entropy(Trace& tr, ValueId logits, ValueId labels);
Result<ValueId> causal_attention(Trace& tr, ValueId q, ValueId k, ValueId v);

// ---- manual mode (inside shard_map: per-device values, tr.manual()) ----------------------
// jax.lax's collectives over named mesh axes, as the engine's per-device collective ops
// (engine/ir/op.h): members of a group are ranked by their coordinates along `axes`, listed
// major to minor. Outside shard_map an axis name is unbound: an error.
Result<ValueId> psum(Trace& tr, ValueId x, const std::vector<std::string>& axes);
// tiled: concatenated along `axis`; untiled: stacked along a new axis `axis` (JAX's default).
Result<ValueId> all_gather(Trace& tr, ValueId x, const std::vector<std::string>& axes, int axis,
                           bool tiled);
// The sum over the group, member r keeping block r along scatter_dimension (tiled), or with
// that dim (of size = group size) removed (untiled, JAX's default).
Result<ValueId> psum_scatter(Trace& tr, ValueId x, const std::vector<std::string>& axes,
                             int scatter_dimension, bool tiled);
// jax.lax.ppermute with perm pairs {source, destination} over one axis; the op set moves by a
// shift: every member (cyclic) or those with a destination in range (others receive zeros).
Result<ValueId> ppermute(Trace& tr, ValueId x, const std::string& axis,
                         const std::vector<std::pair<int64_t, int64_t>>& perm);
// jax.lax.axis_index: this device's rank along `axis` (int32 scalar).
Result<ValueId> axis_index(Trace& tr, const std::string& axis);
// jax.lax.axis_size: the number of devices along the named axes (a static integer).
Result<int64_t> axis_size(Trace& tr, const std::vector<std::string>& axes);

// jax.lax.with_sharding_constraint (assert = true: an equality assert in explicit mode, a hint
// in auto mode) and jax.sharding.reshard (assert = false: moves the data in both modes).
Result<ValueId> sharding_constraint(Trace& tr, ValueId x, const PartitionSpec& spec, bool assert_);

// Checks `spec` for a value of `shape` on the trace's mesh: rank, axes, divisibility.
Status check_spec(const Trace& tr, const PartitionSpec& spec, const Shape& shape,
                  std::string_view what);

}  // namespace eng::frontend::np
