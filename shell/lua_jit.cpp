// shell/lua_jit.cpp: sl.jit, sl.grad and sl.value_and_grad (issue 13; docs/frontend.md). A
// jitted function traces its Lua function into an engine/ir Program once per signature
// (shapes, dtypes, shardings, static arguments), compiles it (engine/frontend/trace.h) and
// runs it on the mesh's simulated devices; f:lower(...) shows the traced program and
// :compile() gives the Compiled object t:compile() gives (lua_compiled.cpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/frontend/numpy.h"
#include "engine/ir/autodiff.h"
#include "engine/sharding/shard_geometry.h"
#include "shell/context.h"
#include "shell/lua_array.h"
#include "shell/lua_types.h"

namespace shell {

namespace fe = eng::frontend;

enum class Transform : uint8_t { kNone, kGrad, kValueAndGrad };

struct JitBox {
  std::string name;  // the Lua function's name, or "fn"
  std::vector<std::optional<eng::PartitionSpec>> in_specs;
  std::vector<std::optional<eng::PartitionSpec>> out_specs;
  std::set<int> static_argnums;  // 0-based, as JAX's
  Transform transform = Transform::kNone;
  std::vector<int> argnums = {0};                              // grad: which inputs (0-based)
  std::map<std::string, std::shared_ptr<fe::Compiled>> cache;  // signature -> compiled
  std::vector<std::vector<std::string>> seen;                  // per compiled signature: arg types
  int64_t compiles = 0;
  std::string last_miss;             // the last miss's explanation
  std::set<std::string> hit_logged;  // signatures whose first hit has a row
  bool manual = false;  // sl.shard_map: f sees per-device blocks (of in_specs) on `mesh`
  eng::Mesh mesh;
};
template <>
struct LuaType<JitBox> {
  static constexpr const char* kName = "Jitted";
};

// What f:lower(...) returns: the traced and compiled program of one signature.
struct LoweredBox {
  std::shared_ptr<fe::Compiled> compiled;
};
template <>
struct LuaType<LoweredBox> {
  static constexpr const char* kName = "Lowered";
};

namespace {

constexpr int kMaxTraceDepth = 32;  // sl.jit inside sl.jit: deeper is recursion through jit

// The ops autodiff has VJP rules for (engine/ir/autodiff.cpp); a program with any other op
// cannot be differentiated (its rule aborts), so grad refuses it first.
bool differentiable(eng::OpKind k) {
  using eng::OpKind;
  if (eng::op_class(k) == eng::OpClass::kUnary) return true;
  switch (k) {
    case OpKind::kMatmul:
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kScale:
    case OpKind::kConvert:
    case OpKind::kConstraint:
    case OpKind::kReshape:
    case OpKind::kSlice:
    case OpKind::kPad:
    case OpKind::kConcat:
    case OpKind::kShift:
    case OpKind::kRmsNorm:
    case OpKind::kRope:
    case OpKind::kSoftmaxCrossEntropy:
    case OpKind::kAttention:
    case OpKind::kSwiglu:
    case OpKind::kRepeatKv:
    case OpKind::kTranspose:
    case OpKind::kCompare:
    case OpKind::kSelect:
      return true;
    default:
      return false;
  }
}

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

struct CallArgs {
  std::vector<ArrayBox*> arrays;   // per position: the Array, or null (a static value)
  std::vector<std::string> types;  // per position: the signature entry
  eng::Mesh mesh;
};

Result<CallArgs> read_args(lua_State* L, const JitBox& j, int first, int n, std::string_view fn) {
  CallArgs c;
  const eng::Mesh* mesh = nullptr;
  for (int i = 0; i < n; ++i) {
    const int idx = first + i;
    ArrayBox* a = to_udata<ArrayBox>(L, idx);
    if (j.static_argnums.count(i) || !a) {
      const int t = lua_type(L, idx);
      if (t != LUA_TNUMBER && t != LUA_TSTRING && t != LUA_TBOOLEAN && t != LUA_TNIL)
        return eng::invalid_argument(
            "{}: argument {} is a {}: arguments must be Arrays, or numbers, strings, booleans "
            "(static: each value traces anew)",
            fn, i + 1, luaL_typename(L, idx));
      c.arrays.push_back(nullptr);
      std::string value = t == LUA_TNIL       ? "nil"
                          : t == LUA_TBOOLEAN ? (lua_toboolean(L, idx) ? "true" : "false")
                                              : "";
      if (value.empty()) {  // a copy: lua_tostring turns a number on the stack into a string
        lua_pushvalue(L, idx);
        value = lua_tostring(L, -1);
        lua_pop(L, 1);
      }
      c.types.push_back(fmt::format("static {}={}", luaL_typename(L, idx), value));
      continue;
    }
    const eng::Mesh& m = a->is_tracer() ? a->trace->mesh() : a->data->array.sharding.mesh;
    if (mesh && !(*mesh == m))
      return eng::invalid_argument("{}: arguments live on different meshes: {} and {}", fn,
                                   mesh->to_string(), m.to_string());
    mesh = &m;
    eng::PartitionSpec spec = a->is_tracer() ? eng::PartitionSpec() : a->data->array.sharding.spec;
    if (i < static_cast<int>(j.in_specs.size()) && j.in_specs[i]) spec = *j.in_specs[i];
    spec = eng::remove_size_one_mesh_axis(spec, m);
    c.arrays.push_back(a);
    c.types.push_back(eng::typeof_string(eng::dtype_name(a->dtype), a->shape, &spec, &m));
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

// sl.grad / sl.value_and_grad: d(loss)/d(inputs at argnums), appended to the same program.
Result<std::vector<eng::ValueId>> append_grad(const JitBox& j, fe::Trace& tr,
                                              const std::vector<eng::ValueId>& results,
                                              const std::vector<eng::ValueId>& by_position) {
  const std::string_view what = j.transform == Transform::kGrad ? "grad" : "value_and_grad";
  if (results.size() != 1)
    return eng::invalid_argument(
        "{}: the function must return one scalar (the loss), it returned {} values", what,
        results.size());
  const eng::ValueId loss = results[0];
  const eng::ValueInfo& li = tr.info(loss);
  if (li.shape.rank() != 0)
    return eng::invalid_argument(
        "{}: Gradient only defined for scalar-output functions. Output had shape: {}", what,
        li.shape.to_string());
  if (li.dtype != eng::DType::kF32)
    return eng::invalid_argument("{}: the loss must be float32, got {}", what, li.type_string());
  std::vector<eng::ValueId> wrt;
  for (int a : j.argnums) {
    if (a < 0 || a >= static_cast<int>(by_position.size()) || by_position[a] == eng::kNoValue)
      return eng::invalid_argument(
          "{}: argnums {} is not an Array argument (the function got {} arguments)", what, a,
          by_position.size());
    if (tr.info(by_position[a]).dtype == eng::DType::kI32)
      return eng::invalid_argument("{}: argument {} is int32; only float arrays have gradients",
                                   what, a);
    wrt.push_back(by_position[a]);
  }
  for (const eng::Instr& in : tr.builder().program().instrs())
    if (!differentiable(in.kind))
      return eng::invalid_argument("{}: the program uses {}, which has no VJP rule in the engine",
                                   what, eng::op_name(in.kind));
  // The engine's autodiff seeds d(loss)/d(loss) = 1 as a constant that only the loss op of a
  // train step consumes (masked_mean_loss; there is no constant op), so the seed enters there:
  // loss' = masked_mean_loss(loss as (1, 1), segmentation ones) = loss / (1 + 1e-8), whose
  // VJP hands `loss` the cotangent 1 / (1 + 1e-8) (1 in float32). loss' is not returned.
  eng::Builder& b = tr.builder();
  ENG_ASSIGN_OR_RETURN(eng::ValueId seg, tr.constant({1.0}, eng::Shape{1, 1}, eng::DType::kI32));
  const eng::ValueId seeded = b.masked_mean_loss(b.reshape(loss, eng::Shape{1, 1}), seg).first;
  std::vector<eng::ValueId> grads = eng::append_gradients(b, seeded, wrt);
  std::vector<eng::ValueId> out;
  if (j.transform == Transform::kValueAndGrad) out.push_back(loss);
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

// Traces f (at fidx) on the call's arguments into a new program and compiles it.
Result<std::shared_ptr<fe::Compiled>> trace_and_compile(lua_State* L, JitBox& j, int fidx,
                                                        int first, int n, const CallArgs& args) {
  if (trace_depth() >= kMaxTraceDepth)
    return eng::invalid_argument("{}: jit traced {} levels deep: recursion through jit", j.name,
                                 kMaxTraceDepth);
  const std::vector<std::string> names = param_names(L, fidx, n);
  auto tr = std::make_shared<fe::Trace>(j.name, args.mesh, j.manual);
  std::vector<eng::ValueId> by_position(static_cast<size_t>(n), eng::kNoValue);
  lua_pushvalue(L, fidx);
  for (int i = 0; i < n; ++i) {
    ArrayBox* a = args.arrays[i];
    if (!a) {
      lua_pushvalue(L, first + i);
      continue;
    }
    eng::PartitionSpec spec = a->is_tracer() ? eng::PartitionSpec() : a->data->array.sharding.spec;
    if (i < static_cast<int>(j.in_specs.size()) && j.in_specs[i]) spec = *j.in_specs[i];
    if (j.manual && !(i < static_cast<int>(j.in_specs.size()) && j.in_specs[i]))
      return eng::invalid_argument("shard_map: in_specs has no spec for argument {}", i + 1);
    ENG_RETURN_IF_ERROR(eng::frontend::np::check_spec(
        *tr, spec, a->shape,
        fmt::format("{}: {}[{}]", j.name, j.manual ? "in_specs" : "in_shardings", i + 1)));
    // shard_map's body sees each device's block.
    const eng::Shape shape = j.manual ? eng::local_shape(args.mesh, spec, a->shape) : a->shape;
    ArrayBox box;
    box.trace = tr;
    box.value = tr->input(names[i], shape, a->dtype, spec);
    box.shape = shape;
    box.dtype = a->dtype;
    by_position[i] = box.value;
    push_array(L, std::move(box));
  }
  const int base = lua_gettop(L) - n - 1;
  push_trace(tr);
  const int rc = lua_pcall(L, n, LUA_MULTRET, 0);
  pop_trace();
  if (rc != LUA_OK) {
    std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error object)";
    lua_settop(L, base);
    return eng::invalid_argument("{}", msg);
  }
  const int nret = lua_gettop(L) - base;
  std::vector<eng::ValueId> results;
  for (int k = 1; k <= nret; ++k) {
    ArrayBox* r = to_udata<ArrayBox>(L, base + k);
    if (!r || (r->is_tracer() && r->trace != tr)) {
      std::string got = r ? "a tracer of another jit" : luaL_typename(L, base + k);
      lua_settop(L, base);
      return eng::invalid_argument("{}: the function must return Arrays; result {} is {}", j.name,
                                   k, got);
    }
    results.push_back(r->is_tracer() ? r->value : tr->capture(r->data));
  }
  lua_settop(L, base);
  if (results.empty())
    return eng::invalid_argument("{}: the function returned nothing (it must return Arrays)",
                                 j.name);
  if (j.transform != Transform::kNone) {
    ENG_ASSIGN_OR_RETURN(results, append_grad(j, *tr, results, by_position));
  }
  fe::Trace copy = *tr;  // leaked tracers keep reading the original
  return fe::Compiled::create(std::move(copy), results, {j.name, j.out_specs});
}

// Inside another trace, a jitted function is inlined (as jax.jit inside jax.jit): f runs on
// the tracers, and grad appends its gradient to the same program.
Result<int> call_inline(lua_State* L, JitBox& j, int fidx, int first, int n) {
  if (trace_depth() >= kMaxTraceDepth)
    return eng::invalid_argument("{}: jit nested {} levels deep: recursion through jit", j.name,
                                 kMaxTraceDepth);
  std::shared_ptr<fe::Trace> tr = active_trace();
  std::vector<eng::ValueId> by_position(static_cast<size_t>(n), eng::kNoValue);
  const int base = lua_gettop(L);
  lua_pushvalue(L, fidx);
  for (int i = 0; i < n; ++i) {
    lua_pushvalue(L, first + i);
    if (ArrayBox* a = to_udata<ArrayBox>(L, first + i); a && a->trace == tr)
      by_position[i] = a->value;
  }
  push_trace(tr);  // counts the depth; the same trace
  const int rc = lua_pcall(L, n, LUA_MULTRET, 0);
  pop_trace();
  if (rc != LUA_OK) {
    std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error object)";
    lua_settop(L, base);
    return eng::invalid_argument("{}", msg);
  }
  const int nret = lua_gettop(L) - base;
  if (j.transform == Transform::kNone) return nret;
  std::vector<eng::ValueId> results;
  for (int k = 1; k <= nret; ++k) {
    ArrayBox* r = to_udata<ArrayBox>(L, base + k);
    if (!r || r->trace != tr) {
      lua_settop(L, base);
      return eng::invalid_argument("{}: the function must return a traced Array (result {})",
                                   j.name, k);
    }
    results.push_back(r->value);
  }
  lua_settop(L, base);
  ENG_ASSIGN_OR_RETURN(std::vector<eng::ValueId> out, append_grad(j, *tr, results, by_position));
  for (eng::ValueId v : out) {
    ArrayBox box;
    box.trace = tr;
    box.value = v;
    box.shape = tr->info(v).shape;
    box.dtype = tr->info(v).dtype;
    push_array(L, std::move(box));
  }
  return static_cast<int>(out.size());
}

bool has_tracer(lua_State* L, int first, int n) {
  for (int i = 0; i < n; ++i)
    if (ArrayBox* a = to_udata<ArrayBox>(L, first + i); a && a->is_tracer()) return true;
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
Result<std::shared_ptr<fe::Compiled>> lookup(lua_State* L, JitBox& j, int fidx, int first, int n,
                                             const CallArgs& args) {
  const std::string key =
      fmt::format("{}", fmt::join(args.types, "; ")) + " on " + args.mesh.repr();
  const std::string signature = fmt::format("{}", fmt::join(args.types, ", "));
  if (auto it = j.cache.find(key); it != j.cache.end()) {
    if (j.hit_logged.insert(key).second) record(L, j, *it->second, signature, true, "", "");
    return it->second;
  }
  ENG_ASSIGN_OR_RETURN(std::shared_ptr<fe::Compiled> c,
                       trace_and_compile(L, j, fidx, first, n, args));
  j.last_miss = explain(j, args.types, param_names(L, fidx, n));
  record(L, j, *c, signature, false, j.seen.empty() ? "never_seen" : "types", j.last_miss);
  j.seen.push_back(args.types);
  ++j.compiles;
  if (j.cache.size() >= 256) j.cache.clear(), j.hit_logged.clear();
  j.cache.emplace(key, c);
  return c;
}

Result<std::vector<fe::ArrayRef>> run(const JitBox& j, const fe::Compiled& c,
                                      const CallArgs& args) {
  std::vector<fe::ArrayRef> ins;
  size_t k = 0;
  for (ArrayBox* a : args.arrays) {
    if (!a) continue;
    fe::ArrayRef r = a->data;
    const eng::NamedSharding& want = c.in_shardings()[k++];
    if (!(eng::remove_size_one_mesh_axis(r->array.sharding.spec, want.mesh) ==
          eng::remove_size_one_mesh_axis(want.spec, want.mesh))) {
      ENG_ASSIGN_OR_RETURN(r, fe::reshard_on_host(*r, want));  // in_shardings: placed as asked
    }
    ins.push_back(std::move(r));
  }
  return with_context(j.name, c.run(ins));
}

Result<JitBox*> arg_jit(lua_State* L, std::string_view fn) { return arg_udata<JitBox>(L, 1, fn); }

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
  if (active_trace() && has_tracer(L, 2, n)) return call_inline(L, *j, fidx, 2, n);
  if (has_tracer(L, 2, n))
    return eng::invalid_argument(
        "{}: Encountered an unexpected tracer (from a jit that has returned)", j->name);
  ENG_ASSIGN_OR_RETURN(CallArgs args, read_args(L, *j, 2, n, j->name));
  ENG_ASSIGN_OR_RETURN(std::shared_ptr<fe::Compiled> c, lookup(L, *j, fidx, 2, n, args));
  ENG_ASSIGN_OR_RETURN(std::vector<fe::ArrayRef> outs, run(*j, *c, args));
  for (fe::ArrayRef& a : outs) push_concrete(L, std::move(a));
  return static_cast<int>(outs.size());
}

Result<int> jit_lower(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(JitBox * j, arg_jit(L, "Jitted:lower"));
  const int n = lua_gettop(L) - 1;
  lua_getiuservalue(L, 1, 1);
  const int fidx = lua_gettop(L);
  if (has_tracer(L, 2, n))
    return eng::invalid_argument("{}:lower: takes concrete Arrays (or numbers), not tracers",
                                 j->name);
  ENG_ASSIGN_OR_RETURN(CallArgs args, read_args(L, *j, 2, n, j->name));
  ENG_ASSIGN_OR_RETURN(std::shared_ptr<fe::Compiled> c, lookup(L, *j, fidx, 2, n, args));
  push_udata(L, LoweredBox{c});
  return 1;
}

Result<int> jit_cache_info(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(JitBox * j, arg_jit(L, "Jitted:cache_info"));
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, j->compiles);
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

// ---- sl.jit / sl.grad / sl.value_and_grad ----------------------------------------------

// A spec list: sl.P(...) (one for every position) or a table {sl.P(...), nil, ...}.
Result<std::vector<std::optional<eng::PartitionSpec>>> read_specs(lua_State* L, int idx,
                                                                  std::string_view fn,
                                                                  std::string_view name) {
  std::vector<std::optional<eng::PartitionSpec>> out;
  if (lua_isnil(L, idx)) return out;
  if (auto* p = to_udata<eng::PartitionSpec>(L, idx)) {
    out.assign(64, *p);
    return out;
  }
  if (lua_type(L, idx) != LUA_TTABLE)
    return arg_error(L, idx, fn, name, "PartitionSpec or table of them");
  for (lua_Integer i = 1; i <= 64; ++i) {
    lua_rawgeti(L, idx, i);
    auto* p = to_udata<eng::PartitionSpec>(L, -1);
    const bool nil = lua_isnil(L, -1);
    lua_pop(L, 1);
    if (!p && !nil) return eng::invalid_argument("{}: {}[{}] is not a PartitionSpec", fn, name, i);
    out.push_back(p ? std::optional<eng::PartitionSpec>(*p) : std::nullopt);
  }
  return out;
}

Result<std::vector<int>> read_ints(lua_State* L, int idx, std::string_view fn,
                                   std::string_view name) {
  std::vector<int> out;
  if (lua_type(L, idx) == LUA_TNUMBER) {
    ENG_ASSIGN_OR_RETURN(int64_t v, arg_int(L, idx, fn, name));
    out.push_back(static_cast<int>(std::clamp<int64_t>(v, -1, 1 << 20)));
    return out;
  }
  if (lua_type(L, idx) != LUA_TTABLE)
    return arg_error(L, idx, fn, name, "integer or table of integers");
  for (lua_Integer i = 1; i <= static_cast<lua_Integer>(lua_rawlen(L, idx)); ++i) {
    lua_rawgeti(L, idx, i);
    int ok = 0;
    const lua_Integer v = lua_tointegerx(L, -1, &ok);
    lua_pop(L, 1);
    if (!ok) return eng::invalid_argument("{}: {}[{}] is not an integer", fn, name, i);
    out.push_back(static_cast<int>(std::clamp<lua_Integer>(v, -1, 1 << 20)));
  }
  return out;
}

Status read_jit_options(lua_State* L, int idx, JitBox& j, std::string_view fn) {
  if (lua_isnoneornil(L, idx)) return eng::ok_status();
  ENG_RETURN_IF_ERROR(arg_table(L, idx, fn, "options"));
  static const std::vector<std::string> kKeys = {"in_shardings", "out_shardings", "static_argnums",
                                                 "name"};
  ENG_RETURN_IF_ERROR(check_keys(L, idx, fn, kKeys));
  ENG_ASSIGN_OR_RETURN(std::optional<std::string> name, field_string(L, idx, "name", fn));
  if (name) j.name = *name;
  const char* spec_keys[] = {"in_shardings", "out_shardings"};
  for (const char* key : spec_keys) {
    push_field(L, idx, key);
    auto specs = read_specs(L, lua_gettop(L), fn, key);
    lua_pop(L, 1);
    if (!specs.ok()) return specs.status();
    (std::string_view(key) == "in_shardings" ? j.in_specs : j.out_specs) = std::move(*specs);
  }
  if (push_field(L, idx, "static_argnums") != LUA_TNIL) {
    auto nums = read_ints(L, lua_gettop(L), fn, "static_argnums");
    lua_pop(L, 1);
    if (!nums.ok()) return nums.status();
    j.static_argnums.insert(nums->begin(), nums->end());
  } else {
    lua_pop(L, 1);
  }
  return eng::ok_status();
}

Status check_callable(lua_State* L, int idx, std::string_view fn) {
  if (lua_type(L, idx) == LUA_TFUNCTION || to_udata<JitBox>(L, idx)) return eng::ok_status();
  return arg_error(L, idx, fn, "fun", "function");
}

void push_jit(lua_State* L, JitBox j, int fidx) {
  push_udata(L, std::move(j), 1);
  lua_pushvalue(L, fidx);
  lua_setiuservalue(L, -2, 1);
}

Result<int> jit(lua_State* L) {
  constexpr std::string_view fn = "sl.jit";
  ENG_RETURN_IF_ERROR(check_callable(L, 1, fn));
  JitBox j;
  j.name = "fn";
  if (JitBox* inner = to_udata<JitBox>(L, 1)) j.name = inner->name;
  ENG_RETURN_IF_ERROR(read_jit_options(L, 2, j, fn));
  push_jit(L, std::move(j), 1);
  return 1;
}

Result<int> grad_common(lua_State* L, std::string_view fn, Transform t) {
  ENG_RETURN_IF_ERROR(check_callable(L, 1, fn));
  JitBox j;
  j.name = "fn";
  if (JitBox* inner = to_udata<JitBox>(L, 1)) j.name = inner->name;
  j.transform = t;
  if (!lua_isnoneornil(L, 2)) {
    ENG_ASSIGN_OR_RETURN(j.argnums, read_ints(L, 2, fn, "argnums"));
    if (j.argnums.empty()) return eng::invalid_argument("{}: argnums is empty", fn);
  }
  push_jit(L, std::move(j), 1);
  return 1;
}
Result<int> grad(lua_State* L) { return grad_common(L, "sl.grad", Transform::kGrad); }
Result<int> value_and_grad(lua_State* L) {
  return grad_common(L, "sl.value_and_grad", Transform::kValueAndGrad);
}

// sl.shard_map(f, {mesh, in_specs, out_specs})
Result<int> shard_map(lua_State* L) {
  constexpr std::string_view fn = "sl.shard_map";
  ENG_RETURN_IF_ERROR(check_callable(L, 1, fn));
  ENG_RETURN_IF_ERROR(arg_table(L, 2, fn, "options"));
  static const std::vector<std::string> kKeys = {"mesh", "in_specs", "out_specs", "name"};
  ENG_RETURN_IF_ERROR(check_keys(L, 2, fn, kKeys));
  JitBox j;
  j.name = "shard_map";
  j.manual = true;
  j.mesh = current_mesh();
  if (push_field(L, 2, "mesh") != LUA_TNIL) {
    Result<eng::Mesh*> m = arg_udata<eng::Mesh>(L, lua_gettop(L), fn, "mesh");
    lua_pop(L, 1);
    if (!m.ok()) return m.status();
    j.mesh = **m;
  } else {
    lua_pop(L, 1);
  }
  ENG_ASSIGN_OR_RETURN(std::optional<std::string> name, field_string(L, 2, "name", fn));
  if (name) j.name = *name;
  for (const char* key : {"in_specs", "out_specs"}) {
    if (push_field(L, 2, key) == LUA_TNIL) {
      lua_pop(L, 1);
      return eng::invalid_argument("{}: {} is required", fn, key);
    }
    auto specs = read_specs(L, lua_gettop(L), fn, key);
    lua_pop(L, 1);
    if (!specs.ok()) return specs.status();
    (std::string_view(key) == "in_specs" ? j.in_specs : j.out_specs) = std::move(*specs);
  }
  push_jit(L, std::move(j), 1);
  return 1;
}

constexpr Function kJitFunctions[] = {
    {"shard_map", lua_entry<shard_map>, "sl.shard_map(f, {mesh, in_specs, out_specs}) -> Jitted",
     "jax.shard_map: f runs on each device's blocks (argument i split by in_specs[i]) and\n"
     "  communicates with sl.lax.psum, all_gather, psum_scatter, ppermute, axis_index; its "
     "results\n"
     "  are the blocks of arrays laid out by out_specs. Compiled once per signature, without SPMD\n"
     "  partitioning (the program is per-device already). mesh: default sl.get_mesh()."},
    {"jit", lua_entry<jit>,
     "sl.jit(f [, {in_shardings, out_shardings, static_argnums, name}]) -> Jitted",
     "jax.jit for a Lua function of Arrays: traced into an engine program once per signature\n"
     "  (shapes, dtypes, shardings, static values), compiled for the mesh and cached; f(x, w) "
     "runs\n"
     "  it on the simulated devices. f:lower(x, w) -> Lowered (:as_text(), :compile() -> "
     "Compiled),\n"
     "  f:cache_info(). Numbers and other non-Array arguments are static. Shardings are sl.P "
     "specs\n"
     "  (a table of them per argument / result, or one for all); argument numbers are 0-based."},
    {"grad", lua_entry<grad>, "sl.grad(f [, argnums=0 | {i, ...}]) -> Jitted",
     "d f / d args[argnums] (0-based) by the engine's autodiff (reverse mode, per-op VJP rules),\n"
     "  traced and compiled like sl.jit. f must return a float32 scalar."},
    {"value_and_grad", lua_entry<value_and_grad>, "sl.value_and_grad(f [, argnums]) -> Jitted",
     "Returns f(...) and then its gradients, as jax.value_and_grad."},
};

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

void open_lua_jit(lua_State* L, int sl) {
  define_type(L,
              {"Jitted", "A function transformed by sl.jit / sl.grad / sl.value_and_grad; call it.",
               lua_entry<jit_tostring>, nullptr, udata_gc<JitBox>, kJitMethods});
  luaL_getmetatable(L, "Jitted");
  lua_pushcfunction(L, lua_entry<jit_call>);
  lua_setfield(L, -2, "__call");
  lua_pop(L, 1);
  define_type(L, {"Lowered", "A traced program (f:lower(...)): :as_text(), :compile().",
                  lua_entry<lowered_text>, nullptr, udata_gc<LoweredBox>, kLoweredMethods});
  add_functions(L, sl, "sl", kJitFunctions);
}

}  // namespace shell
