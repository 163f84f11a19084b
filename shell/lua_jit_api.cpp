// shell/lua_jit_api.cpp: the transformations' constructors (sl.jit, sl.grad,
// sl.value_and_grad, sl.vmap, sl.auto_axes, sl.explicit_axes, sl.shard_map) reading their
// options into a Jitted (shell/lua_jit.h; calling it is shell/lua_jit.cpp), and
// sl.lax.all_to_all. docs/frontend.md describes them.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/frontend/manual.h"
#include "engine/frontend/remat.h"
#include "engine/frontend/vma.h"
#include "shell/context.h"
#include "shell/lua_array.h"
#include "shell/lua_jit.h"
#include "shell/lua_jit_tree.h"
#include "shell/lua_numpy.h"
#include "shell/lua_types.h"

namespace shell {
namespace {

// ---- sl.jit / sl.grad / sl.value_and_grad ----------------------------------------------

// A spec list: sl.P(...) (one for every position) or a table {sl.P(...), nil, ...}.
Status read_spec_tree(lua_State* L, int idx, const std::string& what, fe::SpecTree* out,
                      int depth = 0);

// trees: where entries that are tables of specs go (shard_map's in_specs); null: an error.
Result<std::vector<std::optional<eng::PartitionSpec>>> read_specs(
    lua_State* L, int idx, std::string_view fn, std::string_view name,
    std::map<int, fe::SpecTree>* trees = nullptr) {
  std::vector<std::optional<eng::PartitionSpec>> out;
  if (lua_isnil(L, idx)) return out;
  if (auto* p = spec_at(L, idx)) {
    out.assign(64, *p);
    return out;
  }
  if (lua_type(L, idx) != LUA_TTABLE)
    return arg_error(L, idx, fn, name, "PartitionSpec or table of them");
  for (lua_Integer i = 1; i <= 64; ++i) {
    lua_rawgeti(L, idx, i);
    auto* p = spec_at(L, -1);
    const bool nil = lua_isnil(L, -1);
    if (trees && !p && !nil) {  // a table of specs for this argument
      fe::SpecTree t;
      Status st = read_spec_tree(L, -1, fmt::format("{}: {}[{}]", fn, name, i), &t);
      lua_pop(L, 1);
      if (!st.ok()) return st;
      (*trees)[static_cast<int>(i - 1)] = std::move(t);
      out.push_back(std::nullopt);
      continue;
    }
    lua_pop(L, 1);
    if (!p && !nil) return eng::invalid_argument("{}: {}[{}] is not a PartitionSpec", fn, name, i);
    out.push_back(p ? std::optional<eng::PartitionSpec>(*p) : std::nullopt);
  }
  return out;
}

// A table of specs (shard_map's in_specs entry as a pytree prefix) at idx.
Status read_spec_tree(lua_State* L, int idx, const std::string& what, fe::SpecTree* out,
                      int depth) {
  if (auto* p = spec_at(L, idx)) {
    out->spec = *p;
    return eng::ok_status();
  }
  if (lua_type(L, idx) != LUA_TTABLE || depth > 32 || !lua_checkstack(L, 4))
    return eng::invalid_argument("{} is not a PartitionSpec or a table of them", what);
  idx = lua_absindex(L, idx);
  for (lua_Integer i = 1; i <= static_cast<lua_Integer>(lua_rawlen(L, idx)); ++i) {
    lua_rawgeti(L, idx, i);
    fe::SpecTree kid;
    Status st = read_spec_tree(L, -1, fmt::format("{}[{}]", what, i), &kid, depth + 1);
    lua_pop(L, 1);
    if (!st.ok()) return st;
    out->keys.push_back(fe::TreeKey{true, i, {}});
    out->kids.push_back(std::move(kid));
  }
  return eng::ok_status();
}

Result<std::vector<int>> read_ints(lua_State* L, int idx, std::string_view fn,
                                   std::string_view name) {
  std::vector<int> out;
  if (lua_type(L, idx) == LUA_TNUMBER) {
    ENG_ASSIGN_OR_RETURN(int64_t v, arg_int(L, idx, fn, name));
    out.push_back(static_cast<int>(std::clamp<int64_t>(v, -(1 << 20), 1 << 20)));
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
    out.push_back(static_cast<int>(std::clamp<lua_Integer>(v, -(1 << 20), 1 << 20)));
  }
  return out;
}

Status read_jit_options(lua_State* L, int idx, fe::JitOptions& j, std::string_view fn) {
  if (lua_isnoneornil(L, idx)) return eng::ok_status();
  ENG_RETURN_IF_ERROR(arg_table(L, idx, fn, "options"));
  static const std::vector<std::string> kKeys = {"in_shardings", "out_shardings", "static_argnums",
                                                 "donate_argnums", "name"};
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
  for (const char* key : {"static_argnums", "donate_argnums"}) {
    if (push_field(L, idx, key) == LUA_TNIL) {
      lua_pop(L, 1);
      continue;
    }
    auto nums = read_ints(L, lua_gettop(L), fn, key);
    lua_pop(L, 1);
    if (!nums.ok()) return nums.status();
    (std::string_view(key) == "static_argnums" ? j.static_argnums : j.donate_argnums)
        .insert(nums->begin(), nums->end());
  }
  for (int k : j.donate_argnums)
    if (j.static_argnums.count(k))
      return eng::invalid_argument(
          "{}: argument {} is in both static_argnums and donate_argnums: a static value has no "
          "buffer to donate",
          fn, k);
  return eng::ok_status();
}

Status check_callable(lua_State* L, int idx, std::string_view fn) {
  if (lua_type(L, idx) == LUA_TFUNCTION || to_udata<JitBox>(L, idx)) return eng::ok_status();
  return arg_error(L, idx, fn, "fun", "function");
}

// The Jitted a transformation of the function at 1 starts from: named after a Jitted f.
Result<fe::JitOptions> new_jit(lua_State* L, std::string_view fn) {
  ENG_RETURN_IF_ERROR(check_callable(L, 1, fn));
  fe::JitOptions j;
  j.name = "fn";
  if (JitBox* inner = to_udata<JitBox>(L, 1)) j.name = inner->name();
  return j;
}

void push_jit(lua_State* L, fe::JitOptions j, int fidx) {
  push_udata(L, JitBox(std::move(j)), 2);  // 1: the function; 2: call-sharding variants
  lua_pushvalue(L, fidx);
  lua_setiuservalue(L, -2, 1);
}

Result<int> jit(lua_State* L) {
  constexpr std::string_view fn = "sl.jit";
  // jit of a shard_map'd function without jit options (JAX's @jax.jit over @jax.shard_map):
  // the shard_map compiled as one program per signature (called alone it runs eagerly).
  if (JitBox* inner = to_udata<JitBox>(L, 1);
      inner != nullptr && inner->options().manual && lua_isnoneornil(L, 2)) {
    if (inner->options().jitted || inner->options().transform != Transform::kNone) {
      lua_settop(L, 1);
      return 1;
    }
    fe::JitOptions m = inner->options();  // not eager: one program per signature
    m.jitted = true;
    lua_getiuservalue(L, 1, 1);
    push_jit(L, std::move(m), lua_gettop(L));
    return 1;
  }
  ENG_ASSIGN_OR_RETURN(fe::JitOptions j, new_jit(L, fn));
  ENG_RETURN_IF_ERROR(read_jit_options(L, 2, j, fn));
  push_jit(L, std::move(j), 1);
  return 1;
}

Result<int> grad_common(lua_State* L, std::string_view fn, Transform t) {
  ENG_ASSIGN_OR_RETURN(fe::JitOptions j, new_jit(L, fn));
  j.transform = t;
  // sl.grad(f, argnums [, {has_aux}]) or sl.grad(f, {argnums =, has_aux =}).
  int opts = 3;
  if (lua_type(L, 2) == LUA_TTABLE && lua_rawlen(L, 2) == 0) opts = 2;
  if (opts == 3 && !lua_isnoneornil(L, 2)) {
    ENG_ASSIGN_OR_RETURN(j.argnums, read_ints(L, 2, fn, "argnums"));
  }
  if (!lua_isnoneornil(L, opts)) {
    ENG_RETURN_IF_ERROR(arg_table(L, opts, fn, "options"));
    static const std::vector<std::string> kKeys = {"argnums", "has_aux"};
    ENG_RETURN_IF_ERROR(check_keys(L, opts, fn, kKeys));
    if (opts == 2 && push_field(L, 2, "argnums") != LUA_TNIL) {
      auto nums = read_ints(L, lua_gettop(L), fn, "argnums");
      lua_pop(L, 1);
      if (!nums.ok()) return nums.status();
      j.argnums = *nums;
    } else if (opts == 2) {
      lua_pop(L, 1);
    }
    ENG_ASSIGN_OR_RETURN(std::optional<bool> aux, field_bool(L, opts, "has_aux", fn));
    j.has_aux = aux.value_or(false);
  }
  if (j.argnums.empty()) return eng::invalid_argument("{}: argnums is empty", fn);
  // grad of a shard_map'd function: the shard_map with the gradient appended to its
  // per-device program (engine/frontend/vma.h has the cotangent rules).
  if (JitBox* inner = to_udata<JitBox>(L, 1); inner && inner->options().manual) {
    if (inner->options().transform != Transform::kNone)
      return eng::invalid_argument("{}: of a transformed shard_map is not supported", fn);
    fe::JitOptions m = inner->options();
    m.transform = t, m.argnums = j.argnums, m.has_aux = j.has_aux;
    lua_getiuservalue(L, 1, 1);
    push_jit(L, std::move(m), lua_gettop(L));
    return 1;
  }
  push_jit(L, std::move(j), 1);
  return 1;
}
Result<int> grad(lua_State* L) { return grad_common(L, "sl.grad", Transform::kGrad); }
Result<int> value_and_grad(lua_State* L) {
  return grad_common(L, "sl.value_and_grad", Transform::kValueAndGrad);
}

// vmap's in_axes (or out_axes) at idx: a number for every argument, or a table with one per
// argument (nil or false: not mapped, JAX's None); nil: 0 for every argument.
Result<std::vector<std::optional<int>>> read_axes(lua_State* L, int idx, std::string_view fn,
                                                  std::string_view name) {
  std::vector<std::optional<int>> out;
  const int t = lua_type(L, idx);
  if (t == LUA_TNIL || t == LUA_TNONE) return out;
  if (t == LUA_TBOOLEAN && !lua_toboolean(L, idx)) return std::vector<std::optional<int>>(64);
  if (t == LUA_TNUMBER) {
    ENG_ASSIGN_OR_RETURN(int64_t v, arg_int(L, idx, fn, name));
    return std::vector<std::optional<int>>(64, static_cast<int>(std::clamp<int64_t>(v, -64, 64)));
  }
  if (t != LUA_TTABLE) return arg_error(L, idx, fn, name, "integer, table of integers or nil");
  for (lua_Integer i = 1; i <= 64; ++i) {
    lua_rawgeti(L, idx, i);
    int ok = 0;
    const lua_Integer v = lua_tointegerx(L, -1, &ok);
    const bool none = lua_isnil(L, -1) || (lua_isboolean(L, -1) && !lua_toboolean(L, -1));
    lua_pop(L, 1);
    if (!ok && !none)
      return eng::invalid_argument("{}: {}[{}] is not an integer or nil", fn, name, i);
    out.push_back(ok ? std::optional<int>(static_cast<int>(std::clamp<lua_Integer>(v, -64, 64)))
                     : std::nullopt);
  }
  return out;
}

// sl.vmap(f [, in_axes [, out_axes]]) or sl.vmap(f, {in_axes =, out_axes =}).
Result<int> vmap(lua_State* L) {
  constexpr std::string_view fn = "sl.vmap";
  ENG_ASSIGN_OR_RETURN(fe::JitOptions j, new_jit(L, fn));
  j.transform = Transform::kVmap;
  int in_idx = 2, out_idx = 3;
  if (lua_type(L, 2) == LUA_TTABLE) {
    bool options = false;  // a table with a string key is the options form
    lua_pushnil(L);
    while (lua_next(L, 2) != 0) {
      options = options || lua_type(L, -2) == LUA_TSTRING;
      lua_pop(L, 1);
    }
    if (options) {
      static const std::vector<std::string> kKeys = {"in_axes", "out_axes", "name"};
      ENG_RETURN_IF_ERROR(check_keys(L, 2, fn, kKeys));
      ENG_ASSIGN_OR_RETURN(std::optional<std::string> name, field_string(L, 2, "name", fn));
      if (name) j.name = *name;
      lua_settop(L, 2);
      push_field(L, 2, "in_axes");
      push_field(L, 2, "out_axes");
      in_idx = 3, out_idx = 4;
    }
  }
  ENG_ASSIGN_OR_RETURN(j.in_axes, read_axes(L, in_idx, fn, "in_axes"));
  ENG_ASSIGN_OR_RETURN(std::vector<std::optional<int>> out_axes,
                       read_axes(L, out_idx, fn, "out_axes"));
  for (const std::optional<int>& a : out_axes)
    if (!a || *a != 0)
      return eng::invalid_argument(
          "{}: out_axes {} is not supported: results are batched along axis 0 (moving the batch "
          "axis needs a transpose, which the op set lacks)",
          fn, a ? std::to_string(*a) : "nil");
  push_jit(L, std::move(j), 1);
  return 1;
}

// sl.auto_axes(f, {out_sharding [, axes, name]}) / sl.explicit_axes(f, {in_sharding [, axes,
// name]}): f with the axes switched (jax.sharding's auto_axes / explicit_axes: its own program
// on concrete arrays, part of the jit's inside one); out_sharding places auto_axes' results,
// in_sharding places explicit_axes' arguments.
Result<int> switch_axes(lua_State* L, eng::ShardMode mode) {
  const std::string fn = mode == eng::ShardMode::kAuto ? "sl.auto_axes" : "sl.explicit_axes";
  const char* spec_key = mode == eng::ShardMode::kAuto ? "out_sharding" : "in_sharding";
  ENG_ASSIGN_OR_RETURN(fe::JitOptions j, new_jit(L, fn));
  j.mode = mode;
  if (!lua_isnoneornil(L, 2)) {
    ENG_RETURN_IF_ERROR(arg_table(L, 2, fn, "options"));
    const std::vector<std::string> keys = {"axes", spec_key, "name"};
    ENG_RETURN_IF_ERROR(check_keys(L, 2, fn, keys));
    ENG_ASSIGN_OR_RETURN(std::optional<std::string> name, field_string(L, 2, "name", fn));
    if (name) j.name = *name;
    const int t = push_field(L, 2, "axes");
    if (t == LUA_TSTRING) {
      j.mode_axes.push_back(lua_tostring(L, -1));
    } else if (t != LUA_TNIL) {
      auto axes = arg_string_list(L, lua_gettop(L), fn, "axes");
      if (!axes.ok()) {
        lua_pop(L, 1);
        return axes.status();
      }
      j.mode_axes = *axes;
    }
    lua_pop(L, 1);
    push_field(L, 2, spec_key);
    auto specs = read_specs(L, lua_gettop(L), fn, spec_key);
    lua_pop(L, 1);
    if (!specs.ok()) return specs.status();
    (mode == eng::ShardMode::kAuto ? j.out_specs : j.in_specs) = std::move(*specs);
  }
  push_jit(L, std::move(j), 1);
  return 1;
}
Result<int> auto_axes(lua_State* L) { return switch_axes(L, eng::ShardMode::kAuto); }
Result<int> explicit_axes(lua_State* L) { return switch_axes(L, eng::ShardMode::kExplicit); }

Result<int> shard_map(lua_State* L);

// The decorator sl.shard_map({...}) returns: f -> sl.shard_map(f, {...}) (the options table
// is its upvalue).
Result<int> shard_map_decorate(lua_State* L) {
  lua_settop(L, 1);
  lua_pushvalue(L, lua_upvalueindex(1));
  return shard_map(L);
}

// sl.shard_map(f, {mesh, in_specs, out_specs}), or sl.shard_map({...}) -> a decorator taking f
// (JAX's jax.shard_map(in_specs=..., out_specs=...) used as @jax.shard_map(...)).
Result<int> shard_map(lua_State* L) {
  constexpr std::string_view fn = "sl.shard_map";
  if (lua_gettop(L) == 1 && lua_type(L, 1) == LUA_TTABLE) {
    if (luaL_getmetafield(L, 1, "__call") == LUA_TNIL) {  // options, not a callable table
      lua_pushcclosure(L, lua_entry<shard_map_decorate>, 1);
      return 1;
    }
    lua_pop(L, 1);
  }
  ENG_RETURN_IF_ERROR(check_callable(L, 1, fn));
  ENG_RETURN_IF_ERROR(arg_table(L, 2, fn, "options"));
  static const std::vector<std::string> kKeys = {"mesh", "in_specs", "out_specs", "name"};
  ENG_RETURN_IF_ERROR(check_keys(L, 2, fn, kKeys));
  fe::JitOptions j;
  j.name = "shard_map";
  j.manual = true;
  j.mesh = current_mesh(L);
  if (push_field(L, 2, "mesh") != LUA_TNIL) {
    Result<eng::Mesh*> m = arg_udata<eng::Mesh>(L, lua_gettop(L), fn, "mesh");
    lua_pop(L, 1);
    if (!m.ok()) return m.status();
    j.mesh = **m;
  } else {  // JAX's mesh=None: the mesh in context when it is called
    lua_pop(L, 1);
    j.context_mesh = true;
  }
  ENG_ASSIGN_OR_RETURN(std::optional<std::string> name, field_string(L, 2, "name", fn));
  if (name) j.name = *name;
  for (const char* key : {"in_specs", "out_specs"}) {
    // in_specs may be left out: then each argument is split as its type says; out_specs left
    // out is JAX's out_specs=None (f returns nothing)
    push_field(L, 2, key);
    const bool in = std::string_view(key) == "in_specs";
    auto specs = read_specs(L, lua_gettop(L), fn, key, in ? &j.in_spec_trees : nullptr);
    lua_pop(L, 1);
    if (!specs.ok()) return specs.status();
    (in ? j.in_specs : j.out_specs) = std::move(*specs);
  }
  push_jit(L, std::move(j), 1);
  return 1;
}

// sl.lax.all_to_all(x, axis_name, split_axis, concat_axis [, {tiled = false}]) inside
// sl.shard_map (engine/frontend/manual.h).
Result<int> all_to_all(lua_State* L) {
  constexpr std::string_view fn = "all_to_all";
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, fn, "x"));
  if (!x.array) return arg_error(L, 1, fn, "x", "Array");
  ENG_ASSIGN_OR_RETURN(const std::vector<std::string> axes, read_axis_names(L, 2, fn));
  ENG_ASSIGN_OR_RETURN(int64_t split, arg_int(L, 3, fn, "split_axis"));
  ENG_ASSIGN_OR_RETURN(int64_t concat, arg_int(L, 4, fn, "concat_axis"));
  ENG_ASSIGN_OR_RETURN(const bool tiled, read_bool_option(L, 5, fn, "tiled"));
  const int sa = static_cast<int>(std::clamp<int64_t>(split, -1000, 1000));
  const int ca = static_cast<int>(std::clamp<int64_t>(concat, -1000, 1000));
  return apply(L, fn, fmt::format("{} {} {} {}", fmt::join(axes, ","), sa, ca, tiled), {x},
               [=](fe::Trace& tr, std::span<const eng::ValueId> in) {
                 return one(fe::manual::all_to_all(tr, in[0], axes, sa, ca, tiled));
               });
}

