// engine/sharding/broadcast_sharding.cpp: jax.lax's elementwise sharding rule (broadcast_sharding.h).
#include "engine/sharding/broadcast_sharding.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "engine/sharding/shard_geometry.h"

namespace eng {

std::string jax_tuple_string(const std::vector<PartitionSpec::DimAxes>& dims) {
  std::vector<std::string> parts;
  for (const auto& e : dims) {
    if (e.empty()) {
      parts.push_back("None");
    } else if (e.size() == 1) {
      parts.push_back(fmt::format("'{}'", e[0]));
    } else {
      std::vector<std::string> q;
      for (const auto& a : e) q.push_back(fmt::format("'{}'", a));
      parts.push_back(fmt::format("({})", fmt::join(q, ", ")));
    }
  }
  if (parts.size() == 1) return fmt::format("({},)", parts[0]);
  return fmt::format("({})", fmt::join(parts, ", "));
}

Result<PartitionSpec> broadcast_sharding(std::string_view prim, std::string_view out_dtype,
                                         const std::vector<ShardedType>& operands,
                                         const Mesh& mesh) {
  std::vector<const ShardedType*> ranked;
  for (const ShardedType& t : operands)
    if (t.shape.rank() > 0) ranked.push_back(&t);
  if (ranked.empty()) return PartitionSpec();
  const int r = ranked[0]->shape.rank();
  for (const ShardedType* t : ranked)
    if (t->shape.rank() != r)
      return invalid_argument("{}: arrays must have same number of dimensions, got {} and {}.",
                              prim, ranked[0]->shape.to_string(), t->shape.to_string());
  auto entry = [&](const ShardedType* t, int i) {
    return remove_size_one_axes(t->spec.dim_or_none(i), mesh);
  };
  std::vector<PartitionSpec::DimAxes> out(r);
  std::vector<int64_t> out_shape(r, 1);
  for (int i = 0; i < r; ++i) {
    for (const ShardedType* t : ranked) out_shape[i] = std::max(out_shape[i], t->shape[i]);
    PartitionSpec::DimAxes got;
    bool have = false;
    for (const ShardedType* t : ranked) {
      const PartitionSpec::DimAxes e = entry(t, i);
      if (e.empty() && t->shape[i] == 1) continue;  // a size-1 None never conflicts
      if (!have) {
        got = e;
        have = true;
      } else if (got.empty()) {
        got = e;
      } else if (!e.empty() && e != got) {
        std::vector<std::string> specs;
        for (const ShardedType* u : ranked) {
          std::vector<PartitionSpec::DimAxes> d;
          for (int k = 0; k < r; ++k) d.push_back(entry(u, k));
          specs.push_back(jax_tuple_string(d));
        }
        return invalid_argument("{} got incompatible shardings for broadcasting: {}.", prim,
                                fmt::join(specs, ", "));
      }
    }
    out[i] = got;
  }
  std::map<std::string, int> uses;
  bool twice = false;
  for (const auto& d : out)
    for (const auto& a : d) twice |= ++uses[a] > 1;
  const PartitionSpec result(out);
  if (twice) {
    std::vector<std::string> avals;
    for (const ShardedType& t : operands)
      avals.push_back(typeof_string(t.dtype, t.shape, &t.spec, &mesh));
    return invalid_argument("{} operation with inputs: {} produces an illegally sharded result: {}",
                            prim, fmt::join(avals, ", "),
                            typeof_string(out_dtype, Shape(out_shape), &result, &mesh));
  }
  return result;
}

}  // namespace eng
