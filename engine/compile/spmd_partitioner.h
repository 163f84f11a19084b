// engine/compile/spmd_partitioner.h: the partitioner's class, shared by its files (internal:
// only engine/compile/spmd*.cpp include it). spmd.cpp: the walk, the rule table and vmap;
// spmd_factor_rules.cpp: factor-map rules and the elementwise, norm, optimizer and row rules;
// spmd_shape_rules.cpp: reshape, attention, shifts, constraints, embeddings and losses;
// spmd_matmul.cpp: matmul and the mixture-of-experts ops. Every layout change goes through
// reshard() (docs/sharding.md).
#pragma once

#include "engine/compile/spmd.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "engine/base/check.h"
#include "engine/ir/builder.h"
#include "engine/ir/op_table.h"
#include "engine/sharding/broadcast_sharding.h"
#include "engine/sharding/shard_geometry.h"

namespace eng::spmd_internal {

using Axes = std::vector<std::string>;
using Dims = std::vector<Axes>;

inline bool contains(const Axes& v, const std::string& a) { return std::find(v.begin(), v.end(), a) != v.end(); }

inline bool is_prefix(const Axes& p, const Axes& of) {
  return p.size() <= of.size() && std::equal(p.begin(), p.end(), of.begin());
}

inline size_t common_prefix(const Axes& a, const Axes& b) {
  size_t c = 0;
  while (c < a.size() && c < b.size() && a[c] == b[c]) ++c;
  return c;
}

inline void sort_mesh_order(Axes& axes, const Mesh& m) {
  std::sort(axes.begin(), axes.end(),
            [&](const std::string& x, const std::string& y) { return m.axis_index(x) < m.axis_index(y); });
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
}

// Rank entries, size-1 (and absent) axes dropped, partial sorted in mesh order.
inline PartitionSpec normalize(const PartitionSpec& s, int rank, const Mesh& m) {
  Dims dims(rank);
  for (int i = 0; i < rank && i < s.rank(); ++i) dims[i] = remove_size_one_axes(s.dim(i), m);
  Axes partial = remove_size_one_axes(s.partial(), m);
  sort_mesh_order(partial, m);
  return PartitionSpec(std::move(dims), std::move(partial));
}

inline PartitionSpec dims_only(const PartitionSpec& s) { return PartitionSpec(s.dims()); }

inline int64_t shards(const PartitionSpec& s, const Mesh& m) {
  int64_t n = 1;
  for (const auto& d : s.dims()) n *= axes_size(m, d);
  return n;
}

inline Axes all_axes(const Dims& dims, int begin, int end) {
  Axes out;
  for (int i = begin; i < end; ++i) out.insert(out.end(), dims[i].begin(), dims[i].end());
  return out;
}

inline std::string spec_string(const Dims& d) { return PartitionSpec(d).to_string(); }

// A matmul's operand dims by role: a's (b's) contracting and free dims, ascending.
struct MatmulDims {
  std::vector<int> a_free, a_con, b_free, b_con;
  int out_rank() const { return static_cast<int>(a_free.size() + b_free.size()); }
};

inline MatmulDims matmul_dims(const OpAttrs& at, const Shape& A, const Shape& B) {
  MatmulDims m;
  for (int i = 0; i < A.rank(); ++i)
    ((at.trans_a ? i < at.a_split : i >= at.a_split) ? m.a_con : m.a_free).push_back(i);
  for (int i = 0; i < B.rank(); ++i)
    ((at.trans_b ? i >= at.b_split : i < at.b_split) ? m.b_con : m.b_free).push_back(i);
  return m;
}

// Whether any of axes `t` shards a dim of `d` other than `skip`.
inline bool used_elsewhere(const Axes& t, const Dims& d, int skip) {
  for (size_t j = 0; j < d.size(); ++j)
    if (static_cast<int>(j) != skip)
      for (const auto& a : t)
        if (contains(d[j], a)) return true;
  return false;
}

// An axis on free dims of both operands would appear twice: gather it from one side. With
// a wanted output sharding placing the axis, the side it places it on keeps it; otherwise
// the bigger operand (`a_bigger`: a's bytes >= b's) keeps it and the cheaper one gathers.
inline void gather_shared_free_axes(const MatmulDims& m, bool a_bigger,
                             const std::optional<PartitionSpec>& want, Dims& da, Dims& db) {
  for (int i : m.a_free) {
    for (size_t p = 0; p < da[i].size();) {
      const std::string ax = da[i][p];
      int bj = -1;
      for (int j : m.b_free)
        if (contains(db[j], ax)) bj = j;
      if (bj < 0) {
        ++p;
        continue;
      }
      bool keep_a = a_bigger;
      if (want) {
        int at_out = -1;
        for (int o = 0; o < m.out_rank(); ++o)
          if (contains(want->dim(o), ax)) at_out = o;
        if (at_out >= 0) keep_a = at_out < static_cast<int>(m.a_free.size());
      }
      if (keep_a) {
        db[bj].erase(std::find(db[bj].begin(), db[bj].end(), ax));
        ++p;
      } else {
        da[i].erase(da[i].begin() + p);
      }
    }
  }
}

class Partitioner {
 public:
  Partitioner(const Program& g, const Mesh& mesh, const SpmdOptions& o)
      : g_(g), mesh_(mesh), o_(o), b_(g.name()) {
    set_axis_types(-1);
  }

