// engine/sharding/logical_rules.h: logical axis names -> mesh axes, as flax and MaxText resolve
// them.
//
//   const LogicalAxisRules& rules = LogicalAxisRules::maxtext_default();   // base.yml, 76 rows
//   Result<PartitionSpec> raw = logical_to_mesh_axes({"embed", "mlp"}, rules);
//     // flax: P(('fsdp', 'context', 'context_usp_ulysses', 'expert'),
//     //         ('fsdp_transpose', 'tensor', 'tensor_sequence', 'autoregressive'))
//   Result<PartitionSpec> p = logical_to_mesh({"embed", "mlp"}, mesh, rules);
//     // MaxText (size-1 axes dropped), on fsdp=4, tensor=2: P('fsdp', 'tensor')
//
// Two entry points on purpose, as in MaxText (MaxText's utils/sharding.py):
//   - logical_to_mesh / logical_to_sharding: MaxText's wrappers (sharding.logical_to_mesh_axes,
//     create_sharding). They drop size-1 mesh axes. Used for activations, batches, the loss.
//   - logical_to_mesh_axes / logical_to_sharding_keep_size_one: raw flax
//     (nn.logical_to_mesh_axes, nn.logical_to_mesh_sharding). Size-1 axes are kept. MaxText's
//     Linen state shardings come from here; the asymmetry is the root of MaxText PR #4208.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/base/status.h"
#include "engine/mesh/mesh.h"
#include "engine/sharding/logical_axes.h"
#include "engine/sharding/partition_spec.h"
#include "engine/sharding/shard_geometry.h"  // remove_size_one_mesh_axis
#include "engine/tensor/shape.h"

namespace eng {


struct LogicalAxisRule {
  std::string logical;  // logical axis name, e.g. "embed"
  std::vector<std::string>
      mesh_axes;      // major to minor; empty = [] (assigns nothing, blocks fallbacks)
  bool bare = false;  // written as a bare string in base.yml ('stage'): same meaning

  // "['embed', ['fsdp', 'fsdp_transpose']]" or "['layers', 'stage']" (base.yml's form).
  std::string to_string() const;
  bool operator==(const LogicalAxisRule&) const = default;
};

// An ordered rule list; earlier rules win (priority = list order).
class LogicalAxisRules {
 public:
  LogicalAxisRules() = default;
  explicit LogicalAxisRules(std::vector<LogicalAxisRule> rules) : rules_(std::move(rules)) {}

  // MaxText's base.yml logical_axis_rules, verbatim and in order (MaxText's configs/base.yml).
  static const LogicalAxisRules& maxtext_default();

  const std::vector<LogicalAxisRule>& rules() const { return rules_; }
  int size() const { return static_cast<int>(rules_.size()); }
  const LogicalAxisRule& operator[](int i) const { return rules_[i]; }
  // The rules for one logical name, in priority order (fallbacks after the first).
  std::vector<LogicalAxisRule> find(std::string_view logical) const;

  // MaxText's _merge_logical_axis_rules: every rule of *this whose logical name appears in
  // `overrides` is removed, then all of `overrides` is appended at the end, in its order.
  // With replace_all (override_logical_axis_rules: true) the result is `overrides` alone.
  // An empty `overrides` returns *this unchanged (in both modes, as MaxText's early return).
  LogicalAxisRules merged(const LogicalAxisRules& overrides, bool replace_all = false) const;

  // One rule per line: "['embed', ['fsdp', ...]]".
  std::string to_string() const;
  // base.yml's list form on one line: "[['embed', ['fsdp']], ['layers', 'stage']]" (what
  // parse_logical_axis_rules reads back).
  std::string to_list_string() const;
  bool operator==(const LogicalAxisRules&) const = default;
  uint64_t hash() const;

