// engine/frontend/jaxpr.h: jax.make_jaxpr's printable (sl.make_jaxpr; docs/frontend.md): a
// traced function's program in jaxpr form, `{ lambda consts ; args. let eqns in (outs) }`,
// variables named a, b, c, ... in order of appearance. The equations are the engine's ops
// (engine/ir/op.h names: mul, matmul, all_reduce, ...), not JAX's primitives. A shard_map'd
// function prints as JAX's: one shard_map equation over the global arrays whose `jaxpr` is the
// per-device program, its types carrying their varying manual axes (f32[3]{V:i}), and a
// `pvary[axes=(...)]` equation wherever an operand is made varying to match the others: where
// JAX inserts pvary (jax.lax.pcast(..., to='varying')), by the rules of vma.h, and for an
// explicit jax.lax.pcast.
//
//   std::string text = jaxpr_text(*compiled);   // a Compiled of sl.jit / sl.shard_map
#pragma once

#include <string>

#include "engine/frontend/trace.h"

namespace eng::frontend {

std::string jaxpr_text(const Compiled& c);

}  // namespace eng::frontend