  Result<Partitioned> run() {
    const size_t nv = g_.values().size();
    local_.assign(nv, kNoValue);
    routed_.assign(nv, kNoValue);
    swapped_.assign(nv, false);
    spec_.assign(nv, PartitionSpec());
    Partitioned out;
    for (const Argument& a : g_.args()) {
      const ValueInfo& v = g_.value(a.value);
      if (!v.spec) return invalid_argument("partition: argument '{}' has no sharding", v.name);
      PartitionSpec s = normalize(*v.spec, v.shape.rank(), mesh_);
      ENG_RETURN_IF_ERROR(check_divisible(v.shape, s, fmt::format("argument '{}'", v.name)));
      ValueId lv = b_.argument(v.name, local_shape(v.shape, s), v.dtype, v.logical, a.role);
      set(a.value, lv, s);
      out.arg_specs.push_back(s);
    }
    // Gradients land in their optimizer state's sharding as soon as they are produced (one
    // reduce-scatter / all-reduce of the partial sum, shared by the grad-norm and AdamW),
    // as JAX does when the gradient's sharding is the state's.
    desired_.assign(nv, std::nullopt);
    for (const Instr& in : g_.instrs())
      if (in.kind == OpKind::kAdamW && g_.value(in.inputs[2]).spec)
        desired_[in.inputs[1]] =
            normalize(*g_.value(in.inputs[2]).spec, rank(in.inputs[1]), mesh_);
    desire_stacked_slices();
    desire_through_converts();
    for (size_t i = 0; i < g_.instrs().size(); ++i) {
      // Local ops (collectives included) take the global op's pipeline iteration (program.h).
      const Instr& gi = g_.instrs()[i];
      b_.set_pipeline_iteration(gi.outputs.empty() ? -1 : gv(gi.outputs[0]).pipeline_iteration);
      if (!o_.axis_type_regions.empty()) set_axis_types(static_cast<int>(i));
      Status s = instr(gi);
      if (!s.ok())
        return Status(s.code(), fmt::format("{} (instruction {}: {})", s.message(), i,
                                            op_name(g_.instrs()[i].kind)));
    }
    b_.set_pipeline_iteration(-1);
    for (const ProgramOutput& o : g_.outputs()) {
      const int rank = g_.value(o.value).shape.rank();
      PartitionSpec target = o.aliased_arg >= 0 ? out.arg_specs[o.aliased_arg]
                                                : PartitionSpec::replicated(rank);
      ENG_ASSIGN_OR_RETURN(ValueId lv, get(o.value, target));
      b_.output(lv, o.name, o.aliased_arg);
      out.out_specs.push_back(target);
    }
    out.value_specs = spec_;
    out.local = std::move(b_).finish();
    return out;
  }

 private:
  const ValueInfo& gv(ValueId v) const { return g_.value(v); }

