// shell/lua_jit.cpp: calling a transformed function from Lua (sl.jit, sl.grad,
// sl.value_and_grad, sl.vmap, sl.auto_axes / sl.explicit_axes, sl.shard_map; docs/frontend.md):
// reading the call's arguments off the Lua stack, calling the Lua function on tracers, and
// pushing the results. The runtime (cache, miss explanation, grad, vmap, donation) is
// engine/frontend/jit_function.h's; the compilations rows engine/train/run_recorder.h's.
// f:lower(...) shows the traced program and :compile() gives the Compiled object.
#include "shell/lua_jit.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/frontend/numpy.h"
#include "engine/sharding/shard_geometry.h"
#include "engine/train/run_recorder.h"
#include "shell/context.h"
#include "shell/lua_array.h"
#include "shell/lua_jit_tree.h"
#include "shell/lua_types.h"

namespace shell {

namespace {

using fe::CallArgs;
using fe::JitEntry;
using fe::Outputs;
using fe::TracedArgs;

// The function's parameter names (debug info), for the program's argument legend.
std::vector<std::string> param_names(lua_State* L, int fidx, int n) {
  std::vector<std::string> names;
  for (int i = 1; i <= n; ++i) {
    lua_pushvalue(L, fidx);
    const char* p = lua_getlocal(L, nullptr, i);  // pops the function
    names.push_back(p ? p : fmt::format("arg{}", i - 1));
  }
  return names;
}

// The number of parameters the Lua function at fidx declares, or -1 (vararg, or a Jitted).
int declared_params(lua_State* L, int fidx) {
  if (lua_type(L, fidx) != LUA_TFUNCTION) return -1;
  lua_Debug ar;
  lua_pushvalue(L, fidx);
  if (!lua_getinfo(L, ">u", &ar) || ar.isvararg) return -1;
  return ar.nparams;
}

// The positions `nums` name among n arguments, checked. A negative one counts from the end
// of the function's declared parameters (JAX counts from its signature), else of the call's.
Result<std::set<int>> resolve_argnums(const std::set<int>& nums, int n, int nparams,
                                      std::string_view fn, std::string_view what) {
  std::set<int> out;
  for (int k : nums) {
    const int p = k < 0 ? k + (nparams >= 0 ? nparams : n) : k;
    if (p < 0 || p >= n)
      return eng::invalid_argument(
          "{}: jitted function has {}=({}{}) but was called with only {} positional argument{}", fn,
          what, fmt::join(nums, ", "), nums.size() == 1 ? "," : "", n, n == 1 ? "" : "s");
    out.insert(p);
  }
  return out;
}

// A static argument (static_argnums, or any number, string, boolean or nil): its value is
// part of the signature.
Result<std::string> static_entry(lua_State* L, int idx, int pos, bool declared,
                                 std::string_view fn) {
  const int t = lua_type(L, idx);
  if (t != LUA_TNUMBER && t != LUA_TSTRING && t != LUA_TBOOLEAN && t != LUA_TNIL) {
    if (declared)
      return eng::invalid_argument(
          "{}: Non-hashable static arguments are not supported: argument {} (static_argnums "
          "{}) is {}; a static argument must be a number, string or boolean",
          fn, pos + 1, pos,
          to_udata<ArrayBox>(L, idx) ? "an Array" : fmt::format("a {}", luaL_typename(L, idx)));
    return eng::invalid_argument(
        "{}: argument {} is a {}: arguments must be Arrays (or tables of them), or numbers, "
        "strings, booleans (static: each value traces anew)",
        fn, pos + 1, luaL_typename(L, idx));
  }
  std::string value = t == LUA_TNIL       ? "nil"
                      : t == LUA_TBOOLEAN ? (lua_toboolean(L, idx) ? "true" : "false")
                                          : "";
  if (value.empty()) {  // a copy: lua_tostring turns a number on the stack into a string
    lua_pushvalue(L, idx);
    value = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  return fmt::format("static {}={}", luaL_typename(L, idx), value);
}

// Reads the Array leaves of argument `pos` (an Array or a table of them) into c.
Status read_tree_arg(lua_State* L, const JitBox& j, int idx, int pos, std::string_view fn,
                     std::optional<eng::Mesh>& mesh, CallArgs& c) {
  Tree tree;
  std::vector<ArrayBox*> boxes;
  ENG_RETURN_IF_ERROR(flatten(L, idx, fmt::format("{}: argument {}", fn, pos + 1), &tree, &boxes));
  if (boxes.empty())
    return eng::invalid_argument("{}: argument {} is a table with no Arrays in it", fn, pos + 1);
  const bool given = pos < static_cast<int>(j.options().in_specs.size()) && j.options().in_specs[pos];
  std::vector<eng::PartitionSpec> prefixed;  // an in_specs entry that is a table of specs
  if (auto it = j.options().in_spec_trees.find(pos); it != j.options().in_spec_trees.end()) {
    ENG_ASSIGN_OR_RETURN(prefixed, fe::prefix_specs(it->second, tree,
                                                    fmt::format("{}: argument {}", fn, pos + 1)));
  }
  // shard_map without in_specs (jax.shard_map(f, out_specs=...)): each leaf's spec is the one in
  // its type, which names Explicit mesh axes only.
  const bool infer = j.options().manual && j.options().in_specs.empty();
  for (size_t k = 0; k < boxes.size(); ++k) {
    ArrayBox* a = boxes[k];
    ENG_RETURN_IF_ERROR(check_live(*a, fn));
    const eng::Mesh& m = a->is_tracer() ? a->trace->mesh() : a->data->array.sharding.mesh;
    if (mesh && !(*mesh == m))
      return eng::invalid_argument("{}: arguments live on different meshes: {} and {}", fn,
                                   mesh->to_string(), m.to_string());
    mesh = m;
    eng::PartitionSpec spec = a->is_tracer() ? eng::PartitionSpec() : a->data->array.sharding.spec;
    if (given) spec = *j.options().in_specs[pos];  // one spec for a table: every leaf (a pytree prefix)
    if (!prefixed.empty()) spec = prefixed[k];
    spec = eng::remove_size_one_mesh_axis(spec, m);
    if (infer && !(fe::type_sharding({m, spec}, m.axis_types()).spec == spec))
      return eng::invalid_argument(
          "{}: in_specs not given, so argument {} is split as its type says, but on {} (not "
          "Explicit) its type names no mesh axis though it is laid out {}: pass in_specs",
          fn, pos + 1, m.to_string(), spec.to_string());
    c.leaves.push_back(*a);
    c.leaf_in_specs.push_back(!prefixed.empty() ? std::optional<eng::PartitionSpec>(spec)
                              : given           ? j.options().in_specs[pos]
                              : infer ? std::optional<eng::PartitionSpec>(spec)
                                      : std::nullopt);
    c.leaf_types.push_back(eng::typeof_string(eng::dtype_name(a->dtype), a->shape, &spec, &m));
  }
  int next = c.first_leaf.back();
  c.types.push_back(tree_type(tree, c.leaf_types, &next));
  c.trees.push_back(std::move(tree));
  return eng::ok_status();
}

Result<CallArgs> read_args(lua_State* L, const JitBox& j, int fidx, int first, int n,
                           std::string_view fn) {
  CallArgs c;
  const int nparams = declared_params(L, fidx);
  ENG_ASSIGN_OR_RETURN(std::set<int> statics,
                       resolve_argnums(j.options().static_argnums, n, nparams, fn, "static_argnums"));
  ENG_ASSIGN_OR_RETURN(c.donated,
                       resolve_argnums(j.options().donate_argnums, n, nparams, fn, "donate_argnums"));
  std::optional<eng::Mesh> mesh;
  for (int i = 0; i < n; ++i) {
    const int idx = first + i;
    c.first_leaf.push_back(static_cast<int>(c.leaves.size()));
    const bool tree_like = to_udata<ArrayBox>(L, idx) || lua_type(L, idx) == LUA_TTABLE;
    if (statics.count(i) || !tree_like) {
      ENG_ASSIGN_OR_RETURN(std::string entry, static_entry(L, idx, i, statics.count(i) > 0, fn));
      if (c.donated.count(i))
        return eng::invalid_argument("{}: argument {} is static: it cannot be donated", fn, i + 1);
      c.types.push_back(std::move(entry));
      c.trees.push_back(std::nullopt);
      continue;
    }
    ENG_RETURN_IF_ERROR(read_tree_arg(L, j, idx, i, fn, mesh, c));
  }
  c.mesh = !j.options().manual        ? (mesh ? *mesh : current_mesh(L))
           : j.options().context_mesh ? current_mesh(L)
                                      : j.options().mesh;
  return c;
}

// The function's Lua results (stack slots base+1 .. base+nret) as traced values of tr;
// concrete arrays become captured constants.
Result<Outputs> read_results(lua_State* L, const JitBox& j, fe::Trace& tr,
                             const std::shared_ptr<fe::Trace>& own, int base, int nret) {
  Outputs out;
  for (int k = 1; k <= nret; ++k) {
    Tree t;
    std::vector<ArrayBox*> boxes;
    ENG_RETURN_IF_ERROR(flatten(
        L, base + k, fmt::format("{}: the function must return Arrays; result {}", j.name(), k), &t,
        &boxes));
    for (ArrayBox* r : boxes) {
      ENG_RETURN_IF_ERROR(check_live(*r, j.name()));
      if (r->is_tracer() && r->trace != own)
        return eng::invalid_argument(
            "{}: the function must return Arrays; result {} is a tracer of another jit", j.name(), k);
      out.values.push_back(r->is_tracer() ? r->value : tr.capture(r->data));
    }
    out.tree.push_back(std::move(t));
  }
  return out;
}

// Calls the function at base+1 with the n values above it (protected); the error message on
// failure. Leaves its results on the stack above base.
Status call_traced(lua_State* L, const std::shared_ptr<fe::Trace>& tr, int base, int n) {
  session(L).push_trace(tr);
  const int rc = lua_pcall(L, n, LUA_MULTRET, 0);
  session(L).pop_trace();
  if (rc == LUA_OK) return eng::ok_status();
  std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error object)";
  lua_settop(L, base);
  return eng::invalid_argument("{}", msg);
}

// The traced inputs: one program argument per Array leaf, named by parameter and key path.
Result<TracedArgs> trace_inputs(lua_State* L, const JitBox& j, fe::Trace& tr, int fidx, int n,
                                const CallArgs& args) {
  const std::vector<std::string> names = param_names(L, fidx, n);
  std::vector<std::string> leaf_names;
  for (int i = 0; i < n; ++i)
    if (args.trees[i]) leaf_paths(*args.trees[i], names[i], &leaf_names);
  return j.trace_inputs(tr, args, leaf_names);
}

// Calls f (at fidx) on tracers of tr (per position: its tree of targs' leaf values, or the
// static value from the stack) and reads its results.
Result<Outputs> call_on(lua_State* L, const JitBox& j, const std::shared_ptr<fe::Trace>& tr,
                        int fidx, int first, int n, const TracedArgs& targs) {
  const int base = lua_gettop(L);
  lua_pushvalue(L, fidx);
  for (int i = 0; i < n; ++i) {
    if (!targs.trees[i]) {
      lua_pushvalue(L, first + i);
      continue;
    }
    int next = targs.first_leaf[i];
    unflatten(L, *targs.trees[i], &next,
              [&](int k) { push_tracer(L, tr, targs.leaf_values[static_cast<size_t>(k)]); });
  }
  ENG_RETURN_IF_ERROR(call_traced(L, tr, base, n));
  Result<Outputs> outs = read_results(L, j, *tr, tr, base, lua_gettop(L) - base);
  lua_settop(L, base);
  if (!outs.ok()) return outs.status();
  if (outs->values.empty() && j.options().transform != Transform::kNone)
    return eng::invalid_argument("{}: the function returned nothing (it must return Arrays)",
                                 j.name());
  return outs;
}

// sl.vmap: f traced on one example (the leaves at in_axes 0 without their batch dim), then
// replayed batched into tr (engine/frontend/vmap.h).
Result<Outputs> vmap_apply(lua_State* L, const JitBox& j, const std::shared_ptr<fe::Trace>& tr,
                           int fidx, int first, int n, const TracedArgs& targs);

// Traces f (at fidx) on the call's arguments into a new program and compiles it.
Result<JitEntry> trace_and_compile(lua_State* L, JitBox& j, int fidx, int first, int n,
                                   const CallArgs& args) {
  ENG_ASSIGN_OR_RETURN(std::shared_ptr<fe::Trace> tr,
                       j.new_trace(args.mesh, session(L).trace_depth()));
  ENG_ASSIGN_OR_RETURN(TracedArgs targs, trace_inputs(L, j, *tr, fidx, n, args));
  Result<Outputs> outs = j.options().transform == Transform::kVmap
                             ? vmap_apply(L, j, tr, fidx, first, n, targs)
                             : call_on(L, j, tr, fidx, first, n, targs);
  if (!outs.ok()) return outs.status();
  return j.compile(*tr, std::move(*outs), targs, args);
}

Status eager_unsupported(std::string_view fn) {
  return eng::invalid_argument(
      "{}: grad, vmap, auto_axes and explicit_axes inside a shard_map called outside sl.jit (an "
      "eager shard_map) are not supported: wrap the shard_map in sl.jit",
      fn);
}

// Inside another trace, a jitted function is inlined (as jax.jit inside jax.jit): f runs on
// the tracers, and grad appends its gradient to the same program.
Result<int> call_inline(lua_State* L, JitBox& j, int fidx, int first, int n) {
  if (session(L).trace_depth() >= fe::kMaxTraceDepth)
    return eng::invalid_argument("{}: jit nested {} levels deep: recursion through jit", j.name(),
                                 fe::kMaxTraceDepth);
  std::shared_ptr<fe::Trace> tr = session(L).active_trace();
  if (tr->eager() && (j.options().transform != Transform::kNone || j.options().mode))
    return eager_unsupported(j.name());
  TracedArgs targs;
  for (int i = 0; i < n; ++i) {
    Tree t;
    std::vector<ArrayBox*> boxes;
    targs.first_leaf.push_back(static_cast<int>(targs.leaf_values.size()));
    const bool tree_like = to_udata<ArrayBox>(L, first + i) || lua_type(L, first + i) == LUA_TTABLE;
    if (!tree_like || !flatten(L, first + i, "", &t, &boxes).ok()) {
      targs.trees.push_back(std::nullopt);
      continue;
    }
    for (ArrayBox* a : boxes) {
      const bool capture = j.options().transform == Transform::kVmap && !a->is_tracer() && !a->deleted;
      targs.leaf_values.push_back(a->trace == tr ? a->value
                                  : capture      ? tr->capture(a->data)
                                                 : eng::kNoValue);
    }
    targs.trees.push_back(std::move(t));
  }
  if (j.options().transform == Transform::kVmap) {
    ENG_ASSIGN_OR_RETURN(Outputs v, vmap_apply(L, j, tr, fidx, first, n, targs));
    int next = 0;
    for (const Tree& t : v.tree)
      unflatten(L, t, &next, [&](int k) { push_tracer(L, tr, v.values[static_cast<size_t>(k)]); });
    return static_cast<int>(v.tree.size());
  }
  const int base = lua_gettop(L);
  lua_pushvalue(L, fidx);
  for (int i = 0; i < n; ++i) lua_pushvalue(L, first + i);
  ENG_RETURN_IF_ERROR(call_traced(L, tr, base, n));  // counts the depth; the same trace
  const int nret = lua_gettop(L) - base;
  if (j.options().transform == Transform::kNone) return nret;
  Result<Outputs> outs = read_results(L, j, *tr, tr, base, nret);
  lua_settop(L, base);
  if (!outs.ok()) return outs.status();
  ENG_ASSIGN_OR_RETURN(Outputs g, j.grad_outputs(*tr, *outs, targs));
  int next = 0;
  for (const Tree& t : g.tree)
    unflatten(L, t, &next, [&](int k) { push_tracer(L, tr, g.values[static_cast<size_t>(k)]); });
  return static_cast<int>(g.tree.size());
}

// Replaces the value at idx (an Array or a table of them) by its leaves resharded to `spec`
// in tr (switch_reshard); other values stay.
Status reshard_leaves(lua_State* L, const JitBox& j, const std::shared_ptr<fe::Trace>& tr, int idx,
                      const eng::PartitionSpec& spec) {
  Tree t;
  std::vector<ArrayBox*> boxes;
  const bool tree_like = to_udata<ArrayBox>(L, idx) || lua_type(L, idx) == LUA_TTABLE;
  if (!tree_like || !flatten(L, idx, "", &t, &boxes).ok() || boxes.empty()) return eng::ok_status();
  std::vector<eng::ValueId> vs;
  for (ArrayBox* a : boxes) {
    ENG_RETURN_IF_ERROR(check_live(*a, j.name()));
    if (a->is_tracer() && a->trace != tr)
      return eng::invalid_argument("{}: Encountered an unexpected tracer (of another jit)", j.name());
    const eng::ValueId v = a->is_tracer() ? a->value : tr->capture(a->data);
    ENG_ASSIGN_OR_RETURN(eng::ValueId r, j.switch_reshard(*tr, v, spec));
    vs.push_back(r);
  }
  int next = 0;
  unflatten(L, t, &next, [&](int k) { push_tracer(L, tr, vs[static_cast<size_t>(k)]); });
  lua_replace(L, idx);
  return eng::ok_status();
}

// sl.auto_axes / sl.explicit_axes inside a trace, as JAX's (no program of their own): f runs
// on the caller's values with the axis types switched (JitFunction::begin_switch), its
// arguments resharded to explicit_axes' in_sharding inside, its results to auto_axes'
// out_sharding after.
Result<int> call_switched(lua_State* L, JitBox& j, int fidx, int first, int n) {
  if (session(L).trace_depth() >= fe::kMaxTraceDepth)
    return eng::invalid_argument("{}: jit nested {} levels deep: recursion through jit", j.name(),
                                 fe::kMaxTraceDepth);
  std::shared_ptr<fe::Trace> tr = session(L).active_trace();
  const int base = lua_gettop(L);
  lua_pushvalue(L, fidx);
  for (int i = 0; i < n; ++i) lua_pushvalue(L, first + i);
  const size_t depth = tr->open_depth();
  ENG_ASSIGN_OR_RETURN(const bool out_sharding, j.begin_switch(*tr));
  Status st = eng::ok_status();
  const auto& in_specs = j.options().in_specs;
  for (int i = 0; i < n && st.ok(); ++i)
    if (i < static_cast<int>(in_specs.size()) && in_specs[i])
      st = reshard_leaves(L, j, tr, base + 2 + i, *in_specs[i]);
  if (st.ok()) st = call_traced(L, tr, base, n);  // the same trace, one level deeper
  tr->close_to(depth);  // the switch, and any view f left open
  if (!st.ok()) {
    lua_settop(L, base);
    return st;
  }
  const int nret = lua_gettop(L) - base;
  const auto& out_specs = j.options().out_specs;
  for (int k = 0; k < nret && out_sharding; ++k)
    if (k < static_cast<int>(out_specs.size()) && out_specs[k])
      ENG_RETURN_IF_ERROR(reshard_leaves(L, j, tr, base + 1 + k, *out_specs[k]));
  return nret;
}

Result<Outputs> vmap_apply(lua_State* L, const JitBox& j, const std::shared_ptr<fe::Trace>& tr,
                           int fidx, int first, int n, const TracedArgs& targs) {
  ENG_ASSIGN_OR_RETURN(fe::VmapPlan plan, j.vmap_plan(tr, targs));
  ENG_ASSIGN_OR_RETURN(Outputs outs, call_on(L, j, plan.one, fidx, first, n, plan.inner));
  ENG_ASSIGN_OR_RETURN(outs.values, fe::replay_batched(*plan.one, outs.values, *tr, plan.inputs,
                                                       plan.batch, j.name()));
  return outs;
}

bool has_tracer(lua_State* L, int first, int n) {
  for (int i = 0; i < n; ++i) {
    if (ArrayBox* a = to_udata<ArrayBox>(L, first + i); a && a->is_tracer()) return true;
    if (lua_type(L, first + i) != LUA_TTABLE) continue;
    Tree t;
    std::vector<ArrayBox*> boxes;
    if (!flatten(L, first + i, "", &t, &boxes).ok()) continue;
    for (ArrayBox* a : boxes)
      if (a->is_tracer()) return true;
  }
  return false;
}

// The compiled program for this call's signature: from the cache, else traced and compiled.
// Every compile and the first hit of each signature get a `compilations` row in the shell's
// store, outside any run (a store that cannot be written does not stop the computation). The
// pointer is valid until the next lookup.
Result<const JitEntry*> lookup(lua_State* L, JitBox& j, int fidx, int first, int n,
                               const CallArgs& args) {
  ENG_ASSIGN_OR_RETURN(
      fe::JitLookup l,
      j.lookup(
          args, [&] { return param_names(L, fidx, n); },
          [&] { return trace_and_compile(L, j, fidx, first, n, args); }));
  if (l.write) {
    Result<eng::MetricsStore*> store = context(L).open_store();
    if (store.ok()) eng::record_function_compile(**store, l.event, l.entry->compiled->info());
  }
  return l.entry;
}

Result<JitBox*> arg_jit(lua_State* L, std::string_view fn) { return arg_udata<JitBox>(L, 1, fn); }

// Deletes the Lua Arrays (of the donated arguments) whose buffers now hold results.
void delete_donated(lua_State* L, const CallArgs& args, int first,
                    const std::vector<fe::ArrayRef>& consumed) {
  if (consumed.empty()) return;
  for (int p : args.donated) {
    Tree t;
    std::vector<ArrayBox*> boxes;
    if (!flatten(L, first + p, "", &t, &boxes).ok()) continue;
    for (ArrayBox* a : boxes)
      for (const fe::ArrayRef& r : consumed)
        if (a->data == r) a->deleted = true, a->data = nullptr;
  }
}

Result<int> jit_call(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(JitBox * j, arg_jit(L, "Jitted:__call"));
  ENG_ASSIGN_OR_RETURN(const bool variant, use_call_sharding(L));
  if (variant) j = to_udata<JitBox>(L, 1);
  const int n = lua_gettop(L) - 1;
  lua_getiuservalue(L, 1, 1);
  const int fidx = lua_gettop(L);
  if (session(L).active_trace() && j->options().manual)
    return eng::invalid_argument(
        "{}: sl.shard_map inside sl.jit (or grad) is not supported yet: "
        "call it on concrete arrays",
        j->name());
  if (session(L).active_trace() && j->options().mode) return call_switched(L, *j, fidx, 2, n);
  const bool tracer = has_tracer(L, 2, n);
  if (tracer && session(L).active_trace()) return call_inline(L, *j, fidx, 2, n);
  if (tracer)
    return eng::invalid_argument(
        "{}: Encountered an unexpected tracer (from a jit that has returned)", j->name());
  ENG_ASSIGN_OR_RETURN(CallArgs args, read_args(L, *j, fidx, 2, n, j->name()));
  if (j->options().manual && !j->options().jitted && j->options().transform == Transform::kNone)
    return eager_shard_map(L, *j, fidx, 2, n, args);  // JAX's eager shard_map
  ENG_ASSIGN_OR_RETURN(const JitEntry* e, lookup(L, *j, fidx, 2, n, args));
  const std::shared_ptr<fe::Compiled> c = e->compiled;  // held: a recursive call may evict it
  const std::vector<Tree> tree = e->out_tree;
  std::vector<fe::ArrayRef> consumed;
  ENG_ASSIGN_OR_RETURN(std::vector<fe::ArrayRef> outs, j->run(*c, args, &consumed));
  if (j->options().mode && !(c->mesh() == args.mesh))  // back on the caller's mesh, as placed
    for (fe::ArrayRef& o : outs) {
      ENG_ASSIGN_OR_RETURN(o, fe::transfer(o, {args.mesh, o->array.sharding.spec}));
    }
  args.leaves.clear();  // drop the copies before deleting the donated Arrays
  delete_donated(L, args, 2, consumed);
  int next = 0;
  for (const Tree& t : tree)
    unflatten(L, t, &next, [&](int k) { push_concrete(L, outs[static_cast<size_t>(k)]); });
  return static_cast<int>(tree.size());
}

Result<int> jit_lower(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(JitBox * j, arg_jit(L, "Jitted:lower"));
  const int n = lua_gettop(L) - 1;
  lua_getiuservalue(L, 1, 1);
  const int fidx = lua_gettop(L);
  if (has_tracer(L, 2, n))
    return eng::invalid_argument("{}:lower: takes concrete Arrays (or numbers), not tracers",
                                 j->name());
  ENG_ASSIGN_OR_RETURN(CallArgs args, read_args(L, *j, fidx, 2, n, j->name()));
  ENG_ASSIGN_OR_RETURN(const JitEntry* e, lookup(L, *j, fidx, 2, n, args));
  push_udata(L, LoweredBox{e->compiled});
  return 1;
}

Result<int> jit_cache_info(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(JitBox * j, arg_jit(L, "Jitted:cache_info"));
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, static_cast<lua_Integer>(j->compiles()));
  lua_setfield(L, -2, "compiles");
  lua_pushinteger(L, static_cast<lua_Integer>(j->entries()));
  lua_setfield(L, -2, "entries");
  lua_pushstring(L, j->last_miss().c_str());
  lua_setfield(L, -2, "last_miss");
  return 1;
}

Result<int> jit_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(JitBox * j, arg_jit(L, "Jitted:__tostring"));
  const char* kind = j->options().transform == Transform::kNone   ? "jit"
                     : j->options().transform == Transform::kGrad ? "grad"
                     : j->options().transform == Transform::kVmap ? "vmap"
                                                        : "value_and_grad";
  lua_pushstring(L, fmt::format("<{} {}: {} compiled signature{}>", kind, j->name(), j->entries(),
                                j->entries() == 1 ? "" : "s")
                        .c_str());
  return 1;
}