// sl.lax.pmean(x, axis_name) inside sl.shard_map.
Result<int> pmean(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, "pmean", "x"));
  if (!x.array) return arg_error(L, 1, "pmean", "x", "Array");
  ENG_ASSIGN_OR_RETURN(const std::vector<std::string> axes, read_axis_names(L, 2, "pmean"));
  return apply(L, "pmean", fmt::format("{}", fmt::join(axes, ",")), {x},
               [=](fe::Trace& tr, std::span<const eng::ValueId> in) {
                 return one(fe::manual::pmean(tr, in[0], axes));
               });
}

// sl.lax.pcast(x, axis_name, {to = "varying"}) inside sl.shard_map (engine/frontend/vma.h).
Result<int> pcast(lua_State* L) {
  constexpr std::string_view fn = "pcast";
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, fn, "x"));
  if (!x.array) return arg_error(L, 1, fn, "x", "Array");
  ENG_ASSIGN_OR_RETURN(const std::vector<std::string> axes, read_axis_names(L, 2, fn));
  ENG_RETURN_IF_ERROR(arg_table(L, 3, fn, "options"));
  ENG_ASSIGN_OR_RETURN(std::optional<std::string> to, field_string(L, 3, "to", fn));
  if (!to)
    return eng::invalid_argument("{}: the option `to` is required ({{to = \"varying\"}})", fn);
  return apply(L, fn, fmt::format("{} {}", fmt::join(axes, ","), *to), {x},
               [axes, to = *to](fe::Trace& tr, std::span<const eng::ValueId> in) {
                 return one(fe::pcast(tr, in[0], axes, to));
               });
}