  // The Explicit axes at instruction i (-1: outside every region): shard_mode explicit makes
  // every axis Explicit; else the mesh's types, or the innermost region's covering i.
  void set_axis_types(int i) {
    const AxisTypeRegion* in = nullptr;
    for (const AxisTypeRegion& r : o_.axis_type_regions)
      if (r.begin <= i && i < r.end && r.types.size() == mesh_.axis_types().size() &&
          (!in || r.begin > in->begin || (r.begin == in->begin && r.end < in->end)))
        in = &r;
    const std::vector<AxisType>& types = in ? in->types : mesh_.axis_types();
    const bool mode_explicit = o_.shard_mode == ShardMode::kExplicit && !in;
    explicit_axes_.clear();
    for (int a = 0; a < mesh_.num_axes(); ++a)
      if (mode_explicit || types[a] == AxisType::kExplicit)
        explicit_axes_.push_back(mesh_.axis_names()[a]);
    all_explicit_ = mode_explicit ||
                    (mesh_.num_axes() > 0 && explicit_axes_.size() == mesh_.axis_names().size());
    explicit_ = all_explicit_ || !explicit_axes_.empty();
  }
  // dims with only the Explicit (keep = true) or only the other axes.
  Dims project(const Dims& d, bool keep) const {
    Dims out = d;
    for (Axes& axes : out)
      std::erase_if(axes, [&](const std::string& a) { return contains(explicit_axes_, a) != keep; });
    return out;
  }
  // While a vmapped instruction is partitioned (vm_ active), the values it touches are seen
  // without their leading (stage) dim: shapes, ranks and specs are the per-slice ones.
  Shape shp(ValueId v) const {
    const Shape& s = gv(v).shape;
    return vm_.empty() ? s : s.slice(1, s.rank());
  }
  int rank(ValueId v) const { return shp(v).rank(); }
  // normalize(), with the vmapped axes removed while vm_ is active (they are taken by the
  // leading dim; MaxText's spmd_axis_name="stage").
  PartitionSpec norm(const PartitionSpec& s, int r) const {
    PartitionSpec n = normalize(s, r, mesh_);
    if (vm_.empty()) return n;
    return without_axes(n, vm_);
  }
  static PartitionSpec without_axes(const PartitionSpec& s, const Axes& drop) {
    Dims d = s.dims();
    for (auto& axes : d)
      axes.erase(std::remove_if(axes.begin(), axes.end(), [&](const std::string& a) { return contains(drop, a); }),
                 axes.end());
    Axes partial;
    for (const auto& a : s.partial())
      if (!contains(drop, a)) partial.push_back(a);
    return PartitionSpec(std::move(d), std::move(partial));
  }

  Shape local_shape(const Shape& g, const PartitionSpec& s) const {
    return eng::local_shape(mesh_, s, g);
  }

  Status check_divisible(const Shape& g, const PartitionSpec& s, const std::string& what) const {
    return eng::check_divisible(mesh_, s, g, what);
  }

  void set(ValueId g, ValueId l, PartitionSpec s) {
    if (vm_.empty() && !desired_.empty() && desired_[g] && !s.partial().empty()) {
      Result<ValueId> r = reshard(l, gv(g).shape, s, *desired_[g]);
      if (r.ok()) {
        l = *r;
        s = *desired_[g];
      }
    }
    local_[g] = l;
    b_.mutable_info(l).spec = s;
    spec_[g] = std::move(s);
  }

  ValueId coll(OpKind k, ValueId x, int dim, const Axes& axes, int dim2 = 0) {
    OpAttrs a;
    a.dim = dim;
    a.dim2 = dim2;
    a.mesh_axes = axes;
    a.group_size = axes_size(mesh_, axes);
    return b_.emit(k, {x}, a)[0];
  }

