// engine/ir/autodiff.h: reverse-mode differentiation by per-op VJP rules, appended to the
// same Builder, so forward + backward (+ the optimizer) form ONE Program.
//
//   ValueId loss = ...;                                   // a scalar f32 value
//   std::vector<ValueId> grads = append_gradients(b, loss, params);
//
// Values used more than once get their cotangents summed (add). A wrt value the loss does
// not depend on gets no gradient: its entry is kNoValue.
#pragma once

#include <functional>
#include <vector>

#include "engine/ir/builder.h"

namespace eng {

// A rewrite of each cotangent contribution before it is summed into its operand's: given the
// forward instr whose VJP produced `ct` for its input `operand`, returns what to accumulate.
// shard_map's varying manual axes use it (engine/frontend/vma.h): an operand invariant over
// mesh axes the op varies over gets its contribution psummed there (JAX's pvary transpose).
using CotangentHook =
    std::function<ValueId(Builder&, const Instr& in, ValueId operand, ValueId ct)>;

// Per-device collectives (kAllReduce sum, kAllGather, kReduceScatter, kAllToAll,
// kCollectivePermute) have the transposes of JAX's varying-manual-axes rules: they are only
// right with the hook above summing invariant operands' contributions.
std::vector<ValueId> append_gradients(Builder& b, ValueId loss, const std::vector<ValueId>& wrt,
                                      CotangentHook hook = {});

// Whether autodiff has a VJP rule for `kind` (its row of the VJP table is not the abort of
// backward, optimizer, metric and per-device ops). append_gradients aborts on a program with
// an op without one, so callers with user programs (sl.grad) check this first.
bool has_vjp(OpKind kind);

}  // namespace eng