// The function sl.remat returns: f called with the arguments; inside a trace, as a remat
// region whose policy (upvalue 2) is asked per op (engine/frontend/remat.h).
Result<int> remat_call(lua_State* L) {
  const int n = lua_gettop(L);
  std::shared_ptr<fe::Trace> tr = session(L).active_trace();
  if (tr && tr->eager()) tr = nullptr;  // an eager shard_map's body: ops run at once
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  fe::RematRegion r;
  if (tr) r = fe::remat_begin(*tr);
  if (lua_pcall(L, n, LUA_MULTRET, 0) != LUA_OK) {
    if (tr) (void)fe::remat_end(*tr, r, {}, nullptr);
    return eng::invalid_argument("{}", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error)");
  }
  const int nret = lua_gettop(L);
  if (!tr) return nret;  // eager: remat changes nothing without a backward pass
  std::vector<eng::ValueId> results;
  for (int k = 1; k <= nret; ++k) {
    Tree t;
    std::vector<ArrayBox*> leaves;
    if (!flatten(L, k, "remat", &t, &leaves).ok()) continue;
    for (ArrayBox* a : leaves)
      if (a->trace == tr) results.push_back(a->value);
  }
  std::function<Result<bool>(std::string_view)> save;
  if (lua_isfunction(L, lua_upvalueindex(2)))
    save = [L](std::string_view op) -> Result<bool> {
      lua_pushvalue(L, lua_upvalueindex(2));
      lua_pushlstring(L, op.data(), op.size());
      if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error)";
        lua_pop(L, 1);
        return eng::invalid_argument("remat: policy: {}", msg);
      }
      const bool keep = lua_toboolean(L, -1);
      lua_pop(L, 1);
      return keep;
    };
  ENG_RETURN_IF_ERROR(fe::remat_end(*tr, r, results, save));
  return nret;
}