  // The one verb: local value x of global shape g, sharded S, to sharding D (docs/sharding.md).
  Result<ValueId> reshard(ValueId x, const Shape& g, const PartitionSpec& S, const PartitionSpec& D) {
    if (S == D) return x;
    ENG_RETURN_IF_ERROR(check_divisible(g, D, "reshard target"));
    Dims s = S.dims();
    const Dims& d = D.dims();
    Axes remaining;
    for (const auto& a : S.partial())
      if (!contains(D.partial(), a)) remaining.push_back(a);
    for (const auto& a : D.partial())
      ENG_CHECK(contains(S.partial(), a), "reshard: target {} is partial over '{}' but source {} is not",
                D.to_string(), a, S.to_string());
    for (size_t j = 0; j < s.size() && !remaining.empty(); ++j) {
      if (!is_prefix(s[j], d[j])) continue;
      Axes q;
      for (size_t k = s[j].size(); k < d[j].size() && contains(remaining, d[j][k]); ++k)
        q.push_back(d[j][k]);
      if (q.empty()) continue;
      x = coll(OpKind::kReduceScatter, x, static_cast<int>(j), q);
      for (const auto& a : q) {
        s[j].push_back(a);
        remaining.erase(std::find(remaining.begin(), remaining.end(), a));
      }
    }
    if (!remaining.empty()) x = coll(OpKind::kAllReduce, x, 0, remaining);
    // Single-axis moves between dims: all-to-all (split j, concatenate i).
    for (size_t i = 0; i < s.size(); ++i) {
      while (!s[i].empty() && !is_prefix(s[i], d[i])) {
        const std::string a = s[i].back();
        Axes rest(s[i].begin(), s[i].end() - 1);
        if (!is_prefix(rest, d[i])) break;
        int to = -1;
        for (size_t j = 0; j < s.size(); ++j) {
          if (j == i) continue;
          Axes grown = s[j];
          grown.push_back(a);
          if (is_prefix(grown, d[j])) to = static_cast<int>(j);
        }
        if (to < 0) break;
        x = coll(OpKind::kAllToAll, x, to, {a}, static_cast<int>(i));
        s[i].pop_back();
        s[to].push_back(a);
      }
    }
    for (size_t i = 0; i < s.size(); ++i) {
      const size_t c = common_prefix(s[i], d[i]);
      if (c == s[i].size()) continue;
      x = coll(OpKind::kAllGather, x, static_cast<int>(i), Axes(s[i].begin() + c, s[i].end()));
      s[i].resize(c);
    }
    for (size_t j = 0; j < s.size(); ++j) {
      if (d[j].size() == s[j].size()) continue;
      x = coll(OpKind::kDynamicSlice, x, static_cast<int>(j), Axes(d[j].begin() + s[j].size(), d[j].end()));
      s[j] = d[j];
    }
    return x;
  }

  Result<ValueId> get(ValueId g, const PartitionSpec& D) {
    if (static_cast<size_t>(g) < routed_.size() && routed_[g] != kNoValue)  // a buffer, not a block
      return unimplemented(
          "value {} holds moe_ep_dispatch's rows in the expert-parallel receive buffer and is "
          "read as a plain array (only ragged_dot, its gradient, elementwise ops and "
          "moe_ep_return may read it)",
          g);
    return reshard(local_[g], shp(g), spec_[g], norm(D, rank(g)));
  }

  // Emits kind on the given local inputs with the global attrs; outputs get `specs`.
  std::vector<ValueId> emit(const Instr& in, std::vector<ValueId> inputs, OpAttrs attrs,
                            const std::vector<PartitionSpec>& specs) {
    attrs.out_logical.clear();
    attrs.out_like = -1;
    std::vector<ValueId> outs = b_.emit(in.kind, std::move(inputs), attrs);
    for (size_t o = 0; o < outs.size() && o < in.outputs.size(); ++o)
      set_attributed(in, outs[o], norm(specs[o], rank(in.outputs[o])), static_cast<int>(o));
    return outs;
  }

  // set() for in's output o, keeping its remat attribution (engine/ir/remat.h) for
  // c:temps(n).
  void set_attributed(const Instr& in, ValueId local, PartitionSpec s, int o = 0) {
    set(in.outputs[o], local, std::move(s));
    b_.mutable_info(local).recomputed = gv(in.outputs[o]).recomputed;
    b_.mutable_info(local).checkpoint_name = gv(in.outputs[o]).checkpoint_name;
  }

  // A collective permute over `axes` with zero fill: member r's x goes to r + shift, from
  // the members [source_start, source_start + source_size) only when source_size > 0.
  ValueId permute(ValueId x, const Axes& axes, int64_t shift, int64_t source_start,
                  int64_t source_size) {
    OpAttrs a;
    a.mesh_axes = axes;
    a.group_size = axes_size(mesh_, axes);
    a.shift = shift;
    a.fill_zero = true;
    a.start = source_start;
    a.size = source_size;
    return b_.emit(OpKind::kCollectivePermute, {x}, a)[0];
  }

  // The sharding elementwise operands agree on: the most-sharded operand's dims.
  PartitionSpec common(const std::vector<ValueId>& gs) const {
    PartitionSpec best = dims_only(spec_[gs[0]]);
    for (ValueId g : gs)
      if (shards(spec_[g], mesh_) > shards(best, mesh_)) best = dims_only(spec_[g]);
    return best;
  }

