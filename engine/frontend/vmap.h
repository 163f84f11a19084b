// engine/frontend/vmap.h: jax.vmap for users' programs. The function is traced once on one
// example (a Trace whose inputs lack the batch dim), then that program is replayed into the
// caller's trace op by op with a batching rule each: a value is either batched (the batch
// dim leading, of size `batch`) or not (the same for every example). The op set has no
// transpose and no batched matmul, so the batch dim is always dim 0 (in_axes / out_axes 0
// or none), and an op without a rule for its batched operands is an error naming it.
//
//   Trace one("f", mesh);                       // x: one example, (4,)
//   ... trace f on one.input("x", Shape{4}, ...) -> y
//   ENG_ASSIGN_OR_RETURN(auto ys, replay_batched(one, {y}, outer, {{xs, true}}, 8, "f"));
#pragma once

#include <string_view>
#include <vector>

#include "engine/frontend/trace.h"

namespace eng::frontend {

// What an input of the per-example trace is in the caller's trace.
struct BatchedInput {
  ValueId value = kNoValue;  // in `outer`
  bool batched = false;      // has the leading batch dim
};

// Replays `one` (its instructions, from its inputs and captured constants) into `outer` with
// the inputs given, and returns `results` (values of `one`) as values of `outer`, each with
// the leading batch dim (an unbatched result is broadcast, as jax.vmap's out_axes=0 does).
// Errors: an op without a batching rule for how its operands are batched, naming the op.
Result<std::vector<ValueId>> replay_batched(Trace& one, const std::vector<ValueId>& results,
                                            Trace& outer, const std::vector<BatchedInput>& inputs,
                                            int64_t batch, std::string_view fn);

}  // namespace eng::frontend
