// engine/compile/spmd.cpp: the partitioner: one walk over the global program applying the
// op rules of docs/sharding.md, with every layout change going through reshard().
#include "engine/compile/spmd.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "engine/base/check.h"
#include "engine/ir/builder.h"
#include "engine/ir/op_table.h"
#include "engine/sharding/shard_geometry.h"

namespace eng {

namespace {

using Axes = std::vector<std::string>;
using Dims = std::vector<Axes>;

bool contains(const Axes& v, const std::string& a) { return std::find(v.begin(), v.end(), a) != v.end(); }


bool is_prefix(const Axes& p, const Axes& of) {
  return p.size() <= of.size() && std::equal(p.begin(), p.end(), of.begin());
}

size_t common_prefix(const Axes& a, const Axes& b) {
  size_t c = 0;
  while (c < a.size() && c < b.size() && a[c] == b[c]) ++c;
  return c;
}

void sort_mesh_order(Axes& axes, const Mesh& m) {
  std::sort(axes.begin(), axes.end(),
            [&](const std::string& x, const std::string& y) { return m.axis_index(x) < m.axis_index(y); });
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
}

// Rank entries, size-1 (and absent) axes dropped, partial sorted in mesh order.
PartitionSpec normalize(const PartitionSpec& s, int rank, const Mesh& m) {
  Dims dims(rank);
  for (int i = 0; i < rank && i < s.rank(); ++i) dims[i] = remove_size_one_axes(s.dim(i), m);
  Axes partial = remove_size_one_axes(s.partial(), m);
  sort_mesh_order(partial, m);
  return PartitionSpec(std::move(dims), std::move(partial));
}

PartitionSpec dims_only(const PartitionSpec& s) { return PartitionSpec(s.dims()); }

int64_t shards(const PartitionSpec& s, const Mesh& m) {
  int64_t n = 1;
  for (const auto& d : s.dims()) n *= axes_size(m, d);
  return n;
}

Axes all_axes(const Dims& dims, int begin, int end) {
  Axes out;
  for (int i = begin; i < end; ++i) out.insert(out.end(), dims[i].begin(), dims[i].end());
  return out;
}

std::string spec_string(const Dims& d) { return PartitionSpec(d).to_string(); }

// Python's str(tuple(spec)) as JAX prints it in broadcasting errors: ('data', None),
// (('data', 'fsdp'), None), ('tensor',).
std::string jax_tuple_string(const Dims& d) {
  std::vector<std::string> parts;
  for (const Axes& e : d) {
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

// A matmul's operand dims by role: a's (b's) contracting and free dims, ascending.
struct MatmulDims {
  std::vector<int> a_free, a_con, b_free, b_con;
  int out_rank() const { return static_cast<int>(a_free.size() + b_free.size()); }
};

MatmulDims matmul_dims(const OpAttrs& at, const Shape& A, const Shape& B) {
  MatmulDims m;
  for (int i = 0; i < A.rank(); ++i)
    ((at.trans_a ? i < at.a_split : i >= at.a_split) ? m.a_con : m.a_free).push_back(i);
  for (int i = 0; i < B.rank(); ++i)
    ((at.trans_b ? i >= at.b_split : i < at.b_split) ? m.b_con : m.b_free).push_back(i);
  return m;
}

// Whether any of axes `t` shards a dim of `d` other than `skip`.
bool used_elsewhere(const Axes& t, const Dims& d, int skip) {
  for (size_t j = 0; j < d.size(); ++j)
    if (static_cast<int>(j) != skip)
      for (const auto& a : t)
        if (contains(d[j], a)) return true;
  return false;
}

// Ambiguous output sharding: an axis on free dims of both operands, or contracting pairs
// sharded differently (da, db: the operands' shardings as they come).
bool matmul_ambiguous(const MatmulDims& m, const Dims& da, const Dims& db) {
  bool ambiguous = false;
  Axes free_a, free_b;
  for (int i : m.a_free) free_a.insert(free_a.end(), da[i].begin(), da[i].end());
  for (int i : m.b_free) free_b.insert(free_b.end(), db[i].begin(), db[i].end());
  for (const auto& a : free_a) ambiguous |= contains(free_b, a);
  for (size_t k = 0; k < m.a_con.size() && k < m.b_con.size(); ++k)
    ambiguous |= da[m.a_con[k]] != db[m.b_con[k]];
  return ambiguous;
}

// An axis on free dims of both operands would appear twice: gather it from one side. With
// a wanted output sharding placing the axis, the side it places it on keeps it; otherwise
// the bigger operand (`a_bigger`: a's bytes >= b's) keeps it and the cheaper one gathers.
void gather_shared_free_axes(const MatmulDims& m, bool a_bigger,
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
      : g_(g), mesh_(mesh), o_(o), b_(g.name()),
        explicit_(o.shard_mode == ShardMode::kExplicit || mesh.axis_type() == AxisType::kExplicit) {}

  Result<Partitioned> run() {
    const size_t nv = g_.values().size();
    local_.assign(nv, kNoValue);
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
  // ge by its direction, select is select_n (jnp.where's); the others print as the op.
  static std::string_view jax_name(const Instr& in) {
    static constexpr std::string_view kCompare[] = {"eq", "ne", "lt", "le", "gt", "ge"};
    if (in.kind == OpKind::kCompare) return kCompare[in.attrs.dim];
    if (in.kind == OpKind::kSelect) return "select_n";
    return op_name(in.kind);
  }

  // Explicit mode (jax.lax broadcasting_sharding_rule): per dim, the operands' entries must
  // be equal or unsharded (None takes the other's axes: a local slice, no traffic); anything
  // else is JAX's TypeError naming every operand's spec. Partial axes are internal (unreduced
  // matmul results) and are reduced to the common dims as in auto mode.
  Result<PartitionSpec> broadcast_common(const Instr& in) const {
    const auto& x = in.inputs;
    const int r = rank(x[0]);
    Dims out(r);
    bool bad = false;
    for (ValueId g : x) {
      const PartitionSpec s = dims_only(spec_[g]);
      for (int i = 0; i < r; ++i) {
        const Axes& e = s.dim_or_none(i);
        if (e.empty()) continue;
        if (out[i].empty()) out[i] = e;
        else if (out[i] != e) bad = true;
      }
    }
    // An axis may appear once: ('data', None) with (None, 'data') is no valid result either.
    const Axes used = all_axes(out, 0, r);
    for (size_t i = 0; i < used.size(); ++i)
      for (size_t j = i + 1; j < used.size(); ++j) bad |= used[i] == used[j];
    if (bad) {
      std::vector<std::string> specs;
      for (ValueId g : x) specs.push_back(jax_tuple_string(dims_only(spec_[g]).dims()));
      return invalid_argument("{} got incompatible shardings for broadcasting: {}.",
                              jax_name(in), fmt::join(specs, ", "));
    }
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
  Status index_in_dim(const Instr& in);
  Status add_index_in_dim(const Instr& in);
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
  Status check_matmul_ambiguity(const MatmulDims& m, const Dims& da, const Dims& db);
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
  const bool explicit_;
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

namespace {
// One operand of a factor map: its factors, "..." first if present; whole factors end in '!'.
struct FactorOperand {
  bool ellipsis = false;
  bool ellipsis_whole = false;
  std::vector<std::string> factors;
};

std::vector<FactorOperand> parse_operands(std::string_view t) {
  std::vector<FactorOperand> ops;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '(') continue;
    const size_t close = t.find(')', i);
    FactorOperand op;
    std::string_view body = t.substr(i + 1, close - i - 1);
    while (!body.empty()) {
      const size_t comma = body.find(',');
      std::string f(body.substr(0, comma));
      if (f.rfind("...", 0) == 0) {
        op.ellipsis = true;
        op.ellipsis_whole = f == "...!";
      } else {
        op.factors.push_back(f);
      }
      body = comma == std::string_view::npos ? std::string_view() : body.substr(comma + 1);
    }
    ops.push_back(op);
    i = close;
  }
  return ops;
}
}  // namespace

// Applies a factor map (see FactorMap): factor shardings from the source spec, then every
// operand's spec from its factors.
Status Partitioner::by_factors(const Instr& in, const FactorMap& map) {
  const auto& x = in.inputs;
  const std::vector<FactorOperand> ops = parse_operands(map.text);
  ENG_CHECK(ops.size() == x.size() + in.outputs.size(),
            "partition: {}'s factor map {} has {} operands", op_name(in.kind), map.text,
            ops.size());
  PartitionSpec src = dims_only(spec_[x[0]]);
  if (map.source == FactorMap::kAgree) {
    if (explicit_) {
      ENG_ASSIGN_OR_RETURN(src, broadcast_common(in));
    } else {
      src = common(x);
    }
  }
  // The source operand (input 0) names the factors: leading dims for "...", then its own.
  const FactorOperand& first = ops[0];
  const int r0 = rank(x[0]), lead0 = r0 - static_cast<int>(first.factors.size());
  auto axes_of = [&](const std::string& f) -> Axes {
    if (f.back() == '!') return {};
    for (size_t k = 0; k < first.factors.size(); ++k)
      if (first.factors[k] == f) return src.dim_or_none(lead0 + static_cast<int>(k));
    return {};  // a factor no input carries (one_hot's depth): whole
  };
  auto spec_of = [&](size_t o, int r) {
    const FactorOperand& op = ops[o];
    const int lead = r - static_cast<int>(op.factors.size());
    Dims d(r);
    for (int i = 0; i < lead; ++i)
      if (!op.ellipsis_whole && i < lead0) d[i] = src.dim_or_none(i);
    for (size_t k = 0; k < op.factors.size(); ++k) d[lead + k] = axes_of(op.factors[k]);
    return PartitionSpec(d);
  };
  std::vector<PartitionSpec> ins, outs;
  for (size_t i = 0; i < x.size(); ++i) ins.push_back(spec_of(i, rank(x[i])));
  for (size_t o = 0; o < in.outputs.size(); ++o)
    outs.push_back(spec_of(x.size() + o, rank(in.outputs[o])));
  return simple(in, ins, outs, in.attrs);
}

Status Partitioner::rmsnorm(const Instr& in) {  // rows on dim 0 only; the normalised dim whole
  const auto& x = in.inputs;
  const PartitionSpec rep;
  const int r = rank(x[0]);
  Dims d = dims_only(spec_[x[0]]).dims();
  for (int i = 1; i < r; ++i) d[i].clear();
  const PartitionSpec tx(d), rows(Dims{d[0]});
  if (in.kind == OpKind::kRmsNorm) return simple(in, {tx, rep}, {tx, rows}, in.attrs);
  Dims ds{{}};
  const Axes partial = all_axes(d, 0, r - 1);
  return simple(in, {tx, rep, rows, tx}, {tx, PartitionSpec(ds, partial)}, in.attrs);
}

// As rmsnorm: rows on dim 0 only, the normalised dim whole; scale and bias replicated, their
// gradients partial sums over the row axes.
Status Partitioner::layernorm(const Instr& in) {
  const auto& x = in.inputs;
  const PartitionSpec rep;
  const int r = rank(x[0]);
  Dims d = dims_only(spec_[x[0]]).dims();
  for (int i = 1; i < r; ++i) d[i].clear();
  const PartitionSpec tx(d), rows(Dims{d[0]});
  if (in.kind == OpKind::kLayerNorm) return simple(in, {tx, rep, rep}, {tx, rows, rows}, in.attrs);
  const PartitionSpec partial(Dims{{}}, all_axes(d, 0, r - 1));
  return simple(in, {tx, rep, rows, rows, tx}, {tx, partial, partial}, in.attrs);
}

// bias_add: x keeps its dims' sharding (no partial sum: the bias is added once) and the bias
// takes its trailing dims'; bias_add_grad: dy's trailing dims' sharding, partial over the
// axes of its leading (summed) dims.
Status Partitioner::bias_add(const Instr& in) {
  const bool grad = in.kind == OpKind::kBiasAddGrad;
  const ValueId x = in.inputs[0];
  const int r = rank(x), f = grad ? in.attrs.dim : rank(in.inputs[1]);
  const PartitionSpec tx = dims_only(spec_[x]);
  const Dims& d = tx.dims();
  const Dims trailing(d.begin() + (r - f), d.end());
  if (!grad) return simple(in, {tx, PartitionSpec(trailing)}, {tx}, in.attrs);
  return simple(in, {tx}, {PartitionSpec(trailing, all_axes(d, 0, r - f))}, in.attrs);
}

Status Partitioner::add(const Instr& in) {
  const auto& x = in.inputs;
  if (!spec_[x[0]].partial().empty() && spec_[x[0]] == spec_[x[1]])  // linear: stays partial
    return simple(in, {spec_[x[0]], spec_[x[1]]}, {spec_[x[0]]}, in.attrs);
  return by_factors(in, {"(...),(...)->(...)", FactorMap::kAgree});
}

Status Partitioner::linear(const Instr& in) {  // scale, convert: partial passes through
  return simple(in, {spec_[in.inputs[0]]}, {spec_[in.inputs[0]]}, in.attrs);
}

Status Partitioner::xent(const Instr& in) {  // vocab whole, unless vocab-parallel
  const auto& x = in.inputs;
  if (vm_.empty() && !dims_only(spec_[x[0]]).dim_or_none(rank(x[0]) - 1).empty())
    return vocab_parallel_xent(in);
  const int r = rank(x[0]);
  Dims d = whole(dims_only(spec_[x[0]]).dims(), {r - 1});
  const PartitionSpec l(d), rows(Dims(d.begin(), d.end() - 1));
  if (in.kind == OpKind::kSoftmaxCrossEntropy) return simple(in, {l, rows}, {rows, rows}, in.attrs);
  return simple(in, {l, rows, rows, rows}, {l}, in.attrs);
}

// (ids, dy) -> dtable (V, E): partial over the rows' axes.
Status Partitioner::embed_lookup_grad(const Instr& in) {
  const auto& x = in.inputs;
  const int r = rank(x[1]);
  Dims d = dims_only(spec_[x[1]]).dims();
  const Dims ids(d.begin(), d.end() - 1);
  const Axes partial = all_axes(d, 0, r - 1);
  // Vocab-parallel: the gradient's target (its state's sharding) splits the vocab over
  // axes the rows and dy do not use: each device writes only its block.
  const std::optional<PartitionSpec>& target = desired_[in.outputs[0]]
                                                   ? desired_[in.outputs[0]]
                                                   : desired_before_convert_[in.outputs[0]];
  const Axes av = vm_.empty() && target ? target->dim_or_none(0) : Axes{};
  if (!av.empty() && disjoint(av, all_axes(d, 0, r - 1))) {
    // dy's embed dim gives up the vocab axes (an activation-sized gather, instead of a
    // whole (V, E) partial table per device).
    Axes& e = d[r - 1];
    e.erase(
        std::remove_if(e.begin(), e.end(), [&](const std::string& a) { return contains(av, a); }),
        e.end());
    const int64_t block = shp(in.outputs[0])[0] / axes_size(mesh_, av);
    ENG_ASSIGN_OR_RETURN(ValueId li, get(x[0], PartitionSpec(ids)));
    ENG_ASSIGN_OR_RETURN(ValueId ldy, get(x[1], PartitionSpec(d)));
    OpAttrs a = in.attrs;
    a.depth = block;
    emit(in, {li, ldy, axis_index(av, block)}, a, {PartitionSpec(Dims{av, d[r - 1]}, partial)});
    return ok_status();
  }
  return simple(in, {PartitionSpec(ids), PartitionSpec(d)},
                {PartitionSpec(Dims{{}, d[r - 1]}, partial)}, in.attrs);
}

Status Partitioner::masked_mean_loss_grad(const Instr& in) {
  const PartitionSpec rep, s0 = dims_only(spec_[in.inputs[0]]);
  std::vector<PartitionSpec> ins{s0, rep};
  if (in.inputs.size() > 2) ins.push_back(rep);
  return simple(in, ins, {s0}, in.attrs);
}

Status Partitioner::sum_squares(const Instr& in) {  // local sum, partial over every sharded axis
  const PartitionSpec sx = dims_only(spec_[in.inputs[0]]);
  return simple(in, {sx}, {PartitionSpec(Dims{}, all_axes(sx.dims(), 0, sx.rank()))}, in.attrs);
}

Status Partitioner::replicated(const Instr& in) {  // scalar optimizer and metric ops
  return simple(in, std::vector<PartitionSpec>(in.inputs.size(), PartitionSpec()),
                {PartitionSpec()}, in.attrs);
}

Status Partitioner::adamw(const Instr& in) {  // param, grad, mu, nu in the state sharding (mu's)
  const PartitionSpec rep, st = dims_only(spec_[in.inputs[2]]);
  return simple(in, {st, st, st, st, rep, rep, rep}, {st, st, st}, in.attrs);
}

// Slice, pad: the sliced (padded) dim whole, except in two cases where the rows stay within
// one member's block b of a dim split over `axes` (n members):
// - a slice of rows inside block b of x's sharded dim: member b slices them locally and sends
//   them to each other member by a one-source permute (b -> b + k; the members' sum is exact,
//   one term each), so each receives the slice once instead of gathering every block: n
//   collectives moving (n-1)/n of the slice per member against one moving n-1 blocks (the
//   pipeline's stage-0 input cotangent is such a slice: the transpose of its pad);
// - a pad whose out_sharding splits the padded dim, of an x whole on it, landing inside block
//   b: each member pads x into a block and a zero-traffic permute (shift 0, source b) keeps
//   member b's and gives the others zeros, instead of every member building the whole padded
//   dim and slicing it (the pipeline's stage-0 input).
Status Partitioner::rows(const Instr& in) {
  const ValueId x = in.inputs[0];
  const int dim = in.attrs.dim;
  Dims sd = dims_only(spec_[x]).dims();
  sd.resize(std::max<size_t>(sd.size(), dim + 1));
  const int64_t start = in.attrs.start;
  // The block (index b, blk rows) of `size` rows over `axes` that holds rows
  // [start, start + rows); b = -1 when there is none.
  struct Block {
    int64_t b = -1, blk = 0;
  };
  auto block_of = [&](const Axes& axes, int64_t size, int64_t rows) {
    const int64_t n = axes_size(mesh_, axes);
    if (n <= 1 || size % n != 0 || rows < 1) return Block{};
    const int64_t blk = size / n;
    return start / blk == (start + rows - 1) / blk ? Block{start / blk, blk} : Block{};
  };
  if (in.attrs.vmap == 0 && in.kind == OpKind::kSlice) {
    const Axes axes = sd[dim];
    const auto [b, blk] = block_of(axes, gv(x).shape[dim], in.attrs.size);
    if (b >= 0) {
      ENG_ASSIGN_OR_RETURN(ValueId lx, get(x, PartitionSpec(sd)));
      OpAttrs local = in.attrs;
      local.start = start - b * blk;
      const ValueId part = b_.emit(OpKind::kSlice, {lx}, local)[0];
      ValueId sum = kNoValue;
      for (int64_t to = 0; to < axes_size(mesh_, axes); ++to) {
        const ValueId moved = permute(part, axes, to - b, b, 1);
        sum = sum == kNoValue ? moved : b_.emit(OpKind::kAdd, {sum, moved}, OpAttrs{})[0];
      }
      set_attributed(in, sum, PartitionSpec(whole(sd, {dim})));
      return ok_status();
    }
  }
  if (in.attrs.vmap == 0 && in.kind == OpKind::kPad && sd[dim].empty()) {
    std::optional<PartitionSpec> want;
    ENG_RETURN_IF_ERROR(wanted_out(in, rank(in.outputs[0]), want));
    const Axes axes = want ? want->dims()[dim] : Axes{};
    bool shared = false;  // an axis of the padded dim already splits another dim of x
    for (const Axes& other : sd)
      for (const std::string& a : axes) shared |= contains(other, a);
    const int64_t size = in.attrs.size, rows = gv(x).shape[dim];
    const auto [b, blk] = shared ? Block{} : block_of(axes, size, rows);
    if (b >= 0) {
      ENG_ASSIGN_OR_RETURN(ValueId lx, get(x, PartitionSpec(sd)));
      ValueId block = lx;
      if (rows != blk) {
        OpAttrs local = in.attrs;
        local.out_logical.clear();
        local.start = start - b * blk;
        local.size = blk;
        block = b_.emit(OpKind::kPad, {lx}, local)[0];
      }
      Dims od = sd;
      od[dim] = axes;
      set_attributed(in, permute(block, axes, 0, b, 1), PartitionSpec(od));
      return ok_status();
    }
  }
  const PartitionSpec d(whole(sd, {dim}));
  return simple(in, {d}, {d}, in.attrs);
}

// Scanned layers (op.h). index_in_dim: the indexed dim whole (a stacked weight's `layers` dim
// is unsharded unless mapped to a mesh axis), the other dims and partial sums pass through.
Status Partitioner::index_in_dim(const Instr& in) {
  const PartitionSpec& s = spec_[in.inputs[0]];
  Dims d = whole(s.dims(), {in.attrs.dim});
  const PartitionSpec src(d, s.partial());
  d.erase(d.begin() + in.attrs.dim);
  return simple(in, {src}, {PartitionSpec(std::move(d), s.partial())}, in.attrs);
}

// The sharding an add_index_* (update[, acc]) result takes: acc's (without acc: the
// gradient's target, its state's sharding; else the update's with the slot dim inserted),
// slot dim `dim` whole.
Dims Partitioner::accumulator_dims(const Instr& in, int dim) const {
  Dims t;
  if (in.inputs.size() > 1) {
    t = dims_only(spec_[in.inputs[1]]).dims();
  } else if (vm_.empty() && desired_[in.outputs[0]]) {
    t = dims_only(*desired_[in.outputs[0]]).dims();
  } else {
    t = dims_only(spec_[in.inputs[0]]).dims();
    t.insert(t.begin() + dim, Axes{});
  }
  return whole(std::move(t), {dim});
}

// add_index_in_dim (update[, acc]): the result keeps acc's sharding (without acc: the
// gradient's target, its state's sharding), slot dim whole; the update is resharded to
// that sharding without the slot dim (its partial sum reduce-scattered, as a gradient is).
Status Partitioner::add_index_in_dim(const Instr& in) {
  const int dim = in.attrs.dim;
  Dims t = accumulator_dims(in, dim);
  Dims u = t;
  u.erase(u.begin() + dim);
  std::vector<PartitionSpec> ins = {PartitionSpec(u)};
  if (in.inputs.size() > 1) ins.push_back(PartitionSpec(t));
  return simple(in, ins, {PartitionSpec(t)}, in.attrs);
}

// index_per_row (x (N, S, ...)): the slot dim whole, the rows dim and the rest keep their
// axes (partial sums pass through), so each device selects its own rows' slots locally (a
// circular pipeline's weights stay split over `stage`: no bytes move). The local op is told
// the rows' axes to find its global rows (op.h).
Status Partitioner::index_per_row(const Instr& in) {
  const PartitionSpec& s = spec_[in.inputs[0]];
  Dims d = whole(s.dims(), {0});
  d.resize(std::max<size_t>(d.size(), 2));
  const PartitionSpec src(d, s.partial());
  OpAttrs a = in.attrs;
  a.mesh_axes = d[1];
  a.group_size = axes_size(mesh_, d[1]);
  d.erase(d.begin());
  return simple(in, {src}, {PartitionSpec(std::move(d), s.partial())}, a);
}

// add_index_per_row (update[, acc]): as add_index_in_dim with the slot dim 0; the rows dim
// keeps the target's axes, which the local op is told (op.h).
Status Partitioner::add_index_per_row(const Instr& in) {
  Dims t = accumulator_dims(in, 0);
  t.resize(std::max<size_t>(t.size(), 2));
  Dims u(t.begin() + 1, t.end());
  OpAttrs a = in.attrs;
  a.mesh_axes = t[1];
  a.group_size = axes_size(mesh_, t[1]);
  std::vector<PartitionSpec> ins = {PartitionSpec(u)};
  if (in.inputs.size() > 1) ins.push_back(PartitionSpec(t));
  return simple(in, ins, {PartitionSpec(t)}, a);
}

// transpose: each output dim takes its source dim's axes; partial sums pass through.
Status Partitioner::transpose(const Instr& in) {
  const PartitionSpec& s = spec_[in.inputs[0]];
  const std::vector<int64_t>& perm = in.attrs.new_shape;
  Dims d(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) d[i] = s.dim_or_none(static_cast<int>(perm[i]));
  return simple(in, {s}, {PartitionSpec(std::move(d), s.partial())}, in.attrs);
}

// The gradient targets (desired_) of AdamW's gradients, carried back through the
// add_index_in_dim chains that build stacked gradients: each layer's slice is reduced
// straight into its state's sharding, as an unscanned layer's gradient is.
void Partitioner::desire_stacked_slices() {
  for (size_t k = g_.instrs().size(); k-- > 0;) {
    const Instr& in = g_.instrs()[k];
    const bool per_row = in.kind == OpKind::kAddIndexPerRow;
    if ((in.kind != OpKind::kAddIndexInDim && !per_row) || !desired_[in.outputs[0]]) continue;
    const PartitionSpec& want = *desired_[in.outputs[0]];
    if (in.inputs.size() > 1 && !desired_[in.inputs[1]]) desired_[in.inputs[1]] = want;
    const int slot = per_row ? 0 : in.attrs.dim;
    Dims u = whole(want.dims(), {slot});
    if (slot < static_cast<int>(u.size())) u.erase(u.begin() + slot);
    if (!desired_[in.inputs[0]]) desired_[in.inputs[0]] = PartitionSpec(std::move(u));
  }
}

// desired_before_convert_: the input of a convert whose output has a gradient target (bf16
// gradients cast to f32 or grad_dtype; chains of converts too) gets that target, so that
// embed_lookup_grad's vocab-parallel choice is the same as without the cast.
void Partitioner::desire_through_converts() {
  desired_before_convert_.assign(desired_.size(), std::nullopt);
  for (size_t k = g_.instrs().size(); k-- > 0;) {
    const Instr& in = g_.instrs()[k];
    if (in.kind != OpKind::kConvert) continue;
    const ValueId out = in.outputs[0], x = in.inputs[0];
    const std::optional<PartitionSpec>& want =
        desired_[out] ? desired_[out] : desired_before_convert_[out];
    if (want && !desired_[x] && !desired_before_convert_[x]) desired_before_convert_[x] = want;
  }
}

Status Partitioner::concat(const Instr& in) {
  const PartitionSpec d(whole(dims_only(spec_[in.inputs[0]]).dims(), {in.attrs.dim}));
  return simple(in, std::vector<PartitionSpec>(in.inputs.size(), d), {d}, in.attrs);
}

Status Partitioner::not_global(const Instr& in) {
  return invalid_argument("partition: {} may not appear in a global program", op_name(in.kind));
}

namespace {
// An op's rule: a factor map (data), or a hand-written method where the rule is not one.
struct SpmdRule {
  Status (Partitioner::*hand)(const Instr&) = nullptr;
  FactorMap factors = {nullptr, FactorMap::kAgree};
};
using Pt = Partitioner;
constexpr SpmdRule factors(const char* text, FactorMap::Source source = FactorMap::kAgree) {
  return {nullptr, {text, source}};
}
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
constexpr SpmdRule kAttentionRule = {&Pt::attention};
constexpr SpmdRule kAttentionGradRule = {&Pt::attention};

// The SPMD rule of each op (engine/ir/op_table.h).
constexpr OpTable<SpmdRule> kRules = make_op_table<SpmdRule>(
    {
        {OpKind::kEmbedLookup, {&Pt::embed_lookup}},
        {OpKind::kOneHot, factors("(...)->(...,v!)")},
        {OpKind::kMatmul, {&Pt::matmul}},
        {OpKind::kRmsNorm, {&Pt::rmsnorm}},
        {OpKind::kRmsNormGrad, {&Pt::rmsnorm}},
        {OpKind::kRope, factors("(b,t!,h,d!),(b,t!)->(b,t!,h,d!)", FactorMap::kFirstInput)},
        {OpKind::kAttention, kAttentionRule},
        {OpKind::kAttentionGrad, kAttentionGradRule},
        {OpKind::kAdd, {&Pt::add}},
        {OpKind::kSwiglu, factors("(...),(...)->(...)")},
        {OpKind::kMul, factors("(...),(...)->(...)")},
        {OpKind::kSwigluGrad, factors("(...),(...),(...)->(...),(...)")},
        {OpKind::kScale, {&Pt::linear}},
        {OpKind::kConvert, {&Pt::linear}},
        {OpKind::kConstraint, {&Pt::constraint}},
        {OpKind::kSoftmaxCrossEntropy, {&Pt::xent}},
        {OpKind::kSoftmaxCrossEntropyGrad, {&Pt::xent}},
        {OpKind::kMaskedMeanLoss, {&Pt::masked_mean_loss}},
        {OpKind::kEmbedLookupGrad, {&Pt::embed_lookup_grad}},
        {OpKind::kMaskedMeanLossGrad, {&Pt::masked_mean_loss_grad}},
        {OpKind::kSumSquares, {&Pt::sum_squares}},
        {OpKind::kGlobalNorm, {&Pt::replicated}},
        {OpKind::kClipFactor, {&Pt::replicated}},
        {OpKind::kLearningRate, {&Pt::replicated}},
        {OpKind::kIncrement, {&Pt::replicated}},
        {OpKind::kAdamW, {&Pt::adamw}},
        {OpKind::kReshape, {&Pt::reshape}},
        {OpKind::kSlice, {&Pt::rows}},
        {OpKind::kPad, {&Pt::rows}},
        {OpKind::kConcat, {&Pt::concat}},
        {OpKind::kShift, {&Pt::shift}},
        {OpKind::kRepeatKv, {&Pt::repeat_kv}},
        {OpKind::kRepeatKvGrad, {&Pt::repeat_kv}},
        // Per-device ops: the partitioner emits them; a global program has none.
        {OpKind::kAllGather, {&Pt::not_global}},
        {OpKind::kReduceScatter, {&Pt::not_global}},
        {OpKind::kAllReduce, {&Pt::not_global}},
        {OpKind::kAllToAll, {&Pt::not_global}},
        {OpKind::kCollectivePermute, {&Pt::not_global}},
        {OpKind::kDynamicSlice, {&Pt::not_global}},
        {OpKind::kSafeDivide, {&Pt::not_global}},
        {OpKind::kAxisIndex, {&Pt::not_global}},
        {OpKind::kVocabMax, {&Pt::not_global}},
        {OpKind::kVocabStats, {&Pt::not_global}},
        {OpKind::kXentFromStats, {&Pt::not_global}},
        {OpKind::kIndexInDim, {&Pt::index_in_dim}},
        {OpKind::kAddIndexInDim, {&Pt::add_index_in_dim}},
        {OpKind::kTranspose, {&Pt::transpose}},
        {OpKind::kCompare, factors("(...),(...)->(...)")},
        {OpKind::kSelect, factors("(...),(...),(...)->(...)")},
        {OpKind::kIndexPerRow, {&Pt::index_per_row}},
        {OpKind::kAddIndexPerRow, {&Pt::add_index_per_row}},
        {OpKind::kMoeRoute, {&Pt::moe_route}},
        {OpKind::kMoeRouteGrad, {&Pt::moe_route}},
        {OpKind::kMoeDispatch, {&Pt::moe_dispatch}},
        {OpKind::kMoeCombine, {&Pt::moe_dispatch}},
        {OpKind::kMoeCombineWeightsGrad, {&Pt::moe_combine_weights_grad}},
        {OpKind::kExpertMatmul, {&Pt::expert_matmul}},
        {OpKind::kExpertMatmulGrad, {&Pt::expert_matmul}},
        {OpKind::kLayerNorm, {&Pt::layernorm}},
        {OpKind::kLayerNormGrad, {&Pt::layernorm}},
        {OpKind::kBiasAdd, {&Pt::bias_add}},
        {OpKind::kBiasAddGrad, {&Pt::bias_add}},
    },
    factors("(...)->(...)"), factors("(...),(...)->(...)"));  // unary: y = f(x); (x, dy) -> dx
}  // namespace

Status Partitioner::instr(const Instr& in) {
  if (in.attrs.vmap > 0) return vmapped(in);
  const SpmdRule& rule = kRules[op_index(in.kind)];
  return rule.hand ? (this->*rule.hand)(in) : by_factors(in, rule.factors);
}

// jax.vmap with spmd_axis_name="stage": the leading dim goes on `stage` (one slice per
// stage group), each device squeezes its slice, the per-slice rule runs with the stage axis
// taken, and the outputs get the dim back.
Status Partitioner::vmapped(const Instr& in) {
  const int64_t S = in.attrs.vmap;
  const std::string& stage = o_.axes.vmap;
  if (!mesh_.has_axis(stage) || mesh_.axis_size(stage) != S)
    return invalid_argument("partition: {} is vmapped over {} stages but the mesh's {} axis has "
                            "size {}", op_name(in.kind), S, stage,
                            mesh_.has_axis(stage) ? mesh_.axis_size(stage) : 1);
  const Axes vm = {stage};
  struct Saved {
    ValueId g, local;
    PartitionSpec spec;
  };
  std::vector<Saved> saved;
  for (ValueId x : in.inputs) {
    if (swapped_[x]) continue;
    const Shape& gs = gv(x).shape;
    PartitionSpec cur = without_axes(spec_[x], vm);
    Dims d = cur.dims();
    d[0] = vm;
    const PartitionSpec full = normalize(PartitionSpec(d, cur.partial()), gs.rank(), mesh_);
    ENG_ASSIGN_OR_RETURN(ValueId lv, reshard(local_[x], gs, spec_[x], full));
    const Shape inner = local_shape(gs, full).slice(1, gs.rank());
    saved.push_back({x, local_[x], spec_[x]});
    local_[x] = local_reshape(lv, inner);
    spec_[x] = PartitionSpec(Dims(d.begin() + 1, d.end()), cur.partial());
    swapped_[x] = true;
  }
  vm_ = vm;
  Instr inner = in;
  inner.attrs.vmap = 0;
  Status st = instr(inner);
  vm_.clear();
  for (const Saved& sv : saved) {
    local_[sv.g] = sv.local;
    spec_[sv.g] = sv.spec;
    swapped_[sv.g] = false;
  }
  ENG_RETURN_IF_ERROR(st);
  for (ValueId o : in.outputs) {
    const PartitionSpec is = spec_[o];
    Dims d = is.dims();
    d.insert(d.begin(), vm);
    const PartitionSpec full(d, is.partial());
    const ValueId lv = local_reshape(local_[o], local_shape(gv(o).shape, full));
    b_.mutable_info(lv).recomputed = gv(o).recomputed;
    b_.mutable_info(lv).checkpoint_name = gv(o).checkpoint_name;
    set(o, lv, normalize(full, gv(o).shape.rank(), mesh_));
  }
  return ok_status();
}

// Row-major reshape: non-unit dims are matched in groups of equal products; a group keeps
// the sharding of its major input dim on its major output dim when that divides (the
// members' contiguous chunks are the same), else the group is gathered. A merge into one dim
// also keeps the axes of the dims after leading dims held one row per member; a split of one
// dim passes its axes, major first, to the output dims they divide.
Status Partitioner::reshape(const Instr& in) {
  const ValueId x = in.inputs[0], y = in.outputs[0];
  const Shape& xs = gv(x).shape;
  const Shape& ys = gv(y).shape;
  Dims sd = dims_only(spec_[x]).dims(), od(ys.rank());
  int i = 0, j = 0;
  auto skip_units = [](const Shape& s, int k) {
    while (k < s.rank() && s[k] == 1) ++k;
    return k;
  };
  for (int k = 0; k < xs.rank(); ++k)
    if (xs[k] == 1) sd[k].clear();
  for (;;) {
    i = skip_units(xs, i);
    j = skip_units(ys, j);
    if (i >= xs.rank() || j >= ys.rank()) break;
    const int i0 = i, j0 = j;
    int64_t px = xs[i++], py = ys[j++];
    while (px != py) {
      if (px < py) px *= xs[i++];
      else py *= ys[j++];
    }
    if (j - j0 == 1 && i - i0 > 1) {  // a merge: x's dims [i0, i) -> y's dim j0
      // The merged dim keeps the axes of the leading dims held one row per member and of the
      // first dim that is not: a member's rows stay contiguous. Dims after that lose theirs.
      bool contiguous = true;
      for (int k = i0; k < i; ++k) {
        if (!contiguous) {
          sd[k].clear();
          continue;
        }
        od[j0].insert(od[j0].end(), sd[k].begin(), sd[k].end());
        contiguous = axes_size(mesh_, sd[k]) == xs[k];
      }
      continue;
    }
    if (i - i0 == 1 && j - j0 > 1) {  // a split: x's dim i0 -> y's dims [j0, j)
      // Its axes, major first, go to the leading output dims as far as each divides: an
      // output dim held one row per member passes the rest on; the first one that is not
      // ends it, and axes left over are dropped from x (gathered).
      const Axes axes = sd[i0];
      size_t a = 0;
      for (int q = j0; q < j && a < axes.size(); ++q) {
        int64_t n = 1;
        while (a < axes.size() && ys[q] % (n * mesh_.axis_size(axes[a])) == 0) {
          n *= mesh_.axis_size(axes[a]);
          od[q].push_back(axes[a++]);
        }
        if (n != ys[q]) break;
      }
      sd[i0].resize(a);
      continue;
    }
    const int64_t n = axes_size(mesh_, sd[i0]);
    for (int k = i0 + 1; k < i; ++k) sd[k].clear();
    if (n > 1 && ys[j0] % n == 0) od[j0] = sd[i0];
    else sd[i0].clear();
  }
  ENG_ASSIGN_OR_RETURN(ValueId lx, get(x, PartitionSpec(sd)));
  const PartitionSpec out(od);
  set(y, local_reshape(lx, local_shape(ys, out)), out);
  return ok_status();
}

// Attention and its grad: the factor map for the inputs present (optional segment ids).
Status Partitioner::attention(const Instr& in) {
  const bool grad = in.kind == OpKind::kAttentionGrad;
  const bool seg = in.inputs.size() == (grad ? 7u : 4u);
  if (grad) return by_factors(in, seg ? kSegAttentionGradFactors : kAttentionGradFactors);
  return by_factors(in, seg ? kSegAttentionFactors : kAttentionFactors);
}

// MaxText's _shift_right: over a dim sharded one row per member it is a collective permute
// (fill_zero) along those axes; otherwise a local shift of the whole dim.
Status Partitioner::shift(const Instr& in) {
  const ValueId x = in.inputs[0];
  const int dim = in.attrs.dim;
  Dims d = dims_only(spec_[x]).dims();
  const Axes axes = d[dim];
  if (!axes.empty() && axes_size(mesh_, axes) == gv(x).shape[dim]) {
    ENG_ASSIGN_OR_RETURN(ValueId lx, get(x, PartitionSpec(d)));
    // one row per member: the source rows are members
    set_attributed(in, permute(lx, axes, in.attrs.shift, in.attrs.start, in.attrs.size),
                   PartitionSpec(d));
    return ok_status();
  }
  d[dim].clear();
  return simple(in, {PartitionSpec(d)}, {PartitionSpec(d)}, in.attrs);
}

// Grouped-query attention's kv-head repeat (op.h) and its transpose. Batch, length and
// head_dim follow the input; partial sums pass through (both are linear). The heads dim:
// axes sharding the kv heads carry over to the query heads when the KV head count is
// divisible by their size (device r's query-head block [r*H/n, (r+1)*H/n) reads exactly
// its kv-head block [r*Hkv/n, (r+1)*Hkv/n): a local repeat, no traffic; likewise the
// transpose's groups of R query heads never straddle devices). Otherwise (e.g. 8 kv heads
// over tensor=16) the input's heads are gathered, the op runs on every head, and the
// forward's output is sliced back onto those axes when H is divisible by them (a dynamic
// slice, no traffic); the transpose's output stays whole on the heads dim.
Status Partitioner::repeat_kv(const Instr& in) {
  const ValueId x = in.inputs[0], y = in.outputs[0];
  const bool forward = in.kind == OpKind::kRepeatKv;
  const int64_t kv_heads = forward ? shp(x)[2] : shp(y)[2];
  const PartitionSpec sx = spec_[x];
  Dims d = sx.dims();
  d.resize(std::max<size_t>(d.size(), 4));
  const Axes heads = d[2];
  const int64_t n = axes_size(mesh_, heads);
  if (heads.empty() || kv_heads % n == 0) {
    const PartitionSpec s(d, sx.partial());
    return simple(in, {s}, {s}, in.attrs);
  }
  d[2].clear();
  const PartitionSpec whole_heads(d, sx.partial());
  ENG_RETURN_IF_ERROR(simple(in, {whole_heads}, {whole_heads}, in.attrs));
  if (forward && shp(y)[2] % n == 0) {
    Dims od = d;
    od[2] = heads;
    const PartitionSpec target = norm(PartitionSpec(od, sx.partial()), rank(y));
    ENG_ASSIGN_OR_RETURN(ValueId ly, reshard(local_[y], shp(y), spec_[y], target));
    set_output(y, ly, target);
  }
  return ok_status();
}

Status Partitioner::constraint(const Instr& in) {
  const ValueId x = in.inputs[0];
  const int r = rank(x);
  LogicalAxes names = in.attrs.logical;
  names.resize(r);
  if (in.attrs.raw && explicit_) {
    // flax's nn.with_logical_constraint under Explicit axes: an assert, size-1 axes kept.
    ENG_ASSIGN_OR_RETURN(PartitionSpec raw, logical_to_mesh_axes(names, o_.rules));
    Dims user(r);
    for (int i = 0; i < r && i < raw.rank(); ++i)
      for (const auto& a : raw.dim(i))
        if (mesh_.has_axis(a)) user[i].push_back(a);
    const PartitionSpec have = spec_[x];
    if (!(PartitionSpec(user) == have))
      return invalid_argument(
          "`with_sharding_constraint` acts as an assert when all axes of mesh are of type "
          "`Explicit`. The array sharding: {} did not match the sharding provided: {}. Please use "
          "`jax.sharding.reshard` to shard your input to the sharding you want.",
          have.to_string(), PartitionSpec(user).to_string());
    set(in.outputs[0], local_[x], have);
    return ok_status();
  }
  // MaxText's maybe_shard_with_logical (and auto-mode with_sharding_constraint): a reshard.
  Result<PartitionSpec> target = logical_to_mesh(names, mesh_, o_.rules);
  if (!target.ok())
    return invalid_argument("sharding constraint {}: {}", logical_axes_string(names),
                            target.status().message());
  PartitionSpec t = norm(*target, r);
  if (!in.attrs.mesh_axes.empty()) {  // `drop` (pipeline_fsdp_ag_once): those axes gathered
    Dims d = t.dims();
    for (Axes& axes : d)
      std::erase_if(axes, [&](const std::string& a) {
        return std::find(in.attrs.mesh_axes.begin(), in.attrs.mesh_axes.end(), a) !=
               in.attrs.mesh_axes.end();
      });
    t = norm(PartitionSpec(d), r);
  }
  if (o_.skip_trivial_specs && t.is_replicated()) {
    set(in.outputs[0], local_[x], spec_[x]);
    return ok_status();
  }
  ENG_RETURN_IF_ERROR(check_divisible(shp(x), t,
                                      fmt::format("sharding constraint {}", logical_axes_string(names))));
  ENG_ASSIGN_OR_RETURN(ValueId lv, get(x, t));
  set(in.outputs[0], lv, t);
  return ok_status();
}

// Gather with the table's vocab dim sharded (docs/sharding.md): each device looks up the ids in
// its own block (offset = the block's first row; zeros elsewhere) -> partial over the vocab
// axes; the consumer reduces it (all-reduce, or reduce-scatter onto the activation's target).
// The embed dim is made whole (the rows follow the ids); vocab axes that the ids use, or a
// vmapped lookup, fall back to gathering the table.
Status Partitioner::embed_lookup(const Instr& in) {
  const ValueId table = in.inputs[0], ids = in.inputs[1];
  const Dims idd = dims_only(spec_[ids]).dims();
  Dims out = idd;
  out.push_back({});
  const Axes av = dims_only(spec_[table]).dim_or_none(0);
  if (av.empty() || !vm_.empty() || !disjoint(av, all_axes(idd, 0, static_cast<int>(idd.size()))))
    return simple(in, {PartitionSpec(), PartitionSpec(idd)}, {PartitionSpec(out)}, in.attrs);
  const int64_t block = shp(table)[0] / axes_size(mesh_, av);
  ENG_ASSIGN_OR_RETURN(ValueId lt, get(table, PartitionSpec(Dims{av, {}})));
  ENG_ASSIGN_OR_RETURN(ValueId li, get(ids, PartitionSpec(idd)));
  Axes partial = av;
  sort_mesh_order(partial, mesh_);
  emit(in, {lt, li, axis_index(av, block)}, in.attrs, {PartitionSpec(out, partial)});
  return ok_status();
}

// Cross-entropy over a sharded vocab (docs/sharding.md "Op rules"): local row max ->
// all-reduce max -> local sum of exp(x - max) and the target logit where the target falls in
// the block (partial) -> all-reduce sum -> lse = max + log(sum), xent = lse - target logit.
// The backward computes its block locally with the global lse (5-input grad, op.h).
Status Partitioner::vocab_parallel_xent(const Instr& in) {
  const auto& x = in.inputs;
  const int r = rank(x[0]);
  const Dims d = dims_only(spec_[x[0]]).dims();
  const Axes av = d[r - 1];
  const PartitionSpec l(d), rows(Dims(d.begin(), d.end() - 1));
  const int64_t block = shp(x[0])[r - 1] / axes_size(mesh_, av);
  ENG_ASSIGN_OR_RETURN(ValueId logits, get(x[0], l));
  ENG_ASSIGN_OR_RETURN(ValueId targets, get(x[1], rows));
  const ValueId offset = axis_index(av, block);
  if (in.kind == OpKind::kSoftmaxCrossEntropyGrad) {
    ENG_ASSIGN_OR_RETURN(ValueId lse, get(x[2], rows));
    ENG_ASSIGN_OR_RETURN(ValueId dxent, get(x[3], rows));
    emit(in, {logits, targets, lse, dxent, offset}, in.attrs, {l});
    return ok_status();
  }
  const ValueId mx = all_reduce(b_.emit(OpKind::kVocabMax, {logits})[0], av, true);
  const std::vector<ValueId> st = b_.emit(OpKind::kVocabStats, {logits, mx, targets, offset});
  const ValueId sumexp = all_reduce(st[0], av, false), picked = all_reduce(st[1], av, false);
  const std::vector<ValueId> o = b_.emit(OpKind::kXentFromStats, {mx, sumexp, picked});
  set_output(in.outputs[0], o[0], rows);
  set_output(in.outputs[1], o[1], rows);
  return ok_status();
}

Status Partitioner::masked_mean_loss(const Instr& in) {
  const PartitionSpec sx = dims_only(spec_[in.inputs[0]]);
  if (shards(sx, mesh_) == 1)
    return simple(in, {sx, sx}, {PartitionSpec(), PartitionSpec()}, in.attrs);
  // Sharded rows: masked sum and weights are partial; reduce both, then divide (MaxText's
  // sum(xent * mask) / (sum(mask) + 1e-8) over the GLOBAL batch).
  ENG_ASSIGN_OR_RETURN(ValueId xent, get(in.inputs[0], sx));
  ENG_ASSIGN_OR_RETURN(ValueId seg, get(in.inputs[1], sx));
  OpAttrs a = in.attrs;
  a.unnormalized = true;
  std::vector<ValueId> o = b_.emit(OpKind::kMaskedMeanLoss, {xent, seg}, a);
  const Axes partial = all_axes(sx.dims(), 0, sx.rank());
  const PartitionSpec p(Dims{}, partial);
  ENG_ASSIGN_OR_RETURN(ValueId sum, reshard(o[0], Shape{}, normalize(p, 0, mesh_), PartitionSpec()));
  ENG_ASSIGN_OR_RETURN(ValueId w, reshard(o[1], Shape{}, normalize(p, 0, mesh_), PartitionSpec()));
  ValueId loss = b_.emit(OpKind::kSafeDivide, {sum, w})[0];
  set(in.outputs[0], loss, PartitionSpec());
  set(in.outputs[1], w, PartitionSpec());
  return ok_status();
}

// ---- mixture of experts (op.h) ----------------------------------------------------------------
namespace {
Axes minus(const Axes& a, const Axes& used) {
  Axes out;
  for (const std::string& x : a)
    if (std::find(used.begin(), used.end(), x) == used.end()) out.push_back(x);
  return out;
}
Axes joined(Axes a, const Axes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
}  // namespace

// Routing is per row b: the sequence and expert dims whole, rows where the logits have them;
// the load-balance loss and the load are sums over the rows (partial over their axes).
Status Partitioner::moe_route(const Instr& in) {
  const Axes b = dims_only(spec_[in.inputs[0]]).dim_or_none(0);
  const PartitionSpec rows(Dims{b, {}, {}}), rows4(Dims{b, {}, {}, {}});
  if (in.kind == OpKind::kMoeRouteGrad) return simple(in, {rows, rows4}, {rows}, in.attrs);
  return simple(in, {rows}, {rows4, PartitionSpec(Dims{}, b), PartitionSpec(Dims{{}, {}}, b)},
                in.attrs);
}

// dispatch (combine, x (B,S,M)) -> (E,B,C,M) and combine (combine, y (E,B,C,M)) -> (B,S,M):
// rows b as the combine weights have them (the expert dim of the expert-major side whole: its
// `expert` axis moves to the rows, an all-to-all), the model dim M where x / y has it.
Status Partitioner::moe_dispatch(const Instr& in) {
  const bool forward = in.kind == OpKind::kMoeDispatch;
  const Axes b = dims_only(spec_[in.inputs[0]]).dim_or_none(0);
  const PartitionSpec sx = dims_only(spec_[in.inputs[1]]);
  const Axes m = minus(sx.dim_or_none(forward ? 2 : 3), b);
  const PartitionSpec comb(Dims{b, {}, {}, {}}), tokens(Dims{b, {}, m}), experts(Dims{{}, b, {}, m});
  return forward ? simple(in, {comb, tokens}, {experts}, in.attrs)
                 : simple(in, {comb, experts}, {tokens}, in.attrs);
}

// (dout (B,S,M), y (E,B,C,M)) -> (B,S,E,C): rows b as dout's; M contracted (partial over its
// axes).
Status Partitioner::moe_combine_weights_grad(const Instr& in) {
  const PartitionSpec sd = dims_only(spec_[in.inputs[0]]);
  const Axes b = sd.dim_or_none(0), m = minus(sd.dim_or_none(2), b);
  return simple(in, {PartitionSpec(Dims{b, {}, m}), PartitionSpec(Dims{{}, b, {}, m})},
                {PartitionSpec(Dims{b, {}, {}, {}}, m)}, in.attrs);
}

// expert_matmul (a (G,...,K), w (G,K,N)): experts g where a has them (else w), a's row dims
// keep their other axes, K whole (the weight gathered over its fsdp axes, as FSDP), N where w
// has it. expert_matmul_grad (a, dy) -> (G,K,N): a sum over the rows, partial over their axes.
Status Partitioner::expert_matmul(const Instr& in) {
  const PartitionSpec sa = dims_only(spec_[in.inputs[0]]), sw = dims_only(spec_[in.inputs[1]]);
  const int r = rank(in.inputs[0]);
  Axes g = sa.dim_or_none(0);
  if (g.empty()) g = sw.dim_or_none(0);
  Dims da(r), dw(rank(in.inputs[1]));
  da[0] = g;
  dw[0] = g;
  Axes used = g;
  for (int i = 1; i < r - 1; ++i) {
    da[i] = minus(sa.dim_or_none(i), used);
    used = joined(used, da[i]);
  }
  const Axes rows = minus(used, g);
  if (in.kind == OpKind::kExpertMatmulGrad) {
    for (int i = 1; i < r - 1; ++i) dw[i] = da[i];
    da[r - 1] = minus(sa.dim_or_none(r - 1), used);
    dw[r - 1] = minus(sw.dim_or_none(r - 1), joined(used, da[r - 1]));
    return simple(in, {PartitionSpec(da), PartitionSpec(dw)},
                  {PartitionSpec(Dims{g, da[r - 1], dw[r - 1]}, rows)}, in.attrs);
  }
  const int n_dim = in.attrs.trans_b ? 1 : 2;
  dw[n_dim] = minus(sw.dim_or_none(n_dim), used);
  Dims out(da.begin(), da.end() - 1);
  out.push_back(dw[n_dim]);
  return simple(in, {PartitionSpec(da), PartitionSpec(dw)}, {PartitionSpec(out)}, in.attrs);
}

Status Partitioner::matmul(const Instr& in) {
  const ValueId ga = in.inputs[0], gb = in.inputs[1];
  const Shape A = shp(ga);
  const Shape B = shp(gb);
  const MatmulDims m = matmul_dims(in.attrs, A, B);
  Dims da = spec_[ga].dims(), db = spec_[gb].dims();

  std::optional<PartitionSpec> want;
  ENG_RETURN_IF_ERROR(wanted_out(in, m.out_rank(), want));
  bool paired = m.a_con.size() == m.b_con.size();
  for (size_t k = 0; paired && k < m.a_con.size(); ++k) paired = A[m.a_con[k]] == B[m.b_con[k]];
  if (!want) ENG_RETURN_IF_ERROR(check_matmul_ambiguity(m, da, db));
  agree_contracting(m, paired, da, db);
  const double bytes_a = static_cast<double>(gv(ga).bytes());
  const double bytes_b = static_cast<double>(gv(gb).bytes());
  gather_shared_free_axes(m, bytes_a >= bytes_b, want, da, db);  // auto: gather the cheaper
  return emit_matmul(in, m, da, db, want);
}

// The wanted result sharding (matmul, pad), if the program says: out_sharding (an error if
// its logical names do not resolve), else autodiff's out_like when that value is already
// placed.
Status Partitioner::wanted_out(const Instr& in, int out_rank, std::optional<PartitionSpec>& want) {
  const OpAttrs& at = in.attrs;
  if (!at.out_logical.empty()) {
    LogicalAxes names = at.out_logical;
    names.resize(out_rank);
    Result<PartitionSpec> w = logical_to_mesh(names, mesh_, o_.rules);
    if (!w.ok())
      return invalid_argument("{} out_sharding: {}", op_name(in.kind), w.status().message());
    want = norm(*w, out_rank);
  } else if (at.out_like >= 0 && local_[at.out_like] != kNoValue) {
    // out_like is not an operand: under vmap its tracked spec still has the leading dim.
    PartitionSpec like = dims_only(spec_[at.out_like]);
    if (!vm_.empty() && !swapped_[at.out_like]) {
      Dims d = like.dims();
      if (!d.empty()) d.erase(d.begin());
      like = PartitionSpec(d);
    }
    if (like.rank() == out_rank) want = like;
  }
  return ok_status();
}

// Explicit mode, no wanted sharding: an ambiguous output is JAX's error.
Status Partitioner::check_matmul_ambiguity(const MatmulDims& m, const Dims& da, const Dims& db) {
  if (!explicit_ || !matmul_ambiguous(m, da, db)) return ok_status();
  Dims lc, rc;
  for (int i : m.a_con) lc.push_back(da[i]);
  for (int i : m.b_con) rc.push_back(db[i]);
  return invalid_argument(
      "Contracting dimensions are sharded and it is ambiguous how the output should be "
      "sharded. Please specify the output sharding via the `out_sharding` parameter. Got "
      "lhs_contracting_spec={} and rhs_contracting_spec={}",
      spec_string(lc), spec_string(rc));
}

// Contracting pairs: agree on one side's axes (that side must not use them elsewhere on
// the other operand); the more-sharded valid choice wins; neither valid -> whole. Unpaired
// contracting dims (the flattened dims differ) are all gathered.
void Partitioner::agree_contracting(const MatmulDims& m, bool paired, Dims& da, Dims& db) const {
  if (!paired) {
    for (int i : m.a_con) da[i].clear();
    for (int i : m.b_con) db[i].clear();
    return;
  }
  for (size_t k = 0; k < m.a_con.size(); ++k) {
    Axes& xa = da[m.a_con[k]];
    Axes& xb = db[m.b_con[k]];
    if (xa == xb) continue;
    const bool va = !used_elsewhere(xa, db, m.b_con[k]), vb = !used_elsewhere(xb, da, m.a_con[k]);
    Axes t;
    if (va && vb) t = axes_size(mesh_, xa) >= axes_size(mesh_, xb) ? xa : xb;
    else if (va) t = xa;
    else if (vb) t = xb;
    xa = t;
    xb = t;
  }
}

// The local matmul on operands resharded to da, db: free dims keep their axes, contracting
// axes make the result a partial sum over them. With out_sharding the result IS in that
// sharding (resharded to it).
Status Partitioner::emit_matmul(const Instr& in, const MatmulDims& m, const Dims& da,
                                const Dims& db, const std::optional<PartitionSpec>& want) {
  ENG_ASSIGN_OR_RETURN(ValueId la, get(in.inputs[0], PartitionSpec(da)));
  ENG_ASSIGN_OR_RETURN(ValueId lb, get(in.inputs[1], PartitionSpec(db)));
  Dims out;
  for (int i : m.a_free) out.push_back(da[i]);
  for (int i : m.b_free) out.push_back(db[i]);
  Axes partial;
  for (int i : m.a_con) partial.insert(partial.end(), da[i].begin(), da[i].end());
  sort_mesh_order(partial, mesh_);
  emit(in, {la, lb}, in.attrs, {PartitionSpec(out, partial)});
  if (!in.attrs.out_logical.empty()) {
    ENG_RETURN_IF_ERROR(check_divisible(shp(in.outputs[0]), *want, "matmul out_sharding"));
    ENG_ASSIGN_OR_RETURN(ValueId lv, get(in.outputs[0], *want));
    set(in.outputs[0], lv, *want);
  }
  return ok_status();
}

}  // namespace

Result<Partitioned> partition(const Program& global, const Mesh& mesh, const SpmdOptions& options) {
  Partitioner p(global, mesh, options);
  return p.run();
}

}  // namespace eng
