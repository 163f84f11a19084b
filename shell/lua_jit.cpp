// shell/lua_jit.cpp: calling a transformed function (sl.jit, sl.grad, sl.value_and_grad,
// sl.vmap, sl.auto_axes / sl.explicit_axes, sl.shard_map; issue 13; docs/frontend.md). A
// jitted function traces its Lua function into an engine/ir Program once per signature
// (shapes, dtypes, shardings, static arguments), compiles it (engine/frontend/trace.h) and
// runs it on the mesh's simulated devices; f:lower(...) shows the traced program and
// :compile() gives the Compiled object t:compile() gives (lua_compiled.cpp).
#include "shell/lua_jit.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/frontend/numpy.h"
#include "engine/frontend/vmap.h"
#include "engine/ir/autodiff.h"
#include "engine/sharding/shard_geometry.h"
#include "shell/context.h"
#include "shell/lua_array.h"
#include "shell/lua_jit_tree.h"
#include "shell/lua_types.h"

namespace shell {

namespace {

constexpr int kMaxTraceDepth = 32;  // sl.jit inside sl.jit: deeper is recursion through jit

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

struct CallArgs {
  std::vector<ArrayBox> leaves;            // copies of the Array leaves, in argument order
  std::vector<std::optional<Tree>> trees;  // per position: its tree; nullopt: a static value
  std::vector<int> first_leaf;             // per position: the index of its first leaf
  std::vector<std::optional<eng::PartitionSpec>> leaf_in_specs;  // per leaf: in_shardings'
  std::vector<std::string> leaf_types;                           // per leaf: "f32[8@X,16]"
  std::vector<std::string> types;  // per position: the signature entry
  std::set<int> donated;           // positions (donate_argnums, resolved)
  eng::Mesh mesh;
};

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
  const bool given = pos < static_cast<int>(j.in_specs.size()) && j.in_specs[pos];
  for (ArrayBox* a : boxes) {
    ENG_RETURN_IF_ERROR(check_live(*a, fn));
    const eng::Mesh& m = a->is_tracer() ? a->trace->mesh() : a->data->array.sharding.mesh;
    if (mesh && !(*mesh == m))
      return eng::invalid_argument("{}: arguments live on different meshes: {} and {}", fn,
                                   mesh->to_string(), m.to_string());
    mesh = m;
    eng::PartitionSpec spec = a->is_tracer() ? eng::PartitionSpec() : a->data->array.sharding.spec;
    if (given) spec = *j.in_specs[pos];  // one spec for a table: every leaf (a pytree prefix)
    spec = eng::remove_size_one_mesh_axis(spec, m);
    c.leaves.push_back(*a);
    c.leaf_in_specs.push_back(given ? j.in_specs[pos] : std::nullopt);
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
                       resolve_argnums(j.static_argnums, n, nparams, fn, "static_argnums"));
  ENG_ASSIGN_OR_RETURN(c.donated,
                       resolve_argnums(j.donate_argnums, n, nparams, fn, "donate_argnums"));
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
  c.mesh = j.manual ? j.mesh : mesh ? *mesh : current_mesh();
  return c;
}

// JAX's explain_cache_misses, for a jitted Lua function: the closest earlier signature and
// the arguments that differ.
std::string explain(const JitBox& j, const std::vector<std::string>& now,
                    const std::vector<std::string>& names) {
  std::string head = fmt::format("TRACING CACHE MISS at {}:\n", j.name);
  if (j.seen.empty()) return head + fmt::format("  never seen function:\n    {}", j.name);
  const std::vector<std::string>* best = nullptr;
  size_t best_diffs = 0;
  for (const auto& s : j.seen) {
    size_t d = s.size() == now.size() ? 0 : 1000;
    for (size_t i = 0; i < std::min(s.size(), now.size()); ++i) d += s[i] != now[i];
    if (!best || d < best_diffs) best = &s, best_diffs = d;
  }
  std::string text = head + fmt::format(
                                "  for {}: all previously seen cache keys differ. For the "
                                "closest previous key:",
                                j.name);
  if (best->size() != now.size())
    return text + fmt::format("\n  * {} arguments now and {} before", now.size(), best->size());
  for (size_t i = 0; i < now.size(); ++i)
    if ((*best)[i] != now[i])
      text += fmt::format("\n  * at args[{}] ({}), now {} and before {}", i,
                          i < names.size() ? names[i] : "?", now[i], (*best)[i]);
  return text;
}

// The function's arguments as grad sees them: per position its tree (nullopt: static or not
// an Array of this trace) and the traced value of each leaf.
struct TracedArgs {
  std::vector<std::optional<Tree>> trees;
  std::vector<int> first_leaf;
  std::vector<eng::ValueId> leaf_values;
};

// The traced outputs of a transformed function: values and their structure per Lua return.
struct Outputs {
  std::vector<eng::ValueId> values;
  std::vector<Tree> tree;
};

std::string_view transform_name(const JitBox& j) {
  return j.transform == Transform::kGrad ? "grad" : "value_and_grad";
}

// d(loss)/d(each of wrt), appended to the program; zeros where the loss does not depend on it.
Result<std::vector<eng::ValueId>> gradients(std::string_view what, fe::Trace& tr, eng::ValueId loss,
                                            const std::vector<eng::ValueId>& wrt) {
  for (const eng::Instr& in : tr.builder().program().instrs())
    if (!eng::has_vjp(in.kind))
      return eng::invalid_argument("{}: the program uses {}, which has no VJP rule in the engine",
                                   what, eng::op_name(in.kind));
  // The engine's autodiff seeds d(loss)/d(loss) = 1 as a constant that only the loss op of a
  // train step consumes (masked_mean_loss; there is no constant op), so the seed enters there:
  // loss' = masked_mean_loss(loss as (1, 1), segmentation ones) = loss / (1 + 1e-8), whose
  // VJP hands `loss` the cotangent 1 / (1 + 1e-8): exactly 1.0f, since 1 + 1e-8 rounds to 1 in
  // float32 (tests/frontend/xf_test.lua checks d sum(x) / dx == 1 bitwise). loss' is not
  // returned, so the value is unchanged.
  eng::Builder& b = tr.builder();
  ENG_ASSIGN_OR_RETURN(eng::ValueId seg, tr.constant({1.0}, eng::Shape{1, 1}, eng::DType::kI32));
  const eng::ValueId seeded = b.masked_mean_loss(b.reshape(loss, eng::Shape{1, 1}), seg).first;
  std::vector<eng::ValueId> grads = eng::append_gradients(b, seeded, wrt);
  std::vector<eng::ValueId> out;
  for (size_t k = 0; k < grads.size(); ++k) {
    if (grads[k] != eng::kNoValue) {
      // Cotangent types follow primal types ("Autodiff and sharding"): a gradient is resharded
      // to its input's sharding when the backward pass left it elsewhere.
      eng::ValueId g = grads[k];
      if (const std::optional<eng::PartitionSpec> spec = tr.info(wrt[k]).spec) {
        ENG_ASSIGN_OR_RETURN(eng::PartitionSpec now, tr.sharding_of(g));
        if (!(eng::remove_size_one_mesh_axis(now, tr.mesh()) ==
              eng::remove_size_one_mesh_axis(*spec, tr.mesh()))) {
          ENG_ASSIGN_OR_RETURN(g, fe::np::sharding_constraint(tr, g, *spec, false));
        }
      }
      out.push_back(g);
      continue;
    }
    // The loss does not depend on this input: its gradient is zeros (as JAX's).
    const eng::ValueInfo& w = tr.info(wrt[k]);
    const eng::Shape shape = w.shape;
    const std::optional<eng::PartitionSpec> spec = w.spec;  // w dangles after the next emit
    ENG_ASSIGN_OR_RETURN(eng::ValueId z, fe::np::broadcast_to(tr, tr.scalar(0.0, w.dtype), shape));
    if (spec) {  // zeros typed like the input, as a computed gradient is (above)
      ENG_ASSIGN_OR_RETURN(z, fe::np::sharding_constraint(tr, z, *spec, false));
    }
    out.push_back(z);
  }
  return out;
}

// sl.grad / sl.value_and_grad: the loss (and aux) the function returned, then d(loss)/d(args
// at argnums), each shaped as its argument (a table argument gets a table of gradients).
Result<Outputs> grad_outputs(const JitBox& j, fe::Trace& tr, const Outputs& f_out,
                             const TracedArgs& args) {
  const std::string_view what = transform_name(j);
  const size_t want = j.has_aux ? 2 : 1;
  if (f_out.tree.size() != want || !f_out.tree[0].leaf)
    return j.has_aux ? eng::invalid_argument(
                           "{}: with has_aux the function must return two values (the scalar "
                           "loss, then aux), it returned {} values",
                           what, f_out.tree.size())
                     : eng::invalid_argument(
                           "{}: the function must return one scalar (the loss), it returned {} "
                           "values",
                           what, f_out.values.size());
  const eng::ValueId loss = f_out.values[0];
  const eng::ValueInfo& li = tr.info(loss);
  if (li.shape.rank() != 0)
    return eng::invalid_argument(
        "{}: Gradient only defined for scalar-output functions. Output had shape: {}", what,
        li.shape.to_string());
  if (li.dtype != eng::DType::kF32)
    return eng::invalid_argument("{}: the loss must be float32, got {}", what, li.type_string());
  std::vector<eng::ValueId> wrt;
  for (int a : j.argnums) {
    const int n = static_cast<int>(args.trees.size());
    const int p = a < 0 ? a + n : a;
    if (p < 0 || p >= n || !args.trees[p])
      return eng::invalid_argument(
          "{}: argnums {} is not an Array argument (the function got {} arguments)", what, a, n);
    for (int k = 0; k < args.trees[p]->num_leaves(); ++k) {
      const eng::ValueId v = args.leaf_values[args.first_leaf[p] + k];
      if (v == eng::kNoValue)
        return eng::invalid_argument("{}: argnums {} is not an Array argument of this trace", what,
                                     a);
      if (tr.info(v).dtype == eng::DType::kI32)
        return eng::invalid_argument("{}: argument {} is int32; only float arrays have gradients",
                                     what, a);
      wrt.push_back(v);
    }
  }
  ENG_ASSIGN_OR_RETURN(std::vector<eng::ValueId> grads, gradients(what, tr, loss, wrt));
  Outputs out;
  const std::vector<eng::ValueId> aux(f_out.values.begin() + 1, f_out.values.end());
  auto add_aux = [&] {
    if (!j.has_aux) return;
    out.values.insert(out.values.end(), aux.begin(), aux.end());
    out.tree.push_back(f_out.tree[1]);
  };
  if (j.transform == Transform::kValueAndGrad) {
    out.values.push_back(loss);
    out.tree.push_back(Tree{});
    add_aux();
  }
  size_t g = 0;
  for (int a : j.argnums) {
    const int n = static_cast<int>(args.trees.size());
    const Tree& t = *args.trees[a < 0 ? a + n : a];
    for (int k = 0; k < t.num_leaves(); ++k) out.values.push_back(grads[g++]);
    out.tree.push_back(t);
  }
  if (j.transform == Transform::kGrad) add_aux();
  return out;
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
        L, base + k, fmt::format("{}: the function must return Arrays; result {}", j.name, k), &t,
        &boxes));
    for (ArrayBox* r : boxes) {
      ENG_RETURN_IF_ERROR(check_live(*r, j.name));
      if (r->is_tracer() && r->trace != own)
        return eng::invalid_argument(
            "{}: the function must return Arrays; result {} is a tracer of another jit", j.name, k);
      out.values.push_back(r->is_tracer() ? r->value : tr.capture(r->data));
    }
    out.tree.push_back(std::move(t));
  }
  return out;
}

