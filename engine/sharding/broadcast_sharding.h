// engine/sharding/broadcast_sharding.h: jax.lax's sharding rule of elementwise ops in explicit
// mode (broadcasting_sharding_rule, jax/_src/lax/lax.py), with JAX's error texts, shared by the
// partitioner (engine/compile/spmd_partitioner.h) and the front-end's checks before an op is
// traced (engine/frontend/numpy.h check_elementwise_sharding).
//
//   ENG_ASSIGN_OR_RETURN(PartitionSpec out,
//                        broadcast_sharding("add", "i32", {{"i32", {4, 4}, x}, {"i32", {4, 4}, y}},
//                                           mesh));
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/base/status.h"
#include "engine/sharding/partition_spec.h"

namespace eng {

// Python's str(tuple(spec)) as JAX prints specs in its sharding errors: ('data', None),
// (('data', 'fsdp'), None), ('tensor',).
std::string jax_tuple_string(const std::vector<PartitionSpec::DimAxes>& dims);

// An operand of an elementwise op as jax.lax's sharding rules see it: dtype ("i32"), shape and
// the sharding of its dims (partial axes are not part of a type).
struct ShardedType {
  std::string dtype;
  Shape shape;
  PartitionSpec spec;
};

// jax.lax's broadcasting_sharding_rule (explicit mode) for the primitive `prim` ("add", "mul",
// "sub", "select_n", "eq", ...; JAX's names) whose result has dtype `out_dtype`: operands of
// one rank (rank 0 ones take no part); per dim, the operands' entries agree, or are None (a
// None beside a sharded entry takes it; a size-1 dim's None never conflicts). Errors, JAX's
// texts: entries that differ, "add got incompatible shardings for broadcasting: ('X', 'Y'),
// ('Y', 'X')."; a result naming an axis on two dims, "add operation with inputs: i32[4@X,4],
// i32[4,4@X] produces an illegally sharded result: i32[4@X,4@X]".
Result<PartitionSpec> broadcast_sharding(std::string_view prim, std::string_view out_dtype,
                                         const std::vector<ShardedType>& operands,
                                         const Mesh& mesh);

}  // namespace eng