Result<LoweredBox*> arg_lowered(lua_State* L, std::string_view fn) {
  return arg_udata<LoweredBox>(L, 1, fn);
}
Result<int> lowered_text(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(LoweredBox * l, arg_lowered(L, "Lowered:as_text"));
  const std::string t = l->compiled->traced().to_text();
  lua_pushlstring(L, t.data(), t.size());
  return 1;
}
Result<int> lowered_compile(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(LoweredBox * l, arg_lowered(L, "Lowered:compile"));
  push_udata(
      L, CompiledBox{l->compiled->executable(), l->compiled->traced().name(), l->compiled->info()});
  return 1;
}

constexpr Method kJitMethods[] = {
    {"lower", lua_entry<jit_lower>, "f:lower(...) -> Lowered",
     "The traced program for these arguments (compiled too: :compile() returns it)."},
    {"cache_info", lua_entry<jit_cache_info>, "f:cache_info() -> {compiles, entries, last_miss}",
     "How many signatures were compiled, and the last miss's explanation (JAX's words)."},
};

constexpr Method kLoweredMethods[] = {
    {"as_text", lua_entry<lowered_text>, "l:as_text() -> string",
     "The traced program (jaxpr-like): arguments, then captured constants."},
    {"compile", lua_entry<lowered_compile>, "l:compile() -> Compiled",
     "The compiled program: per-device text with its collectives, memory and cost analysis."},
};

}  // namespace

// The Jitted and Lowered types (lua_jit.h); lua_jit_api.cpp's open_lua_jit calls it.
void define_jit_types(lua_State* L) {
  define_type(L, {"Jitted", "A function transformed by sl.jit / sl.grad / sl.vmap / ...; call it.",
                  lua_entry<jit_tostring>, nullptr, udata_gc<JitBox>, kJitMethods});
  luaL_getmetatable(L, "Jitted");
  lua_pushcfunction(L, lua_entry<jit_call>);
  lua_setfield(L, -2, "__call");
  lua_pop(L, 1);
  define_type(L, {"Lowered", "A traced program (f:lower(...)): :as_text(), :compile().",
                  lua_entry<lowered_text>, nullptr, udata_gc<LoweredBox>, kLoweredMethods});
}

}  // namespace shell
