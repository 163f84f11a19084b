// engine/frontend/numpy_ops.h: the rest of sl.numpy (issue 13 item 3): comparisons and where,
// max/min/argmax reductions, softmax/log_softmax, transpose, indexing and einsum, each built
// from the engine's op table (engine/ir/op.h) and checked first, as numpy.h's ops are.
//
//   ENG_ASSIGN_OR_RETURN(ValueId m, np::compare(tr, x, y, CompareDirection::kGt));
//   ENG_ASSIGN_OR_RETURN(ValueId z, np::where(tr, m, x, y));
//   ENG_ASSIGN_OR_RETURN(ValueId c, np::einsum(tr, "ij,jk->ik", {a, b}, std::nullopt));
//
// How each maps onto the op set:
//   comparisons    one compare op (a 0/1 mask in the operands' dtype, float or int32 (exact);
//                  JAX returns bool, the engine has no bool dtype) after numpy broadcasting
//   where          one select op (cond != 0), broadcast; cond converted to x's dtype
//   max(axis)      halving: max(x[:n/2], x[n/2:n]) with compare + select, log2(n) rounds (an odd
//                  element carried by concatenate); NaN propagates, as jnp.max. min = -max(-x).
//                  Ties: the gradient goes to one of the tied elements (JAX splits it).
//   argmax(axis)   the index of the first element equal to the max: select(x == max, iota, n),
//                  then its min, converted to int32
//   softmax        exp(x - max) / sum(exp(x - max)); log_softmax (x - max) - log(sum(...))
//   transpose      one transpose op
//   indexing       slice (start:stop), pad + reshape + index (a step > 1), index_in_dim (an
//                  integer), reshape (None: a new axis of size 1)
//   einsum         two operands: each operand's own summed labels summed first (np.sum), batch
//                  labels (in both and in the output) looped over with index_in_dim, the rest
//                  one matmul after transposes and reshapes; one operand: sums and a transpose
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/frontend/numpy.h"

namespace eng::frontend::np {

// Elementwise comparison with broadcasting: a mask (1 where it holds, else 0), float, or int32
// for two int32 operands; an int32 operand beside a float one takes the float's dtype.
Result<ValueId> compare(Trace& tr, ValueId a, ValueId b, CompareDirection direction);
// jnp.where(cond, x, y): x where cond != 0, else y; all three broadcast together.
Result<ValueId> where(Trace& tr, ValueId cond, ValueId x, ValueId y);
// jnp.maximum / jnp.minimum (elementwise, broadcast; NaN propagates).
Result<ValueId> maximum(Trace& tr, ValueId a, ValueId b);
Result<ValueId> minimum(Trace& tr, ValueId a, ValueId b);

// Reductions over one axis (negative from the end) or all (nullopt); float.
Result<ValueId> max(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims = false);
Result<ValueId> min(Trace& tr, ValueId x, std::optional<int> axis, bool keepdims = false);
// int32 indices (of the flattened array when axis is nullopt).
Result<ValueId> argmax(Trace& tr, ValueId x, std::optional<int> axis);
Result<ValueId> argmin(Trace& tr, ValueId x, std::optional<int> axis);

// jax.nn.softmax / log_softmax over one axis.
Result<ValueId> softmax(Trace& tr, ValueId x, int axis);
Result<ValueId> log_softmax(Trace& tr, ValueId x, int axis);

// jnp.transpose: axes a permutation of 0..rank-1 (negative from the end); empty: reversed.
Result<ValueId> transpose(Trace& tr, ValueId x, std::vector<int> axes);

// One entry of an index tuple, numpy's basic indexing: an integer, a slice start:stop:step
// (each optional; step > 0), an ellipsis, or a new axis (None).
struct IndexItem {
  enum Kind { kInteger, kSlice, kEllipsis, kNewAxis } kind = kSlice;
  int64_t index = 0;                          // kInteger (negative from the end)
  std::optional<int64_t> start, stop, step;  // kSlice
};
Result<ValueId> index(Trace& tr, ValueId x, const std::vector<IndexItem>& items);

// jnp.einsum with one or two operands ("ij,jk->ik", implicit output "ij,jk" as numpy's).
// out_sharding: the result's sharding (settles an ambiguous contraction in explicit mode).
Result<ValueId> einsum(Trace& tr, const std::string& subscripts, const std::vector<ValueId>& xs,
                       const std::optional<PartitionSpec>& out_sharding);

}  // namespace eng::frontend::np