// Calls the function at base+1 with the n values above it (protected); the error message on
// failure. Leaves its results on the stack above base.
Status call_traced(lua_State* L, const std::shared_ptr<fe::Trace>& tr, int base, int n) {
  push_trace(tr);
  const int rc = lua_pcall(L, n, LUA_MULTRET, 0);
  pop_trace();
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
  TracedArgs t{args.trees, args.first_leaf, {}};
  for (size_t k = 0; k < args.leaves.size(); ++k) {
    const ArrayBox& a = args.leaves[k];
    eng::PartitionSpec spec = a.is_tracer() ? eng::PartitionSpec() : a.data->array.sharding.spec;
    if (args.leaf_in_specs[k]) spec = *args.leaf_in_specs[k];
    if (j.manual && !args.leaf_in_specs[k]) {
      int pos = 0;  // the argument this leaf belongs to
      while (pos + 1 < n && args.first_leaf[pos + 1] <= static_cast<int>(k)) ++pos;
      return eng::invalid_argument("shard_map: in_specs has no spec for argument {} ({})", pos + 1,
                                   leaf_names[k]);
    }
    ENG_RETURN_IF_ERROR(eng::frontend::np::check_spec(
        tr, spec, a.shape,
        fmt::format("{}: {}[{}]", j.name, j.manual ? "in_specs" : "in_shardings", k + 1)));
    // shard_map's body sees each device's block.
    const eng::Shape shape = j.manual ? eng::local_shape(args.mesh, spec, a.shape) : a.shape;
    t.leaf_values.push_back(tr.input(leaf_names[k], shape, a.dtype, spec));
  }
  return t;
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
  if (outs->values.empty())
    return eng::invalid_argument("{}: the function returned nothing (it must return Arrays)",
                                 j.name);
  return outs;
}

