// engine/frontend/numpy_jax.h: the rest of JAX's jax.numpy and jax.nn names (issue 29 item 5):
// elementwise math, reductions, array moves and jax.nn's activations, each composed from the
// engine's one op table (engine/ir/op.h) through numpy.h / numpy_ops.h, checked first as
// those are, and differentiable through the ops' VJP rules.
//
//   ENG_ASSIGN_OR_RETURN(ValueId v, np::var(tr, x, 0, false, 0));
//   ENG_ASSIGN_OR_RETURN(ValueId s, np::cumsum(tr, x, 1));
//
// How each maps onto the op set:
//   sqrt abs sign sin cos floor log1p expm1   one kUnary op each (op.cpp's UnaryMath rows)
//   square         x * x;  power(x, p): p an integer (|p| <= 64) by repeated squaring (1 / ...
//                  for p < 0); 0.5 sqrt; otherwise exp(p * log(x)) (NaN for x < 0, as numpy's
//                  float power); an array exponent exp(y * log(x))
//   clip           minimum(maximum(x, lo), hi)
//   logaddexp      m + log(exp(a - m) + exp(b - m)), m = maximum(a, b): the gradient is the
//                  softmax weight (1/2 each at a tie) whichever operand the max picked
//   prod           log2(n) rounds of multiply over the two halves of the axis (exact zeros)
//   var, std       mean((x - mean(x))^2) * n / (n - ddof); std = sqrt(var)
//   any, all       max / min of (x != 0): a float mask (the engine has no bool dtype)
//   stack split expand_dims squeeze tile   reshape, slice, concatenate
//   roll                                   two slices, concatenate
//   swapaxes moveaxis                      one transpose
//   take           embed_lookup (a gather of rows) on a moved and flattened view; negative
//                  indices count from the end; an index out of range gives zeros (JAX: NaN)
//   cumsum         log2(n) rounds of x + shift(x, 2^k) (Hillis-Steele), zeros shifted in
//   relu           where(x > 0, x, 0), NaN where x is (relu'(0) = 0, as JAX's); softplus logaddexp(x, 0);
//   one_hot        x[..., None] == arange(n) (a float compare, any dtype in)
//   logsumexp      max + log(sum(exp(x - max)))
//   remainder      one kRemainder (Python's %: the divisor's sign), int32 or float
//   pad            one kPad per padded dim (zeros: numpy's mode "constant")
//   dynamic_slice_in_dim, dynamic_update_slice_in_dim   one kDynamicSliceInDim /
//                  kDynamicUpdateSliceInDim: a traced int32 start, negative from the end, then
//                  clamped so the window fits (JAX's, XLA's DynamicSlice)
//   x[i], x.at[i].set/add (i an int32 scalar, traced or not)   a size-1 dynamic slice along
//                  axis 0, squeezed; the update a dynamic_update_slice (add: adding) of the row.
//                  An index out of range is clamped, as JAX's x[i]; JAX's x.at[i] drops such
//                  an update instead (here it lands on the clamped row)
//   allclose       all(|a - b| <= atol + rtol * |b|), NaN never close (equal_nan false)
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "engine/frontend/numpy.h"