  // The jax.lax primitive's name, as JAX's errors print it: compare is eq, ne, lt, le, gt or
  // ge by its direction, select is select_n (jnp.where's), remainder rem; the others print as
  // the op (the front-end checks sub, div, max, ... before they become the engine's ops).
  static std::string_view jax_name(const Instr& in) {
    static constexpr std::string_view kCompare[] = {"eq", "ne", "lt", "le", "gt", "ge"};
    if (in.kind == OpKind::kCompare) return kCompare[in.attrs.dim];
    if (in.kind == OpKind::kSelect) return "select_n";
    if (in.kind == OpKind::kRemainder) return "rem";
    return op_name(in.kind);
  }

  // Explicit mode: jax.lax's broadcasting_sharding_rule (engine/sharding/broadcast_sharding.h
  // broadcast_sharding, with JAX's errors). Partial axes are internal (unreduced matmul
  // results) and are reduced to the common dims as in auto mode.
  Result<PartitionSpec> broadcast_common(const Instr& in) const {
    std::vector<ShardedType> ops;
    for (ValueId g : in.inputs)
      ops.push_back({std::string(dtype_name(gv(g).dtype)), shp(g), dims_only(spec_[g])});
    const std::string_view out_dtype =
        in.kind == OpKind::kCompare ? "bool" : dtype_name(gv(in.outputs[0]).dtype);
    return broadcast_sharding(jax_name(in), out_dtype, ops, mesh_);
  }

  // Some axes Explicit, some not (JAX's mixed meshes): the Explicit axes follow
  // broadcast_common's rule (its error names the operands' types, which show Explicit axes
  // only); the others are the partitioner's choice, common()'s, appended where they do not
  // repeat an axis.
  Result<PartitionSpec> mixed_common(const Instr& in) const {
    const auto& x = in.inputs;
    const int r = rank(x[0]);
    Dims out(r);
    bool bad = false;
    for (ValueId g : x) {
      const Dims s = project(PartitionSpec(dims_only(spec_[g]).dims()).dims(), true);
      for (int i = 0; i < r && i < static_cast<int>(s.size()); ++i) {
        if (s[i].empty()) continue;
        if (out[i].empty()) out[i] = s[i];
        else if (out[i] != s[i]) bad = true;
      }
    }
    Axes used = all_axes(out, 0, r);
    for (size_t i = 0; i < used.size(); ++i)
      for (size_t j = i + 1; j < used.size(); ++j) bad |= used[i] == used[j];
    if (bad) {
      std::vector<std::string> specs;
      for (ValueId g : x) {
        Dims d = project(dims_only(spec_[g]).dims(), true);
        d.resize(static_cast<size_t>(rank(g)));
        specs.push_back(jax_tuple_string(d));
      }
      return invalid_argument("{} got incompatible shardings for broadcasting: {}.",
                              jax_name(in), fmt::join(specs, ", "));
    }
    PartitionSpec best;
    for (ValueId g : x) {
      const PartitionSpec a(project(dims_only(spec_[g]).dims(), false));
      if (shards(a, mesh_) > shards(best, mesh_)) best = a;
    }
    for (int i = 0; i < r; ++i)
      for (const std::string& a : best.dim_or_none(i))
        if (!contains(used, a)) out[i].push_back(a), used.push_back(a);
    return PartitionSpec(out);
  }

  // Dims with the given dims cleared (made whole on every device).
  static Dims whole(Dims d, std::initializer_list<int> which) {
    for (int i : which)
      if (i >= 0 && i < static_cast<int>(d.size())) d[i].clear();
    return d;
  }

  Status simple(const Instr& in, const std::vector<PartitionSpec>& in_specs,
                const std::vector<PartitionSpec>& out_specs, OpAttrs attrs) {
    std::vector<ValueId> xs;
    for (size_t i = 0; i < in.inputs.size(); ++i) {
      ENG_ASSIGN_OR_RETURN(ValueId x, get(in.inputs[i], in_specs[i]));
      xs.push_back(x);
    }
    emit(in, std::move(xs), std::move(attrs), out_specs);
    return ok_status();
  }