// sl.vmap: f traced on one example (the leaves at in_axes 0 without their batch dim), then
// replayed batched into tr (engine/frontend/vmap.h).
Result<Outputs> vmap_apply(lua_State* L, const JitBox& j, const std::shared_ptr<fe::Trace>& tr,
                           int fidx, int first, int n, const TracedArgs& targs);

const char* mode_fn(const JitBox& j) {
  return j.mode == eng::ShardMode::kAuto ? "auto_axes" : "explicit_axes";
}

// An engine mesh has one axis type for all its axes, so auto_axes / explicit_axes switch
// every axis: `axes` must name all of them (or be nil).
Status check_mode_axes(const JitBox& j, const eng::Mesh& mesh) {
  if (j.mode_axes.empty()) return eng::ok_status();
  std::vector<std::string> want = mesh.axis_names(), got = j.mode_axes;
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  if (want == got) return eng::ok_status();
  return eng::invalid_argument(
      "{}: {}: axes ({}) are not all the axes of {}: an engine mesh has one axis type for all "
      "its axes, so the switch covers every axis (axes = nil, or all of them)",
      j.name, mode_fn(j), fmt::join(j.mode_axes, ", "), mesh.to_string());
}

// The mesh with every axis of the type `mode` implies. The partitioner takes explicit mode
// from the mesh's axis type, so auto_axes / explicit_axes trace on this copy of the mesh.
Result<eng::Mesh> switched(const eng::Mesh& mesh, eng::ShardMode mode) {
  return eng::Mesh::create(
      mesh.axis_names(), mesh.axis_sizes(),
      mode == eng::ShardMode::kExplicit ? eng::AxisType::kExplicit : eng::AxisType::kAuto);
}