// sl.remat(f [, {policy = function(op, ...) -> boolean}]) (also sl.checkpoint): jax.remat.
Result<int> remat(lua_State* L) {
  constexpr std::string_view fn = "sl.remat";
  ENG_RETURN_IF_ERROR(check_callable(L, 1, fn));
  lua_settop(L, 2);
  if (!lua_isnil(L, 2)) {
    ENG_RETURN_IF_ERROR(arg_table(L, 2, fn, "options"));
    static const std::vector<std::string> kKeys = {"policy"};
    ENG_RETURN_IF_ERROR(check_keys(L, 2, fn, kKeys));
    push_field(L, 2, "policy");
    if (!lua_isnil(L, -1) && !lua_isfunction(L, -1))
      return arg_error(L, lua_gettop(L), fn, "policy", "function");
    lua_replace(L, 2);
  }
  lua_pushcclosure(L, lua_entry<remat_call>, 2);
  return 1;
}

constexpr Function kLaxFunctions[] = {
    {"pmean", lua_entry<pmean>, "sl.lax.pmean(x, axis_name) -> Array",
     "jax.lax.pmean inside sl.shard_map: psum over the axes divided by their size."},
    {"pcast", lua_entry<pcast>, "sl.lax.pcast(x, axis_name, {to = 'varying'}) -> Array",
     "jax.lax.pcast inside sl.shard_map: x, now varying over the axes (its type gains\n"
     "  {V:axes}; grad sums its cotangent over them). Only invariant -> 'varying'."},
    {"all_to_all", lua_entry<all_to_all>,
     "sl.lax.all_to_all(x, axis_name, split_axis, concat_axis [, {tiled = false}]) -> Array",
     "jax.lax.all_to_all inside sl.shard_map: chunk r of x along split_axis goes to member r of\n"
     "  the axis group, which stacks what it receives along concat_axis (untiled: split_axis\n"
     "  must equal the group size and is removed, a new axis of that size appears at concat_axis;\n"
     "  tiled: split_axis / G, concat_axis * G). Axes 0-based."},
};