 private:
  std::vector<LogicalAxisRule> rules_;  // priority order
};

// Parses base.yml's list form (the logical_axis_rules config value): a list of
// [logical, [axes...]] or [logical, 'axis'] pairs, quotes ' or ", e.g.
// "[['embed', ['fsdp']], ['mlp', []], ['layers', 'stage']]". "" and "[]" give no rules.
// Errors name the position and what was expected.
Result<LogicalAxisRules> parse_logical_axis_rules(std::string_view text);

// flax's logical_to_mesh_axes: walk the rules in order; a rule (name, axes) applies when
// `name` is a dim of the tensor, that dim is still unassigned, and none of `axes` is used by
// any dim yet; then the whole group is assigned (a partly conflicting rule is skipped
// entirely, so a later rule of the same name is the fallback). An [] rule assigns nothing
// and blocks fallbacks. Unassigned and unknown names give None. Size-1 axes are kept and
// axes absent from any mesh are not checked. Error: a logical name used by two dims.
Result<PartitionSpec> logical_to_mesh_axes(
    const LogicalAxes& names, const LogicalAxisRules& rules = LogicalAxisRules::maxtext_default());

// Why each dim resolved as it did: logical_to_mesh's walk, rule by rule, for t:shardings().
struct SkippedRule {
  int rule = -1;       // index in the rule list (0-based; printed 1-based, "#51")
  std::string reason;  // "mesh axis 'fsdp_transpose' is already used by dim 1 ('mlp', #48)"
};
struct DimResolution {
  std::optional<std::string> logical;  // the dim's name; nullopt: None (no rule applies)
  int fired = -1;                      // the rule that settled the dim; -1: none did (None)
  std::vector<std::string> raw_axes;   // what that rule assigned (size-1 axes kept)
  std::vector<std::string> axes;       // after remove_size_one_mesh_axis: the spec's entry
  std::vector<SkippedRule> skipped;    // rules of this name that did not fire, in list order
};
// One entry per dim; resolve(names) == logical_to_mesh(names, mesh, rules) entry by entry.
// Errors as logical_to_mesh_axes (a name used by two dims).
Result<std::vector<DimResolution>> explain_logical_to_mesh(
    const LogicalAxes& names, const Mesh& mesh,
    const LogicalAxisRules& rules = LogicalAxisRules::maxtext_default());

// MaxText's sharding.logical_to_mesh_axes(names, mesh, rules): resolution, then
// remove_size_one_mesh_axis (shard_geometry.h). This is the one activations, batches and the
// loss use.
Result<PartitionSpec> logical_to_mesh(
    const LogicalAxes& names, const Mesh& mesh,
    const LogicalAxisRules& rules = LogicalAxisRules::maxtext_default());

// MaxText's create_sharding: NamedSharding(mesh, logical_to_mesh(...)).
Result<NamedSharding> logical_to_sharding(
    const LogicalAxes& names, const Mesh& mesh,
    const LogicalAxisRules& rules = LogicalAxisRules::maxtext_default());
// flax's nn.logical_to_mesh_sharding: NamedSharding(mesh, logical_to_mesh_axes(...)), size-1
// axes kept. MaxText's Linen state shardings (get_abstract_state) are built this way.
Result<NamedSharding> logical_to_sharding_keep_size_one(
    const LogicalAxes& names, const Mesh& mesh,
    const LogicalAxisRules& rules = LogicalAxisRules::maxtext_default());

// MaxText's adjust_pspec_for_indivisible_shapes (applied to variables in maybe_shard_with_name):
// per dim, walk its axes major to minor and keep an axis only if the product of the axes
// kept so far times its size divides the dim; others are dropped. Entries past the rank
// are dropped (maybe_shard_with_name truncates the spec to x.ndim first). Partial kept.
PartitionSpec adjust_pspec_for_indivisible_shapes(const PartitionSpec& spec, const Shape& shape,
                                                  const Mesh& mesh);

// Mesh axes that MaxText's code names outside its logical rules. The partitioner takes them
// as options (SpmdOptions::axes) so compile/ names no mesh axis; the defaults are MaxText's.
struct PartitionAxes {
  std::string zero1 = "data";         // shard_optimizer_over_data: mu/nu also sharded over it
  std::string zero1_skip = "tensor";  // ... on the first dim that does not carry this axis
  std::string vmap = "stage";         // jax.vmap's spmd_axis_name for vmapped ops (pipeline)

  // "zero1=data zero1_skip=tensor vmap=stage" (part of the compile cache key).
  std::string to_string() const;
  bool operator==(const PartitionAxes&) const = default;
};

// MaxText's input_data_sharding_logical_axes default.
const LogicalAxes& default_input_data_sharding_logical_axes();
// MaxText's get_input_data_sharding: logical_to_sharding of the input logical axes
// (with enable_diloco, MaxText prefixes "diloco"; pass that in `logical_axes`).
Result<NamedSharding> get_input_data_sharding(
    const Mesh& mesh, const LogicalAxisRules& rules = LogicalAxisRules::maxtext_default(),
    const LogicalAxes& logical_axes = default_input_data_sharding_logical_axes());

}  // namespace eng