// `a` placed by `to` on another mesh of the same devices (auto_axes' and explicit_axes'
// arguments and results: a runtime belongs to one mesh, axis types included), via the host.
Result<fe::ArrayRef> transfer(const fe::ArrayRef& a, const eng::NamedSharding& to) {
  if (a->array.sharding == to) return a;
  ENG_ASSIGN_OR_RETURN(std::vector<double> host, fe::fetch(*a));
  return fe::device_put(host, a->array.shape, a->array.dtype, to);
}

// Traces f (at fidx) on the call's arguments into a new program and compiles it.
Result<JitEntry> trace_and_compile(lua_State* L, JitBox& j, int fidx, int first, int n,
                                   const CallArgs& args) {
  if (trace_depth() >= kMaxTraceDepth)
    return eng::invalid_argument("{}: jit traced {} levels deep: recursion through jit", j.name,
                                 kMaxTraceDepth);
  eng::Mesh mesh = args.mesh;
  if (j.mode) {
    ENG_RETURN_IF_ERROR(check_mode_axes(j, args.mesh));
    ENG_ASSIGN_OR_RETURN(mesh, switched(args.mesh, *j.mode));
  }
  auto tr = std::make_shared<fe::Trace>(j.name, mesh, j.manual);
  ENG_ASSIGN_OR_RETURN(TracedArgs targs, trace_inputs(L, j, *tr, fidx, n, args));
  Result<Outputs> outs = j.transform == Transform::kVmap
                             ? vmap_apply(L, j, tr, fidx, first, n, targs)
                             : call_on(L, j, tr, fidx, first, n, targs);
  if (!outs.ok()) return outs.status();
  if (j.transform == Transform::kGrad || j.transform == Transform::kValueAndGrad) {
    ENG_ASSIGN_OR_RETURN(*outs, grad_outputs(j, *tr, *outs, targs));
  }
  fe::CompileRequest req{j.name, j.out_specs, {}};
  for (int p : args.donated)
    for (int k = 0; k < args.trees[p]->num_leaves(); ++k)
      req.donate.push_back(args.first_leaf[p] + k);
  Result<std::shared_ptr<fe::Compiled>> c = fe::Compiled::create(*tr, outs->values, req);
  if (!c.ok() && !req.donate.empty()) {
    // Donation is an optimization: a program the in-place rule refuses runs without it.
    req.donate.clear();
    c = fe::Compiled::create(*tr, outs->values, req);
  }
  if (!c.ok()) return c.status();
  return JitEntry{std::move(*c), std::move(outs->tree)};
}