// sl.remat and sl.checkpoint are one function (JAX's two names), so one docstring.
constexpr const char* kRematSignature =
    "sl.remat(f [, {policy = function(op, ...) -> boolean}]) -> function (also sl.checkpoint)";
constexpr const char* kRematDoc =
    "jax.remat (jax.checkpoint): inside sl.grad, the values f computes are recomputed in the\n"
    "  backward pass instead of kept, except those of the ops policy(op_name) saves (and f's\n"
    "  results). Outside a trace f runs as it is.";

constexpr Function kJitFunctions[] = {
    {"remat", lua_entry<remat>, kRematSignature, kRematDoc},
    {"checkpoint", lua_entry<remat>, kRematSignature, kRematDoc},
    {"shard_map", lua_entry<shard_map>,
     "sl.shard_map(f, {mesh, in_specs, out_specs}) -> Jitted; sl.shard_map({...}) -> decorator",
     "jax.shard_map: f runs on each device's blocks (argument i split by in_specs[i]) and\n"
     "  communicates with sl.lax.psum, all_gather, psum_scatter, ppermute, axis_index; its\n"
     "  results are the blocks of arrays laid out by out_specs. Called outside sl.jit it runs\n"
     "  eagerly (JAX's: print shows each device's block); sl.jit(f) compiles it once per\n"
     "  signature. mesh: default sl.get_mesh() at each call. Given only the options, it\n"
     "  returns f -> sl.shard_map(f, options)\n"
     "  (@jax.shard_map(in_specs=...)). An in_specs entry may be a table of specs for a table\n"
     "  argument (a pytree prefix).\n"
     "  Without in_specs each argument is split as its type says (Explicit mesh axes)."},
    {"jit", lua_entry<jit>,
     "sl.jit(f [, {in_shardings, out_shardings, static_argnums, donate_argnums, name}]) -> Jitted",
     "jax.jit for a Lua function of Arrays (or tables of them): traced into an engine program\n"
     "  once per signature (shapes, dtypes, shardings, table structure, static values), compiled\n"
     "  for the mesh and cached; f(x, w) runs it on the simulated devices. f:lower(x, w) ->\n"
     "  Lowered (:as_text(), :compile() -> Compiled), f:cache_info(). Numbers, strings and\n"
     "  booleans are static. donate_argnums: those arguments' buffers hold results of their shape\n"
     "  and sharding, and the Arrays are deleted. Shardings are sl.P specs (a table of them per\n"
     "  argument / result, or one for all); argument numbers are 0-based."},
    {"vmap", lua_entry<vmap>, "sl.vmap(f [, in_axes=0 [, out_axes=0]]) -> Jitted",
     "jax.vmap: f traced on one example (the mapped arguments without their leading axis),\n"
     "  then replayed batched op by op (a batching rule per op; an op without one is an error\n"
     "  naming it). in_axes: 0 or nil per argument (a number for all, or a table; nil = JAX's\n"
     "  None: not mapped). Also sl.vmap(f, {in_axes =, out_axes =}). Compiled like sl.jit."},
    {"auto_axes", lua_entry<auto_axes>,
     "sl.auto_axes(f, {out_sharding = sl.P(...) [, axes, name]}) -> Jitted",
     "jax.sharding.auto_axes: f runs with the mesh's axes (or those `axes` names) Auto: the\n"
     "  compiler chooses their shardings, explicit mode's type errors do not apply to them; its\n"
     "  results are placed by out_sharding, given here or at each call: f(x, y, {out_sharding =\n"
     "  ...}). On concrete arrays compiled as its own program; inside sl.jit part of the jit's."},
    {"explicit_axes", lua_entry<explicit_axes>,
     "sl.explicit_axes(f, {in_sharding = sl.P(...) [, axes, name]}) -> Jitted",
     "jax.sharding.explicit_axes: f runs with the mesh's axes (or those `axes` names) Explicit\n"
     "  (shardings in the types, explicit mode's errors), its arguments placed by in_sharding\n"
     "  (here or at each call: f(x, {in_sharding = ...})). On concrete arrays compiled as its own\n"
     "  program; inside sl.jit part of the jit's."},
    {"grad", lua_entry<grad>, "sl.grad(f [, argnums=0 | {i, ...} [, {has_aux}]]) -> Jitted",
     "d f / d args[argnums] (0-based) by the engine's autodiff (reverse mode, per-op VJP rules),\n"
     "  traced and compiled like sl.jit. f must return a float32 scalar (with has_aux: the scalar\n"
     "  and then aux, returned after the gradients). A table argument gets a table of gradients.\n"
     "  Also sl.grad(f, {argnums =, has_aux =})."},
    {"value_and_grad", lua_entry<value_and_grad>,
     "sl.value_and_grad(f [, argnums [, {has_aux}]]) -> Jitted",
     "Returns f(...) (the loss, then aux with has_aux) and then its gradients, as\n"
     "  jax.value_and_grad."},
};

}  // namespace

