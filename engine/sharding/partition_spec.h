// engine/sharding/partition_spec.h: PartitionSpec and NamedSharding as values (JAX's forms).
//
//   PartitionSpec p({{"fsdp"}, {}, {"data", "tensor"}});
//   p.to_string() == "P('fsdp', None, ('data', 'tensor'))"
//   NamedSharding s{mesh, p};  // s.validate(shape): axes exist, are used once and divide dims
//
// A dim's entry lists mesh axes major to minor; empty means replicated along that dim.
// `partial` holds axes along which each device holds an unreduced summand (JAX's
// `unreduced`; see docs/sharding.md): a value is the sum over those axes.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/mesh/mesh.h"
#include "engine/tensor/shape.h"

namespace eng {

class PartitionSpec {
 public:
  using DimAxes = std::vector<std::string>;  // major to minor; empty = None

  PartitionSpec() = default;  // P(): fully replicated, any rank
  explicit PartitionSpec(std::vector<DimAxes> dims, std::vector<std::string> partial = {})
      : dims_(std::move(dims)), partial_(std::move(partial)) {}
  // From braces: PartitionSpec({{"data"}, {}}) or `PartitionSpec p = {{"data"}, {}};`. Without
  // it, nested braces are ambiguous between the vector and the copy constructor.
  PartitionSpec(std::initializer_list<DimAxes> dims) : dims_(dims) {}  // NOLINT: implicit
  static PartitionSpec replicated(int rank) { return PartitionSpec(std::vector<DimAxes>(rank)); }

  int rank() const { return static_cast<int>(dims_.size()); }
  const std::vector<DimAxes>& dims() const { return dims_; }
  const DimAxes& dim(int i) const { return dims_[i]; }
  const std::vector<std::string>& partial() const { return partial_; }
  bool is_replicated() const;  // no dim sharded and nothing partial (all None)
  // Entry i, or empty when i >= rank (JAX pads specs with None).
  DimAxes dim_or_none(int i) const { return i < rank() ? dims_[i] : DimAxes{}; }

  // "P('fsdp', None, ('data', 'tensor'))"; partial axes append ", unreduced={'data'}".
  std::string to_string() const;
  bool operator==(const PartitionSpec&) const = default;
  uint64_t hash() const;

 private:
  std::vector<DimAxes> dims_;         // one entry per dim (may be shorter than the rank)
  std::vector<std::string> partial_;  // unreduced axes, sorted by mesh order
};

struct NamedSharding {
  Mesh mesh;
  PartitionSpec spec;

  // Checks the spec against the mesh and a global shape: every axis exists in the mesh,
  // no axis is used twice, rank fits, each dim divides by its axes' product. The error
  // names the offending axis or dim and both values.
  Status validate(const Shape& global) const;
  // Per-dim number of shards and the local (per-device) shape; REQUIRES validate() ok.
  int64_t shards_along(int dim) const;
  Shape local_shape(const Shape& global) const;
  // Offset of device d's block in each dim (global index of its first element).
  std::vector<int64_t> local_offset(const Shape& global, int64_t device) const;

  // "NamedSharding(mesh=Mesh('fsdp': 4, axis_types=(Auto,)), spec=P('fsdp', None))"
  std::string to_string() const;
  bool operator==(const NamedSharding&) const = default;
  uint64_t hash() const;
};

// The jax.typeof form of a type with its sharding: "f32[256@fsdp,768@tensor]",
// "i32[16@(data,fsdp),256]". Size-1 axes are not printed (they do not shard anything).
std::string typeof_string(std::string_view dtype, const Shape& shape, const PartitionSpec* spec,
                          const Mesh* mesh);

}  // namespace eng