// Inside another trace, a jitted function is inlined (as jax.jit inside jax.jit): f runs on
// the tracers, and grad appends its gradient to the same program.
Result<int> call_inline(lua_State* L, JitBox& j, int fidx, int first, int n) {
  if (trace_depth() >= kMaxTraceDepth)
    return eng::invalid_argument("{}: jit nested {} levels deep: recursion through jit", j.name,
                                 kMaxTraceDepth);
  std::shared_ptr<fe::Trace> tr = active_trace();
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
      const bool capture = j.transform == Transform::kVmap && !a->is_tracer() && !a->deleted;
      targs.leaf_values.push_back(a->trace == tr ? a->value
                                  : capture      ? tr->capture(a->data)
                                                 : eng::kNoValue);
    }
    targs.trees.push_back(std::move(t));
  }
  if (j.transform == Transform::kVmap) {
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
  if (j.transform == Transform::kNone) return nret;
  Result<Outputs> outs = read_results(L, j, *tr, tr, base, nret);
  lua_settop(L, base);
  if (!outs.ok()) return outs.status();
  ENG_ASSIGN_OR_RETURN(Outputs g, grad_outputs(j, *tr, *outs, targs));
  int next = 0;
  for (const Tree& t : g.tree)
    unflatten(L, t, &next, [&](int k) { push_tracer(L, tr, g.values[static_cast<size_t>(k)]); });
  return static_cast<int>(g.tree.size());
}