void open_lua_jit(lua_State* L, int sl) {
  define_jit_types(L);
  add_functions(L, sl, "sl", kJitFunctions);
  lua_getfield(L, sl, "lax");  // made by open_lua_numpy, which runs first
  if (lua_istable(L, -1)) add_functions(L, lua_gettop(L), "sl.lax", kLaxFunctions);
  lua_pop(L, 1);
  open_lua_scan(L, sl);
  // x ^ 2 is Python's x ** 2 (jnp.power), for the tutorials' `(predictions - targets) ** 2`.
  luaL_getmetatable(L, "Array");
  lua_getfield(L, sl, "numpy");
  if (lua_istable(L, -2) && lua_istable(L, -1)) {
    lua_getfield(L, -1, "power");
    lua_setfield(L, -3, "__pow");
  }
  lua_pop(L, 2);
}

// auto_axes' out_sharding / explicit_axes' in_sharding given at the call, as JAX's
// `add2(x, y, out_sharding=P(...))`: a trailing plain table whose only key is that name. The
// Jitted at slot 1 is replaced by its variant with those specs (made once per spec list and
// kept in its second user value, so each keeps its own cache) and the table is popped.
Result<bool> use_call_sharding(lua_State* L) {
  JitBox* j = to_udata<JitBox>(L, 1);
  const int top = lua_gettop(L);
  if (!j || !j->options().mode || top < 2 || lua_type(L, top) != LUA_TTABLE) return false;
  if (lua_getmetatable(L, top)) {
    lua_pop(L, 1);
    return false;
  }
  const bool is_auto = *j->options().mode == eng::ShardMode::kAuto;
  const char* key = is_auto ? "out_sharding" : "in_sharding";
  int keys = 0;
  bool has = false;
  std::string other;    // a string key that is not `key` holding specs: a misspelled keyword
  std::string besides;  // any other string key beside `key`
  // A value that is a spec, or a table holding one directly (several outputs' specs).
  auto holds_spec = [&](int idx) {
    if (spec_at(L, idx) != nullptr) return true;
    if (lua_type(L, idx) != LUA_TTABLE) return false;
    bool found = false;
    lua_pushnil(L);
    while (lua_next(L, idx < 0 ? idx - 1 : idx) != 0) {
      found = found || spec_at(L, -1) != nullptr;
      lua_pop(L, 1);
    }
    return found;
  };
  lua_pushnil(L);
  while (lua_next(L, top) != 0) {
    ++keys;
    if (lua_type(L, -2) == LUA_TSTRING) {
      const std::string k = lua_tostring(L, -2);
      has = has || k == key;
      if (k != key && besides.empty()) besides = k;
      if (k != key && other.empty() && holds_spec(lua_gettop(L))) other = k;
    }
    lua_pop(L, 1);
  }
  if (has && !besides.empty()) other = besides;  // {out_sharding = ..., x = ...}
  if (!other.empty())
    return eng::invalid_argument("{}: unknown keyword '{}' in the call's last table (sl.{} takes {} at the call)",
                                 j->name(), other, is_auto ? "auto_axes" : "explicit_axes", key);
  if (!has || keys != 1) return false;
  const std::string fn = j->name();
  const auto& given = is_auto ? j->options().out_specs : j->options().in_specs;
  if (!given.empty())
    return eng::invalid_argument("{}: {} is given at the call and already at sl.{}(f, {{{} = ...}})",
                                 fn, key, is_auto ? "auto_axes" : "explicit_axes", key);
  lua_pushstring(L, key);
  lua_rawget(L, top);
  ENG_ASSIGN_OR_RETURN(auto specs, read_specs(L, lua_gettop(L), fn, key));
  std::string text;
  for (const auto& sp : specs) text += (sp ? sp->to_string() : "None") + ";";
  if (lua_getiuservalue(L, 1, 2) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 1);
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, 1, 2);
  }
  const int cache = lua_gettop(L);
  lua_pushlstring(L, text.data(), text.size());
  if (lua_rawget(L, cache) == LUA_TNIL) {
    lua_pop(L, 1);
    fe::JitOptions o = j->options();
    (is_auto ? o.out_specs : o.in_specs) = std::move(specs);
    push_udata(L, JitBox(std::move(o)), 2);
    lua_getiuservalue(L, 1, 1);
    lua_setiuservalue(L, -2, 1);
    lua_pushlstring(L, text.data(), text.size());
    lua_pushvalue(L, -2);
    lua_rawset(L, cache);
  }
  lua_replace(L, 1);
  lua_settop(L, top - 1);
  return true;
}

}  // namespace shell
