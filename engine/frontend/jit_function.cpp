// engine/frontend/jit_function.cpp: a transformed function's cache, miss explanation, trace
// inputs, grad and vmap rewriting, compile with donation and run (jit_function.h).
#include "engine/frontend/jit_function.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "engine/frontend/numpy.h"
#include "engine/frontend/vma.h"
#include "engine/ir/autodiff.h"
#include "engine/sharding/shard_geometry.h"

namespace eng::frontend {

// ---- pytrees ----------------------------------------------------------------------------------

std::string TreeKey::to_string() const {
  return is_int ? fmt::format("[{}]", i) : fmt::format(".{}", s);
}

int Tree::num_leaves() const {
  if (leaf) return 1;
  int n = 0;
  for (const auto& [k, t] : kids) n += t.num_leaves();
  return n;
}

void leaf_paths(const Tree& tree, const std::string& prefix, std::vector<std::string>* out) {
  if (tree.leaf) {
    out->push_back(prefix);
    return;
  }
  for (const auto& [k, kid] : tree.kids) leaf_paths(kid, prefix + k.to_string(), out);
}

std::string tree_type(const Tree& tree, const std::vector<std::string>& leaf_types, int* next) {
  if (tree.leaf) return leaf_types[static_cast<size_t>((*next)++)];
  std::string out = "{";
  for (size_t i = 0; i < tree.kids.size(); ++i) {
    const auto& [k, kid] = tree.kids[i];
    if (i) out += ", ";
    if (!k.is_int) out += k.s + "=";
    out += tree_type(kid, leaf_types, next);
  }
  return out + "}";
}

namespace {

Status prefix_specs_at(const SpecTree& prefix, const Tree& tree, const std::string& what,
                       std::vector<PartitionSpec>* out) {
  if (prefix.spec) {
    for (int k = 0; k < tree.num_leaves(); ++k) out->push_back(*prefix.spec);
    return ok_status();
  }
  if (tree.leaf)
    return invalid_argument("{}: in_specs has a table of specs where the argument has an Array",
                            what);
  if (prefix.kids.size() != tree.kids.size())
    return invalid_argument(
        "{}: in_specs is not a tree prefix of the argument: {} specs for {} entries", what,
        prefix.kids.size(), tree.kids.size());
  for (size_t i = 0; i < tree.kids.size(); ++i) {
    if (!(prefix.keys[i] == tree.kids[i].first))
      return invalid_argument("{}: in_specs has key {} where the argument has {}", what,
                              prefix.keys[i].to_string(), tree.kids[i].first.to_string());
    ENG_RETURN_IF_ERROR(prefix_specs_at(prefix.kids[i], tree.kids[i].second,
                                        what + tree.kids[i].first.to_string(), out));
  }
  return ok_status();
}

}  // namespace

Result<std::vector<PartitionSpec>> prefix_specs(const SpecTree& prefix, const Tree& tree,
                                                const std::string& what) {
  std::vector<PartitionSpec> out;
  ENG_RETURN_IF_ERROR(prefix_specs_at(prefix, tree, what, &out));
  return out;
}

// ---- the cache --------------------------------------------------------------------------------

CacheKey JitFunction::cache_key(const CallArgs& args) const {
  Signature sig;
  for (size_t i = 0; i < args.types.size(); ++i) {
    ArgType a;
    a.name = fmt::format("args[{}]", i);
    a.type_text = args.types[i];
    sig.args.push_back(std::move(a));
  }
  const std::string options =
      args.donated.empty() ? "" : fmt::format("donate_argnums={}\n", fmt::join(args.donated, ","));
  return CacheKey{opts_.name, "", args.mesh, options, std::move(sig)};
}

Result<JitLookup> JitFunction::lookup(const CallArgs& args,
                                      const std::function<std::vector<std::string>()>& param_names,
                                      const std::function<Result<JitEntry>()>& trace_and_compile) {
  JitLookup out;
  out.event.key = cache_key(args);
  const std::string hex = out.event.key.hex();
  ++lookups_;
  if (auto it = cache_.find(hex); it != cache_.end() && it->second.key == out.event.key) {
    Slot& slot = it->second;
    slot.used = lookups_;
    out.write = hit_logged_.insert(hex).second;
    out.event.records.push_back({"hit", "tracing", "", "", {}, {}, true});
    out.event.tracing_hit = true;
    out.event.exe = slot.entry.compiled->executable();
    out.entry = &slot.entry;
    return out;
  }
  ENG_ASSIGN_OR_RETURN(JitEntry e, trace_and_compile());
  // Explained with each argument named by its parameter too: "args[0] (x)".
  CacheKey named = out.event.key;
  const std::vector<std::string> names = param_names();
  for (size_t i = 0; i < named.signature.args.size() && i < names.size(); ++i)
    named.signature.args[i].name = fmt::format("args[{}] ({})", i, names[i]);
  const MissExplanation why = explain_miss(named, seen_, opts_.name);
  last_miss_ = why.text;
  const CompileInfo& info = e.compiled->info();
  out.write = true;
  out.event.records.push_back(
      {"miss",
       "tracing",
       why.kind,
       why.text,
       info.compile_s > 0 ? std::optional<double>(info.compile_s) : std::nullopt,
       {},
       true});
  out.event.analysis_record = 0;
  out.event.compiled = info.outcome == "miss";  // else the process's executable cache had it
  out.event.exe = e.compiled->executable();
  seen_.push_back(std::move(named));
  if (cache_.size() >= kCapacity) {  // the least recently used signature goes
    auto lru = cache_.begin();
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
      if (it->second.used < lru->second.used) lru = it;
    hit_logged_.erase(lru->first);
    cache_.erase(lru);
  }
  Slot& slot = cache_[hex];
  slot = Slot{out.event.key, std::move(e), lookups_};
  hit_logged_.erase(hex);
  out.entry = &slot.entry;
  return out;
}

// ---- tracing ----------------------------------------------------------------------------------

const char* JitFunction::mode_fn() const {
  return opts_.mode == ShardMode::kAuto ? "auto_axes" : "explicit_axes";
}

Result<std::vector<AxisType>> JitFunction::switched_types(
    const Mesh& mesh, const std::vector<AxisType>& in_scope) const {
  const AxisType to = *opts_.mode == ShardMode::kExplicit ? AxisType::kExplicit : AxisType::kAuto;
  for (const std::string& a : opts_.mode_axes)
    if (!mesh.has_axis(a))
      return invalid_argument("{}: {}: axes names '{}', which is not an axis of {}", opts_.name,
                              mode_fn(), a, mesh.to_string());
  std::vector<AxisType> types = in_scope;
  types.resize(mesh.axis_names().size(), AxisType::kAuto);
  for (int i = 0; i < mesh.num_axes(); ++i) {
    const std::string& a = mesh.axis_names()[i];
    if (!opts_.mode_axes.empty() &&
        std::find(opts_.mode_axes.begin(), opts_.mode_axes.end(), a) == opts_.mode_axes.end())
      continue;
    if (types[i] == AxisType::kManual)
      return invalid_argument(
          "{}: {}: Going from `Manual` AxisType to `Auto` or `Explicit` AxisType is not "
          "allowed (axis '{}' is Manual here: inside sl.shard_map)",
          opts_.name, mode_fn(), a);
    types[i] = to;
  }
  return types;
}

Result<bool> JitFunction::begin_switch(Trace& tr) const {
  if (tr.manual())
    return invalid_argument(
        "{}: {}: Going from `Manual` AxisType to `Auto` or `Explicit` AxisType is not allowed "
        "(inside sl.shard_map)",
        opts_.name, mode_fn());
  ENG_ASSIGN_OR_RETURN(std::vector<AxisType> types, switched_types(tr.mesh(), tr.axis_types()));
  const bool unchanged = types == tr.axis_types();
  tr.begin_axis_types(std::move(types));
  return !(unchanged && *opts_.mode == ShardMode::kAuto);
}

Result<ValueId> JitFunction::switch_reshard(Trace& tr, ValueId v, const PartitionSpec& spec) const {
  return with_context(opts_.name, np::sharding_constraint(tr, v, spec, false));
}

Result<std::shared_ptr<Trace>> JitFunction::new_trace(const Mesh& args_mesh, int depth) const {
  if (depth >= kMaxTraceDepth)
    return invalid_argument("{}: jit traced {} levels deep: recursion through jit", opts_.name,
                            kMaxTraceDepth);
  Mesh mesh = args_mesh;
  if (opts_.mode) {
    // Called on concrete arrays, auto_axes / explicit_axes trace their own program on a copy
    // of the mesh with their axes switched (results go back to the caller's mesh).
    ENG_ASSIGN_OR_RETURN(std::vector<AxisType> types,
                         switched_types(args_mesh, args_mesh.axis_types()));
    mesh = args_mesh.with_axis_types(std::move(types));
  }
  return std::make_shared<Trace>(opts_.name, mesh, opts_.manual);
}

Result<TracedArgs> JitFunction::trace_inputs(Trace& tr, const CallArgs& args,
                                             const std::vector<std::string>& leaf_names) const {
  const int n = static_cast<int>(args.trees.size());
  TracedArgs t{args.trees, args.first_leaf, {}};
  for (size_t k = 0; k < args.leaves.size(); ++k) {
    const Value& a = args.leaves[k];
    PartitionSpec spec = a.is_tracer() ? PartitionSpec() : a.data->array.sharding.spec;
    if (args.leaf_in_specs[k]) spec = *args.leaf_in_specs[k];
    if (opts_.manual && !args.leaf_in_specs[k]) {
      int pos = 0;  // the argument this leaf belongs to
      while (pos + 1 < n && args.first_leaf[pos + 1] <= static_cast<int>(k)) ++pos;
      return invalid_argument("shard_map: in_specs has no spec for argument {} ({})", pos + 1,
                              leaf_names[k]);
    }
    ENG_RETURN_IF_ERROR(np::check_spec(
        tr, spec, a.shape,
        fmt::format("{}: {}[{}]", opts_.name, opts_.manual ? "in_specs" : "in_shardings", k + 1)));
    // shard_map's body sees each device's block.
    const Shape shape = opts_.manual ? local_shape(args.mesh, spec, a.shape) : a.shape;
    t.leaf_values.push_back(tr.input(leaf_names[k], shape, a.dtype, spec));
  }
  return t;
}

// ---- grad ---------------------------------------------------------------------------------------

Result<std::vector<ValueId>> gradients(std::string_view what, Trace& tr, ValueId loss,
                                       const std::vector<ValueId>& wrt) {
  for (const Instr& in : tr.builder().program().instrs()) {
    if (!has_vjp(in.kind))
      return invalid_argument("{}: the program uses {}, which has no VJP rule in the engine", what,
                              op_name(in.kind));
    if (in.kind == OpKind::kAllReduce && in.attrs.reduce_max)
      return invalid_argument("{}: the program uses pmax, which has no VJP rule", what);
  }
  // The engine's autodiff seeds d(loss)/d(loss) = 1 as a constant that only the loss op of a
  // train step consumes (masked_mean_loss; there is no constant op), so the seed enters there:
  // loss' = masked_mean_loss(loss as (1, 1), segmentation ones) = loss / (1 + 1e-8), whose
  // VJP hands `loss` the cotangent 1 / (1 + 1e-8): exactly 1.0f, since 1 + 1e-8 rounds to 1 in
  // float32 (tests/frontend/xf_test.lua checks d sum(x) / dx == 1 bitwise). loss' is not
  // returned, so the value is unchanged.
  Builder& b = tr.builder();
  ENG_ASSIGN_OR_RETURN(ValueId seg, tr.constant({1.0}, Shape{1, 1}, DType::kI32));
  const ValueId seeded = b.masked_mean_loss(b.reshape(loss, Shape{1, 1}), seg).first;
  tr.remat().forward_end = static_cast<int>(b.program().instrs().size());  // jax.remat's
  // Inside shard_map, cotangents follow the varying manual axes (vma.h).
  std::vector<ValueId> grads =
      append_gradients(b, seeded, wrt, tr.manual() ? vma_cotangent_hook(tr) : CotangentHook{});
  std::vector<ValueId> out;
  for (size_t k = 0; k < grads.size(); ++k) {
    if (grads[k] != kNoValue) {
      // Cotangent types follow primal types ("Autodiff and sharding"): a gradient is resharded
      // to its input's sharding when the backward pass left it elsewhere.
      ValueId g = grads[k];
      // (inside shard_map, values are per-device blocks: nothing to reshard)
      if (const std::optional<PartitionSpec> spec = tr.info(wrt[k]).spec; spec && !tr.manual()) {
        ENG_ASSIGN_OR_RETURN(PartitionSpec now, tr.sharding_of(g));
        if (!(remove_size_one_mesh_axis(now, tr.mesh()) ==
              remove_size_one_mesh_axis(*spec, tr.mesh()))) {
          ENG_ASSIGN_OR_RETURN(g, np::sharding_constraint(tr, g, *spec, false));
        }
      }
      out.push_back(g);
      continue;
    }
    // The loss does not depend on this input: its gradient is zeros (as JAX's).
    const ValueInfo& w = tr.info(wrt[k]);
    const Shape shape = w.shape;
    const std::optional<PartitionSpec> spec = w.spec;  // w dangles after the next emit
    ENG_ASSIGN_OR_RETURN(ValueId z, np::broadcast_to(tr, tr.scalar(0.0, w.dtype), shape));
    if (spec && !tr.manual()) {  // zeros typed like the input, as a computed gradient is
      ENG_ASSIGN_OR_RETURN(z, np::sharding_constraint(tr, z, *spec, false));
    }
    out.push_back(z);
  }
  return out;
}

Result<Outputs> JitFunction::grad_outputs(Trace& tr, const Outputs& f_out,
                                          const TracedArgs& args) const {
  const std::string_view what = opts_.transform == Transform::kGrad ? "grad" : "value_and_grad";
  const bool has_aux = opts_.has_aux;
  const size_t want = has_aux ? 2 : 1;
  if (f_out.tree.size() != want || !f_out.tree[0].leaf)
    return has_aux ? invalid_argument(
                         "{}: with has_aux the function must return two values (the scalar "
                         "loss, then aux), it returned {} values",
                         what, f_out.tree.size())
                   : invalid_argument(
                         "{}: the function must return one scalar (the loss), it returned {} "
                         "values",
                         what, f_out.values.size());
  const ValueId loss = f_out.values[0];
  const ValueInfo& li = tr.info(loss);
  if (li.shape.rank() != 0)
    return invalid_argument(
        "{}: Gradient only defined for scalar-output functions. Output had shape: {}", what,
        li.shape.to_string());
  if (li.dtype != DType::kF32)
    return invalid_argument("{}: the loss must be float32, got {}", what, li.type_string());
  std::vector<ValueId> wrt;
  for (int a : opts_.argnums) {
    const int n = static_cast<int>(args.trees.size());
    const int p = a < 0 ? a + n : a;
    if (p < 0 || p >= n || !args.trees[p])
      return invalid_argument(
          "{}: argnums {} is not an Array argument (the function got {} arguments)", what, a, n);
    for (int k = 0; k < args.trees[p]->num_leaves(); ++k) {
      const ValueId v = args.leaf_values[args.first_leaf[p] + k];
      if (v == kNoValue)
        return invalid_argument("{}: argnums {} is not an Array argument of this trace", what, a);
      if (tr.info(v).dtype == DType::kI32)
        return invalid_argument("{}: argument {} is int32; only float arrays have gradients", what,
                                a);
      wrt.push_back(v);
    }
  }
  ENG_ASSIGN_OR_RETURN(std::vector<ValueId> grads, gradients(what, tr, loss, wrt));
  Outputs out;
  const std::vector<ValueId> aux(f_out.values.begin() + 1, f_out.values.end());
  auto add_aux = [&] {
    if (!has_aux) return;
    out.values.insert(out.values.end(), aux.begin(), aux.end());
    out.tree.push_back(f_out.tree[1]);
  };
  if (opts_.transform == Transform::kValueAndGrad) {
    out.values.push_back(loss);
    out.tree.push_back(Tree{});
    add_aux();
  }
  size_t g = 0;
  for (int a : opts_.argnums) {
    const int n = static_cast<int>(args.trees.size());
    const Tree& t = *args.trees[a < 0 ? a + n : a];
    for (int k = 0; k < t.num_leaves(); ++k) out.values.push_back(grads[g++]);
    out.tree.push_back(t);
  }
  if (opts_.transform == Transform::kGrad) add_aux();
  return out;
}

// ---- vmap ---------------------------------------------------------------------------------------

namespace {

// JAX's error for mapped axes of different sizes, naming each argument's axis and type.
Result<int64_t> batch_size(const std::string& name, const Trace& tr, const TracedArgs& targs,
                           const std::vector<bool>& mapped) {
  int64_t size = -1;
  std::string sizes;
  bool differ = false;
  for (size_t p = 0; p < targs.trees.size(); ++p) {
    if (!targs.trees[p] || !mapped[p]) continue;
    for (int k = 0; k < targs.trees[p]->num_leaves(); ++k) {
      const ValueInfo& v = tr.info(targs.leaf_values[targs.first_leaf[p] + k]);
      if (v.shape.rank() == 0)
        return invalid_argument(
            "{}: vmap was requested to map its argument along axis 0, which implies that its "
            "rank should be at least 1, but is only 0 (its shape is ()): argument {}",
            name, p + 1);
      differ = differ || (size >= 0 && v.shape[0] != size);
      size = v.shape[0];
      sizes += fmt::format("\n  * one axis had size {}: axis 0 of argument {} of type {}",
                           v.shape[0], p + 1, v.type_string());
    }
  }
  if (size < 0)
    return invalid_argument("{}: vmap must have at least one non-None value in in_axes", name);
  if (differ)
    return invalid_argument("{}: vmap got inconsistent sizes for array axes to be mapped:{}", name,
                            sizes);
  return size;
}

}  // namespace

Result<VmapPlan> JitFunction::vmap_plan(const std::shared_ptr<Trace>& tr,
                                        const TracedArgs& targs) const {
  const int n = static_cast<int>(targs.trees.size());
  const std::string& name = opts_.name;
  std::vector<bool> mapped(static_cast<size_t>(n), false);
  for (int p = 0; p < n; ++p) {
    const std::optional<int> ax =
        p < static_cast<int>(opts_.in_axes.size()) ? opts_.in_axes[p] : std::optional<int>(0);
    if (!targs.trees[p] || !ax) continue;
    if (*ax != 0)
      return invalid_argument(
          "{}: vmap in_axes {} for argument {}: only 0 (or nil) is supported, since moving a "
          "batch axis to the front needs a transpose the op set lacks",
          name, *ax, p + 1);
    for (int k = 0; k < targs.trees[p]->num_leaves(); ++k)
      if (targs.leaf_values[targs.first_leaf[p] + k] == kNoValue)
        return invalid_argument("{}: vmap: argument {} is a tracer of another jit", name, p + 1);
    mapped[p] = true;
  }
  VmapPlan plan;
  ENG_ASSIGN_OR_RETURN(plan.batch, batch_size(name, *tr, targs, mapped));
  plan.one = std::make_shared<Trace>(name, tr->mesh(), tr->manual());
  plan.inner = TracedArgs{targs.trees, targs.first_leaf, {}};
  for (int p = 0; p < n; ++p) {
    if (!targs.trees[p]) continue;
    for (int k = 0; k < targs.trees[p]->num_leaves(); ++k) {
      const ValueId v = targs.leaf_values[targs.first_leaf[p] + k];
      const ValueInfo info = tr->info(v);
      ENG_ASSIGN_OR_RETURN(PartitionSpec spec, tr->sharding_of(v));
      std::vector<int64_t> dims = info.shape.dims();
      if (mapped[p]) {  // one example: the batch dim (and its sharding) dropped
        dims.erase(dims.begin());
        std::vector<PartitionSpec::DimAxes> d;
        for (int i = 1; i < spec.rank(); ++i) d.push_back(spec.dim(i));
        spec = PartitionSpec(std::move(d));
      }
      plan.inner.leaf_values.push_back(
          plan.one->input(fmt::format("arg{}", p), Shape(std::move(dims)), info.dtype, spec));
      plan.inputs.push_back({v, mapped[p]});
    }
  }
  return plan;
}

// ---- compile and run ----------------------------------------------------------------------------

Result<JitEntry> JitFunction::compile(Trace& tr, Outputs outs, const TracedArgs& targs,
                                      const CallArgs& args) const {
  CompileRequest req{opts_.name, opts_.out_specs, {}};
  const bool grad =
      opts_.transform == Transform::kGrad || opts_.transform == Transform::kValueAndGrad;
  if (opts_.manual) {  // check_vma: out_specs name every axis a result varies over
    ENG_RETURN_IF_ERROR(check_out_vma(tr, opts_.name, outs.values, opts_.out_specs));
    if (opts_.out_specs.empty() && !outs.values.empty())
      return invalid_argument(
          "{}: out_specs is None (not given), but the function returned {} values: out_specs "
          "says how each result's blocks form it",
          opts_.name, outs.values.size());
  }
  if (grad) {
    ENG_ASSIGN_OR_RETURN(outs, grad_outputs(tr, outs, targs));
    if (opts_.manual) req.out_specs = grad_out_specs(args);
  }
  for (int p : args.donated)
    for (int k = 0; k < args.trees[p]->num_leaves(); ++k)
      req.donate.push_back(args.first_leaf[p] + k);
  Result<std::shared_ptr<Compiled>> c = Compiled::create(tr, outs.values, req);
  if (!c.ok() && !req.donate.empty()) {
    // Donation is an optimization: a program the in-place rule refuses runs without it.
    req.donate.clear();
    c = Compiled::create(tr, outs.values, req);
  }
  if (!c.ok()) return c.status();
  return JitEntry{std::move(*c), std::move(outs.tree)};
}

// grad of a shard_map'd function: its results as grad_outputs orders them, each gradient
// assembled from its blocks as its argument was split (the argument's in_spec).
std::vector<std::optional<PartitionSpec>> JitFunction::grad_out_specs(const CallArgs& args) const {
  std::vector<std::optional<PartitionSpec>> grads, aux;
  for (size_t i = 1; i < opts_.out_specs.size() && opts_.has_aux; ++i)
    aux.push_back(opts_.out_specs[i]);
  const int n = static_cast<int>(args.trees.size());
  for (int a : opts_.argnums) {
    const int p = a < 0 ? a + n : a;
    if (p < 0 || p >= n || !args.trees[p]) continue;
    for (int k = 0; k < args.trees[p]->num_leaves(); ++k)
      grads.push_back(args.leaf_in_specs[static_cast<size_t>(args.first_leaf[p] + k)]);
  }
  std::vector<std::optional<PartitionSpec>> out;
  if (opts_.transform == Transform::kValueAndGrad) {
    out.push_back(opts_.out_specs.empty() ? std::nullopt : opts_.out_specs[0]);
    out.insert(out.end(), aux.begin(), aux.end());
  }
  out.insert(out.end(), grads.begin(), grads.end());
  if (opts_.transform == Transform::kGrad) out.insert(out.end(), aux.begin(), aux.end());
  return out;
}

Result<ArrayRef> transfer(const ArrayRef& a, const NamedSharding& to) {
  if (a->array.sharding == to) return a;
  ENG_ASSIGN_OR_RETURN(std::vector<double> host, fetch(*a));
  return device_put(host, a->array.shape, a->array.dtype, to);
}

Result<std::vector<ArrayRef>> JitFunction::run(const Compiled& c, const CallArgs& args,
                                               std::vector<ArrayRef>* consumed) const {
  std::set<int> donors;
  for (int d : c.donors())
    if (d >= 0) donors.insert(d);
  std::vector<ArrayRef> ins;
  for (size_t k = 0; k < args.leaves.size(); ++k) {
    ArrayRef r = args.leaves[k].data;
    const NamedSharding& want = c.in_shardings()[k];
    if (!(r->array.sharding.mesh == want.mesh)) {
      ENG_ASSIGN_OR_RETURN(r, transfer(r, want));  // auto_axes / explicit_axes
    } else if (!(remove_size_one_mesh_axis(r->array.sharding.spec, want.mesh) ==
                 remove_size_one_mesh_axis(want.spec, want.mesh))) {
      ENG_ASSIGN_OR_RETURN(r, reshard_on_host(*r, want));  // in_shardings: placed as asked
    } else if (donors.count(static_cast<int>(k))) {
      int same = 0;
      for (const Value& l : args.leaves) same += l.data == r;
      // Holders: its caller's Value, the leaf copies in args, and r.
      if (same > 1 || r.use_count() > 2 + same) {
        ENG_ASSIGN_OR_RETURN(r, reshard_on_host(*r, want));
      } else {
        consumed->push_back(r);
      }
    }
    ins.push_back(std::move(r));
  }
  ENG_ASSIGN_OR_RETURN(std::vector<ArrayRef> outs, with_context(opts_.name, c.run(ins)));
  for (size_t i = 0; i < outs.size() && i < c.out_views().size(); ++i)
    if (c.out_views()[i]) {  // made under use_abstract_mesh: onto that mesh's devices, as laid out
      ENG_ASSIGN_OR_RETURN(outs[i], transfer(outs[i], *c.out_views()[i]));
    }
  return outs;
}

}  // namespace eng::frontend