// JAX's error for mapped axes of different sizes, naming each argument's axis and type.
Result<int64_t> batch_size(const JitBox& j, const fe::Trace& tr, const TracedArgs& targs,
                           const std::vector<bool>& mapped) {
  int64_t size = -1;
  std::string sizes;
  bool differ = false;
  for (size_t p = 0; p < targs.trees.size(); ++p) {
    if (!targs.trees[p] || !mapped[p]) continue;
    for (int k = 0; k < targs.trees[p]->num_leaves(); ++k) {
      const eng::ValueInfo& v = tr.info(targs.leaf_values[targs.first_leaf[p] + k]);
      if (v.shape.rank() == 0)
        return eng::invalid_argument(
            "{}: vmap was requested to map its argument along axis 0, which implies that its "
            "rank should be at least 1, but is only 0 (its shape is ()): argument {}",
            j.name, p + 1);
      differ = differ || (size >= 0 && v.shape[0] != size);
      size = v.shape[0];
      sizes += fmt::format("\n  * one axis had size {}: axis 0 of argument {} of type {}",
                           v.shape[0], p + 1, v.type_string());
    }
  }
  if (size < 0)
    return eng::invalid_argument("{}: vmap must have at least one non-None value in in_axes",
                                 j.name);
  if (differ)
    return eng::invalid_argument("{}: vmap got inconsistent sizes for array axes to be mapped:{}",
                                 j.name, sizes);
  return size;
}