namespace eng::frontend::np {

Result<ValueId> square(Trace& tr, ValueId x);
Result<ValueId> power(Trace& tr, ValueId x, double p);
Result<ValueId> power(Trace& tr, ValueId x, ValueId y);  // y broadcast with x
// lo / hi may be absent (no bound on that side); each broadcast with x.
Result<ValueId> clip(Trace& tr, ValueId x, std::optional<ValueId> lo, std::optional<ValueId> hi);
Result<ValueId> logaddexp(Trace& tr, ValueId a, ValueId b);

// Reductions over one axis (negative from the end) or all (nullopt), numpy's keepdims.
Result<ValueId> prod(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims = false);
Result<ValueId> var(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims = false,
                    double ddof = 0);
Result<ValueId> std_(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims = false,
                     double ddof = 0);
Result<ValueId> any(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims = false);
Result<ValueId> all(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims = false);
Result<ValueId> logsumexp(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims = false);
// jnp.allclose(a, b, rtol, atol): a scalar float mask, 1 when every element of a (broadcast
// with b) is within atol + rtol * |b| of b's (numpy's asymmetric test). NaN is never close.
Result<ValueId> allclose(Trace& tr, ValueId a, ValueId b, double rtol, double atol);
// cumsum along axis (nullopt: of the flattened array).
Result<ValueId> cumsum(Trace& tr, ValueId x, std::optional<int> axis);

// Shape moves.
Result<ValueId> expand_dims(Trace& tr, ValueId x, int axis);
Result<ValueId> squeeze(Trace& tr, ValueId x, std::optional<int> axis);
Result<ValueId> stack(Trace& tr, const std::vector<ValueId>& xs, int axis);
// numpy.split: `sections` equal parts (must divide), or at the sorted `indices`.
Result<std::vector<ValueId>> split(Trace& tr, ValueId x, int64_t sections, int axis);
Result<std::vector<ValueId>> split_at(Trace& tr, ValueId x, const std::vector<int64_t>& indices,
                                      int axis);
Result<ValueId> swapaxes(Trace& tr, ValueId x, int axis1, int axis2);
Result<ValueId> moveaxis(Trace& tr, ValueId x, const std::vector<int>& source,
                         const std::vector<int>& destination);
Result<ValueId> tile(Trace& tr, ValueId x, const std::vector<int64_t>& reps);
// jnp.roll(x, shift, axis): elements shifted by `shift` along axis (wrapping; negative shifts
// back); axis nullopt: of the flattened array, reshaped back. Two slices and a concatenate.
Result<ValueId> roll(Trace& tr, ValueId x, int64_t shift, std::optional<int> axis);
// jnp.take(a, indices, axis): indices int32 (any shape); axis nullopt: of the flattened a.
Result<ValueId> take(Trace& tr, ValueId a, ValueId indices, std::optional<int> axis);

// jnp.remainder (the % operator): a mod b with b's sign, broadcast; int32 (a % 0 = 0, as JAX's)
// or float (an int32 operand beside a float one takes its dtype).
Result<ValueId> remainder(Trace& tr, ValueId a, ValueId b);
// jnp.pad(x, pad_width) with zeros: one (before, after) pair per dim, each >= 0.
Result<ValueId> pad(Trace& tr, ValueId x, const std::vector<std::pair<int64_t, int64_t>>& widths);
// jax.lax.dynamic_slice_in_dim(x, start, size, axis) and dynamic_update_slice_in_dim(x,
// update, start, axis) (add: x.at[...].add's update): start an int32 scalar, traced or not.
Result<ValueId> dynamic_slice_in_dim(Trace& tr, ValueId x, ValueId start, int64_t size, int axis);
Result<ValueId> dynamic_update_slice_in_dim(Trace& tr, ValueId x, ValueId update, ValueId start,
                                            int axis, bool add = false);
// x[i] for an int32 scalar array i (JAX's dynamic_index_in_dim along axis 0, dim removed), and
// x.at[i].set(v) / .add(v): v broadcast to x[i]'s shape, in x's dtype. drop_out_of_range: JAX's
// scatter mode (negative i from the end; i outside [-n, n) leaves x unchanged); false: the
// caller knows i is in [0, n) (a checked integer).
Result<ValueId> dynamic_index(Trace& tr, ValueId x, ValueId index);
Result<ValueId> at_update(Trace& tr, ValueId x, ValueId index, ValueId v, bool add,
                          bool drop_out_of_range = true);

// jax.nn.
Result<ValueId> relu(Trace& tr, ValueId x);
Result<ValueId> softplus(Trace& tr, ValueId x);
// jax.nn.one_hot(x, num_classes, dtype, axis=-1): 1 where x == class, in dtype (f32 or bf16).
Result<ValueId> one_hot(Trace& tr, ValueId x, int64_t num_classes, DType dtype, int axis = -1);

}  // namespace eng::frontend::np