  // The op rules are public for kRules (below); the class is internal to this file.
 public:
  Status instr(const Instr& in);
  Status vmapped(const Instr& in);
  // ---- op rules (the kRules table below): a factor map, or one of these by hand ----
  Status by_factors(const Instr& in, const struct FactorMap& map);
  Status rmsnorm(const Instr& in);
  Status layernorm(const Instr& in);
  Status bias_add(const Instr& in);
  Status add(const Instr& in);
  Status linear(const Instr& in);
  Status xent(const Instr& in);
  Status embed_lookup_grad(const Instr& in);
  Status masked_mean_loss_grad(const Instr& in);
  Status sum_squares(const Instr& in);
  Status replicated(const Instr& in);
  Status adamw(const Instr& in);
  Status rows(const Instr& in);
  Status concat(const Instr& in);
  Status not_global(const Instr& in);
  Status reshape(const Instr& in);
  Status shift(const Instr& in);
  Status attention(const Instr& in);  // attention and its grad, with or without segment ids
  Status repeat_kv(const Instr& in);
  Status moe_route(const Instr& in);
  Status moe_dispatch(const Instr& in);
  Status moe_combine_weights_grad(const Instr& in);
  Status expert_matmul(const Instr& in);
  Status moe_top_k(const Instr& in);
  Status moe_permute(const Instr& in);
  Status moe_permute_weights_grad(const Instr& in);
  Status ragged_dot(const Instr& in);
  Status ragged_all_to_all(const Instr& in);
  // MaxText's expert parallelism for the dropless dispatch (spmd_matmul.cpp): moe_ep_dispatch
  // and moe_ep_return lowered, and the ops on the rows in between (routed()).
  Status moe_ep(const Instr& in);
  Status routed(const Instr& in);
  Axes ep_axes(const OpAttrs& at) const;
  Status ep_plan(ValueId groups, const Axes& ep, const Axes& rows, int64_t N, const OpAttrs& at);
  ValueId local_permute(ValueId x, ValueId order, ValueId rank, bool inverse) {
    OpAttrs a;
    a.size = 1;
    a.inverse = inverse;
    return b_.emit(OpKind::kMoePermute, {x, order, rank}, a)[0];
  }
  Status index_in_dim(const Instr& in);
  Status add_index_in_dim(const Instr& in);
  Status dynamic_slice_in_dim(const Instr& in);
  Status dynamic_update_slice_in_dim(const Instr& in);
  Dims accumulator_dims(const Instr& in, int dim) const;
  Status index_per_row(const Instr& in);
  Status add_index_per_row(const Instr& in);
  Status transpose(const Instr& in);
  void desire_stacked_slices();
  void desire_through_converts();
  ValueId local_reshape(ValueId x, const Shape& local) {
    OpAttrs a;
    a.new_shape.assign(local.dims().begin(), local.dims().end());
    return b_.emit(OpKind::kReshape, {x}, a)[0];
  }
  Status matmul(const Instr& in);
  Status wanted_out(const Instr& in, int out_rank, std::optional<PartitionSpec>& want);
  Status check_matmul_ambiguity(const Instr& in, const MatmulDims& m, const Dims& da,
                                 const Dims& db);
  void agree_contracting(const MatmulDims& m, bool paired, Dims& da, Dims& db) const;
  Status emit_matmul(const Instr& in, const MatmulDims& m, const Dims& da, const Dims& db,
                     const std::optional<PartitionSpec>& want);
  Status constraint(const Instr& in);
  Status masked_mean_loss(const Instr& in);
  Status embed_lookup(const Instr& in);
  Status vocab_parallel_xent(const Instr& in);
  static bool disjoint(const Axes& a, const Axes& b) {
    for (const auto& x : a)
      if (contains(b, x)) return false;
    return true;
  }
  // The first global index of this device's block of `block` elements along axes.
  ValueId axis_index(const Axes& axes, int64_t block) {
    OpAttrs a;
    a.mesh_axes = axes;
    a.group_size = axes_size(mesh_, axes);
    a.size = block;
    return b_.emit(OpKind::kAxisIndex, {}, a)[0];
  }
  ValueId all_reduce(ValueId x, const Axes& axes, bool max) {
    OpAttrs a;
    a.mesh_axes = axes;
    a.group_size = axes_size(mesh_, axes);
    a.reduce_max = max;
    return b_.emit(OpKind::kAllReduce, {x}, a)[0];
  }
  // A global output computed by several local ops: its value, spec and remat attribution.
  void set_output(ValueId g, ValueId l, const PartitionSpec& s) {
    set(g, l, norm(s, rank(g)));
    b_.mutable_info(local_[g]).recomputed = gv(g).recomputed;
    b_.mutable_info(local_[g]).checkpoint_name = gv(g).checkpoint_name;
  }

