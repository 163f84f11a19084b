// engine/frontend/scan.h: jax.lax.scan for the front-end (sl.lax.scan; issue 29,
// docs/frontend.md): f(carry, x) -> (carry, y) over the leading axis of xs, the carry a pytree
// of fixed types, the ys stacked. The engine's op set has no loop: the scan is unrolled, f
// called once per iteration on slice i of xs (kIndexInDim) and the ys stacked (concatenate),
// as JAX's own scan under jax.disable_jit(). Inside sl.jit / sl.grad / sl.shard_map the
// iterations are traced into that program (length copies of the body: a long scan makes a
// long program), so grad differentiates through every step; outside a trace each op runs
// eagerly. What JAX checks of a scan is checked here, with its texts: the length against xs'
// leading axes, and after every iteration the carry's structure and types (shape, dtype,
// varying manual axes inside shard_map, the sharding on an Explicit mesh).
//
//   ScanTree init{tree, {c}}, xs{tree, {x}};
//   ENG_ASSIGN_OR_RETURN(ScanResult r, scan(session, body, init, xs, {.length = std::nullopt}));
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/frontend/jit_function.h"

namespace eng::frontend {

// The most iterations an (unrolled) scan runs: a bigger length is an error, not a program of
// millions of copies of the body.
inline constexpr int64_t kMaxScanLength = int64_t{1} << 16;

// A pytree of arrays: its structure and its leaves in Tree order.
struct ScanTree {
  Tree tree;
  std::vector<Value> leaves;
};

struct ScanOptions {
  std::optional<int64_t> length;  // JAX's length=; nullopt: xs' leading axis
  bool reverse = false;           // iterate from the last slice; ys stacked in xs' order
  int64_t unroll = 1;             // JAX's unroll (checked; every iteration is unrolled here)
  std::string carry_name;         // f's first parameter's name (errors: "carry[0]"), or ""
};

// f(carry, x) -> {carry, y}; an error stops the scan.
using ScanBody = std::function<Result<std::pair<ScanTree, ScanTree>>(const ScanTree& carry,
                                                                     const ScanTree& x)>;

struct ScanResult {
  ScanTree carry;
  ScanTree ys;  // y's structure, each leaf stacked along a new leading axis of size length
};

// jax.lax.scan(f, init, xs, length, reverse, unroll). Errors, as JAX's: xs with no leading axis
// or of different leading sizes, a length that disagrees with them, no xs and no length, a
// zero length (the types of ys would need a trace) or one over kMaxScanLength, a carry output
// of another structure or type than init ("scan body function carry input and carry output
// must have equal types, ..." with the pcast hint for varying manual axes), a y of another
// structure or type than the first iteration's; and the body's own.
Result<ScanResult> scan(Session& s, const ScanBody& body, const ScanTree& init,
                        const ScanTree& xs, const ScanOptions& opts);

// JAX's keystr of each leaf's path ("[0]", "['w'][1]"); Lua's list positions count from 1,
// JAX's tuple positions from 0, so position k prints as [k - 1].
std::vector<std::string> scan_leaf_paths(const Tree& tree);

}  // namespace eng::frontend