Result<Outputs> vmap_apply(lua_State* L, const JitBox& j, const std::shared_ptr<fe::Trace>& tr,
                           int fidx, int first, int n, const TracedArgs& targs) {
  std::vector<bool> mapped(static_cast<size_t>(n), false);
  for (int p = 0; p < n; ++p) {
    const std::optional<int> ax =
        p < static_cast<int>(j.in_axes.size()) ? j.in_axes[p] : std::optional<int>(0);
    if (!targs.trees[p] || !ax) continue;
    if (*ax != 0)
      return eng::invalid_argument(
          "{}: vmap in_axes {} for argument {}: only 0 (or nil) is supported, since moving a "
          "batch axis to the front needs a transpose the op set lacks",
          j.name, *ax, p + 1);
    for (int k = 0; k < targs.trees[p]->num_leaves(); ++k)
      if (targs.leaf_values[targs.first_leaf[p] + k] == eng::kNoValue)
        return eng::invalid_argument("{}: vmap: argument {} is a tracer of another jit", j.name,
                                     p + 1);
    mapped[p] = true;
  }
  ENG_ASSIGN_OR_RETURN(const int64_t batch, batch_size(j, *tr, targs, mapped));
  auto one = std::make_shared<fe::Trace>(j.name, tr->mesh(), tr->manual());
  TracedArgs inner{targs.trees, targs.first_leaf, {}};
  std::vector<fe::BatchedInput> inputs;
  for (int p = 0; p < n; ++p) {
    if (!targs.trees[p]) continue;
    for (int k = 0; k < targs.trees[p]->num_leaves(); ++k) {
      const eng::ValueId v = targs.leaf_values[targs.first_leaf[p] + k];
      const eng::ValueInfo info = tr->info(v);
      ENG_ASSIGN_OR_RETURN(eng::PartitionSpec spec, tr->sharding_of(v));
      std::vector<int64_t> dims = info.shape.dims();
      if (mapped[p]) {  // one example: the batch dim (and its sharding) dropped
        dims.erase(dims.begin());
        std::vector<eng::PartitionSpec::DimAxes> d;
        for (int i = 1; i < spec.rank(); ++i) d.push_back(spec.dim(i));
        spec = eng::PartitionSpec(std::move(d));
      }
      inner.leaf_values.push_back(
          one->input(fmt::format("arg{}", p), eng::Shape(std::move(dims)), info.dtype, spec));
      inputs.push_back({v, mapped[p]});
    }
  }
  ENG_ASSIGN_OR_RETURN(Outputs outs, call_on(L, j, one, fidx, first, n, inner));
  ENG_ASSIGN_OR_RETURN(outs.values,
                       fe::replay_batched(*one, outs.values, *tr, inputs, batch, j.name));
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

// A `compilations` row (and on a miss its memory analysis) in the shell's store, under the
// function's name, outside any run. Rows are written for every compile and for the first
// cache hit of each signature (a row per call would cost a transaction per call). A store
// that cannot be written does not stop the computation.
void record(lua_State* L, const JitBox& j, const fe::Compiled& c, const std::string& signature,
            bool hit, const std::string& reason_kind, const std::string& reason_text) {
  Result<eng::MetricsStore*> store = context(L).open_store();
  if (!store.ok()) return;
  eng::CompilationRow row;
  row.fn_name = j.name;
  row.module_name = "jit_" + j.name;
  row.outcome = hit ? "hit" : "miss";
  row.cache_level = "tracing";
  row.reason_kind = reason_kind;
  row.reason_text = reason_text;
  row.in_signature = signature;
  row.cache_key = c.info().key;
  if (!hit) row.compile_s = c.info().compile_s;
  Result<int64_t> id = (*store)->record_compilation(row);
  if (!id.ok() || hit) return;
  const eng::MemoryAnalysis& m = c.executable()->memory();
  eng::MemoryAnalysisRow mr;
  mr.argument_size_in_bytes = m.argument_bytes;
  mr.output_size_in_bytes = m.output_bytes;
  mr.alias_size_in_bytes = m.alias_bytes;
  mr.temp_size_in_bytes = m.temp_bytes;
  mr.peak_memory_in_bytes = m.peak_bytes();
  (void)(*store)->record_memory_analysis(*id, mr);
}

// The compiled program for this call's signature: from the cache, else traced and compiled.
// The pointer is valid until the next lookup.
Result<const JitEntry*> lookup(lua_State* L, JitBox& j, int fidx, int first, int n,
                               const CallArgs& args) {
  std::string key = fmt::format("{}", fmt::join(args.types, "; ")) + " on " + args.mesh.repr();
  if (!args.donated.empty()) key += fmt::format(" donated {}", fmt::join(args.donated, ","));
  if (auto it = j.cache.find(key); it != j.cache.end()) {
    if (j.hit_logged.insert(key).second)
      record(L, j, *it->second.compiled, fmt::format("{}", fmt::join(args.types, ", ")), true, "",
             "");
    return &it->second;
  }
  ENG_ASSIGN_OR_RETURN(JitEntry e, trace_and_compile(L, j, fidx, first, n, args));
  j.last_miss = explain(j, args.types, param_names(L, fidx, n));
  record(L, j, *e.compiled, fmt::format("{}", fmt::join(args.types, ", ")), false,
         j.seen.empty() ? "never_seen" : "types", j.last_miss);
  j.seen.push_back(args.types);
  if (j.cache.size() >= 256) j.cache.clear(), j.hit_logged.clear();
  return &j.cache.emplace(key, std::move(e)).first->second;
}

// Runs c on the call's Array leaves. A donated leaf is handed over when only its own Lua
// Array holds it (`consumed` gets it: the caller deletes that Array); an array held elsewhere
// too (captured by a traced function, passed twice) is copied first, so nobody else sees its
// buffers change.
Result<std::vector<fe::ArrayRef>> run(const JitBox& j, const fe::Compiled& c, const CallArgs& args,
                                      std::vector<fe::ArrayRef>* consumed) {
  std::set<int> donors;
  for (int d : c.donors())
    if (d >= 0) donors.insert(d);
  std::vector<fe::ArrayRef> ins;
  for (size_t k = 0; k < args.leaves.size(); ++k) {
    fe::ArrayRef r = args.leaves[k].data;
    const eng::NamedSharding& want = c.in_shardings()[k];
    if (!(r->array.sharding.mesh == want.mesh)) {
      ENG_ASSIGN_OR_RETURN(r, transfer(r, want));  // auto_axes / explicit_axes
    } else if (!(eng::remove_size_one_mesh_axis(r->array.sharding.spec, want.mesh) ==
                 eng::remove_size_one_mesh_axis(want.spec, want.mesh))) {
      ENG_ASSIGN_OR_RETURN(r, fe::reshard_on_host(*r, want));  // in_shardings: placed as asked
    } else if (donors.count(static_cast<int>(k))) {
      int same = 0;
      for (const ArrayBox& l : args.leaves) same += l.data == r;
      // Holders: its Lua Array, the leaf copies in args, and r.
      if (same > 1 || r.use_count() > 2 + same) {
        ENG_ASSIGN_OR_RETURN(r, fe::reshard_on_host(*r, want));
      } else {
        consumed->push_back(r);
      }
    }
    ins.push_back(std::move(r));
  }
  return with_context(j.name, c.run(ins));
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
  const int n = lua_gettop(L) - 1;
  lua_getiuservalue(L, 1, 1);
  const int fidx = lua_gettop(L);
  if (active_trace() && j->manual)
    return eng::invalid_argument(
        "{}: sl.shard_map inside sl.jit (or grad) is not supported yet: "
        "call it on concrete arrays",
        j->name);
  if (active_trace() && j->mode && *j->mode != fe::shard_mode_of(active_trace()->mesh()))
    return eng::invalid_argument(
        "{}: sl.{} inside sl.jit (or grad, vmap) is not supported: the engine partitions one "
        "program in one mode; call it on concrete arrays (it compiles its own program)",
        j->name, mode_fn(*j));
  const bool tracer = has_tracer(L, 2, n);
  if (tracer && active_trace()) return call_inline(L, *j, fidx, 2, n);
  if (tracer)
    return eng::invalid_argument(
        "{}: Encountered an unexpected tracer (from a jit that has returned)", j->name);
  ENG_ASSIGN_OR_RETURN(CallArgs args, read_args(L, *j, fidx, 2, n, j->name));
  ENG_ASSIGN_OR_RETURN(const JitEntry* e, lookup(L, *j, fidx, 2, n, args));
  const std::shared_ptr<fe::Compiled> c = e->compiled;  // held: a recursive call may evict it
  const std::vector<Tree> tree = e->out_tree;
  std::vector<fe::ArrayRef> consumed;
  ENG_ASSIGN_OR_RETURN(std::vector<fe::ArrayRef> outs, run(*j, *c, args, &consumed));
  if (j->mode && !(c->mesh() == args.mesh))  // back on the caller's mesh, as placed
    for (fe::ArrayRef& o : outs) {
      ENG_ASSIGN_OR_RETURN(o, transfer(o, {args.mesh, o->array.sharding.spec}));
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
                                 j->name);
  ENG_ASSIGN_OR_RETURN(CallArgs args, read_args(L, *j, fidx, 2, n, j->name));
  ENG_ASSIGN_OR_RETURN(const JitEntry* e, lookup(L, *j, fidx, 2, n, args));
  push_udata(L, LoweredBox{e->compiled});
  return 1;
}

Result<int> jit_cache_info(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(JitBox * j, arg_jit(L, "Jitted:cache_info"));
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, static_cast<lua_Integer>(j->seen.size()));
  lua_setfield(L, -2, "compiles");
  lua_pushinteger(L, static_cast<lua_Integer>(j->cache.size()));
  lua_setfield(L, -2, "entries");
  lua_pushstring(L, j->last_miss.c_str());
  lua_setfield(L, -2, "last_miss");
  return 1;
}

Result<int> jit_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(JitBox * j, arg_jit(L, "Jitted:__tostring"));
  const char* kind = j->transform == Transform::kNone   ? "jit"
                     : j->transform == Transform::kGrad ? "grad"
                     : j->transform == Transform::kVmap ? "vmap"
                                                        : "value_and_grad";
  lua_pushstring(L, fmt::format("<{} {}: {} compiled signature{}>", kind, j->name, j->cache.size(),
                                j->cache.size() == 1 ? "" : "s")
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