  const Program& g_;
  const Mesh& mesh_;
  const SpmdOptions& o_;
  Builder b_;
  // The axes the explicit-mode rules apply to, at the instruction being partitioned
  // (set_axis_types): all of the mesh's (the engine's explicit mode, as before per-axis types),
  // some (a mixed mesh, or an auto_axes / explicit_axes region) or none.
  Axes explicit_axes_;
  bool explicit_ = false;      // some axis is Explicit
  bool all_explicit_ = false;  // every mesh axis is
  // Expert parallelism (moe_ep_dispatch): per global value, the group_sizes value of the
  // dispatch whose receive buffer holds it (kNoValue: a plain block of the global value); per
  // group_sizes value, its plan's local values.
  struct EpPlan {
    Axes ep, rows;        // the expert group's axes; all the rows' axes (ep among them)
    int64_t R = 0, N = 0; // receive buffer rows; rows per b
    ValueId send_order, send_rank, io, ss, oo, rio, rss, roo, local_order, local_rank, groups;
  };
  std::vector<ValueId> routed_;
  std::map<ValueId, EpPlan> plans_;
  std::vector<ValueId> local_;       // global value -> its local value
  std::vector<PartitionSpec> spec_;  // global value -> its sharding (normalised)
  std::vector<std::optional<PartitionSpec>> desired_;  // gradients: their state's sharding
  // A bf16 gradient's state sharding, seen through the converts to grad_dtype after it (only
  // a rule's choice of layout: the partial sum is still reduced after the convert).
  std::vector<std::optional<PartitionSpec>> desired_before_convert_;
  Axes vm_;                    // the vmapped instruction's axes (stage), while partitioning it
  std::vector<bool> swapped_;  // its inputs, seen per slice
};

// A sharding rule as data, in the spirit of Shardy's op sharding rules: each operand
// (inputs, then outputs) lists one factor per dim, "..." standing for the leading dims of any
// rank, e.g. "(...),(...)->(...)" (elementwise) or "(b,t!,h,d!),(b,t!)->(b,t!,h,d!)" (rope).
// Operands naming a factor are sharded alike along it; a factor marked "!" stays whole. The
// factors' shardings come from the inputs: kAgree, every input carries the same factors and
// they take the sharding the inputs agree on (auto: the most-sharded input's; explicit: JAX's
// broadcasting rule, whose error names every operand); kFirstInput, from the first input.
struct FactorMap {
  enum Source : uint8_t { kAgree, kFirstInput };
  const char* text;
  Source source;
};

// The attention ops' factor maps (q, k, v[, segment ids] -> out, lse; and their gradients).
constexpr FactorMap kAttentionFactors{"(b,t!,h,d!),(b,t!,h,d!),(b,t!,h,d!)->(b,t!,h,d!),(b,h,t!)",
                                      FactorMap::kFirstInput};
constexpr FactorMap kAttentionGradFactors{
    "(b,t!,h,d!),(b,t!,h,d!),(b,t!,h,d!),(b,t!,h,d!),(b,h,t!),(b,t!,h,d!)"
    "->(b,t!,h,d!),(b,t!,h,d!),(b,t!,h,d!)",
    FactorMap::kFirstInput};
// With segment ids (B, T): they follow the batch, their sequence dim whole like q's.
constexpr FactorMap kSegAttentionFactors{
    "(b,t!,h,d!),(b,t!,h,d!),(b,t!,h,d!),(b,t!)->(b,t!,h,d!),(b,h,t!)", FactorMap::kFirstInput};
constexpr FactorMap kSegAttentionGradFactors{
    "(b,t!,h,d!),(b,t!,h,d!),(b,t!,h,d!),(b,t!,h,d!),(b,h,t!),(b,t!,h,d!),(b,t!)"
    "->(b,t!,h,d!),(b,t!,h,d!),(b,t!,h,d!)",
    FactorMap::kFirstInput};

}  // namespace eng::spmd_internal
