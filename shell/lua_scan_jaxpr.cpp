// shell/lua_scan_jaxpr.cpp: sl.lax.scan (jax.lax.scan; engine/frontend/scan.h has its
// semantics: this reads the pytrees and options and calls the Lua body for the engine's loop)
// and sl.make_jaxpr (engine/frontend/jaxpr.h: the text of sl.jit's or sl.shard_map's program).
#include <fmt/format.h>

#include <string>
#include <vector>

#include "engine/frontend/jaxpr.h"
#include "engine/frontend/scan.h"
#include "shell/lua_array.h"
#include "shell/lua_jit.h"
#include "shell/lua_jit_tree.h"

namespace shell {
namespace {

namespace fe = eng::frontend;

// The pytree at idx; nil is JAX's None, an empty pytree (*none set).
Result<fe::ScanTree> read_tree(lua_State* L, int idx, const std::string& what, bool* none) {
  fe::ScanTree t;
  *none = lua_isnoneornil(L, idx);
  if (*none) {
    t.tree.leaf = false;
    return t;
  }
  std::vector<ArrayBox*> boxes;
  ENG_RETURN_IF_ERROR(flatten(L, idx, what, &t.tree, &boxes));
  for (ArrayBox* b : boxes) {
    ENG_RETURN_IF_ERROR(check_live(*b, "scan"));
    t.leaves.push_back(*b);
  }
  return t;
}

void push_tree(lua_State* L, const fe::ScanTree& t, bool none) {
  if (none) {
    lua_pushnil(L);
    return;
  }
  int next = 0;
  unflatten(L, t.tree, &next, [&](int k) { push_array(L, t.leaves[static_cast<size_t>(k)]); });
}

// sl.lax.scan(f, init, xs [, {length, reverse, unroll}]) -> carry, ys
Result<int> scan(lua_State* L) {
  constexpr std::string_view fn = "scan";
  if (lua_type(L, 1) != LUA_TFUNCTION && !to_udata<JitBox>(L, 1))
    return arg_error(L, 1, fn, "f", "function");
  bool init_none = false, xs_none = false;
  ENG_ASSIGN_OR_RETURN(const fe::ScanTree init, read_tree(L, 2, "scan: init", &init_none));
  ENG_ASSIGN_OR_RETURN(const fe::ScanTree xs, read_tree(L, 3, "scan: xs", &xs_none));
  fe::ScanOptions o;
  if (!lua_isnoneornil(L, 4)) {
    ENG_RETURN_IF_ERROR(arg_table(L, 4, fn, "options"));
    static const std::vector<std::string> kKeys = {"length", "reverse", "unroll"};
    ENG_RETURN_IF_ERROR(check_keys(L, 4, fn, kKeys));
    ENG_ASSIGN_OR_RETURN(o.length, field_int(L, 4, "length", fn));
    ENG_ASSIGN_OR_RETURN(std::optional<bool> reverse, field_bool(L, 4, "reverse", fn));
    o.reverse = reverse.value_or(false);
    if (push_field(L, 4, "unroll") == LUA_TBOOLEAN) {
      o.unroll = lua_toboolean(L, -1) ? 0 : 1;  // True: every iteration (all are, here)
      lua_pop(L, 1);
    } else {
      lua_pop(L, 1);
      ENG_ASSIGN_OR_RETURN(std::optional<int64_t> unroll, field_int(L, 4, "unroll", fn));
      o.unroll = unroll.value_or(1);
    }
  }
  lua_settop(L, 1);
  if (lua_type(L, 1) == LUA_TFUNCTION) {  // its first parameter names the carry in errors
    lua_pushvalue(L, 1);
    const char* p = lua_getlocal(L, nullptr, 1);
    if (p) o.carry_name = p;
  }
  bool y_none = false;
  auto body = [&](const fe::ScanTree& carry, const fe::ScanTree& x)
      -> Result<std::pair<fe::ScanTree, fe::ScanTree>> {
    const int base = lua_gettop(L);
    if (!lua_checkstack(L, 8)) return eng::invalid_argument("scan: no Lua stack left");
    lua_pushvalue(L, 1);
    push_tree(L, carry, init_none);
    push_tree(L, x, xs_none);
    if (lua_pcall(L, 2, LUA_MULTRET, 0) != LUA_OK) {
      std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error object)";
      lua_settop(L, base);
      return eng::invalid_argument("{}", msg);
    }
    const int nret = lua_gettop(L) - base;
    if (nret != 2) {
      lua_settop(L, base);
      return eng::invalid_argument(
          "scan body output must be a pair, got {} value{} (return carry, y)", nret,
          nret == 1 ? "" : "s");
    }
    bool carry_none = false;
    Result<fe::ScanTree> c = read_tree(L, base + 1, "scan: the body's carry", &carry_none);
    Result<fe::ScanTree> y = read_tree(L, base + 2, "scan: the body's y", &y_none);
    lua_settop(L, base);
    if (!c.ok()) return c.status();
    if (!y.ok()) return y.status();
    return std::make_pair(std::move(*c), std::move(*y));
  };
  ENG_ASSIGN_OR_RETURN(fe::ScanResult r, fe::scan(session(L), body, init, xs, o));
  push_tree(L, r.carry, init_none);
  push_tree(L, r.ys, y_none);
  return 2;
}

// The function sl.make_jaxpr(f) returns (upvalue 1: f as a Jitted): the text of f:lower(...)'s
// program as a jaxpr (JAX returns a ClosedJaxpr, which prints so).
Result<int> make_jaxpr_call(lua_State* L) {
  const int n = lua_gettop(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_getfield(L, -1, "lower");
  lua_insert(L, 1);
  lua_insert(L, 2);  // lower, f, args...
  if (lua_pcall(L, n + 1, 1, 0) != LUA_OK)
    return eng::invalid_argument("{}", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error)");
  LoweredBox* l = to_udata<LoweredBox>(L, -1);
  if (!l) return eng::invalid_argument("make_jaxpr: lower did not give a Lowered");
  lua_pushstring(L, fe::jaxpr_text(*l->compiled).c_str());
  return 1;
}

// sl.make_jaxpr(f) (upvalue 1: sl.jit): f, or sl.jit(f) when f is a Lua function.
Result<int> make_jaxpr(lua_State* L) {
  if (lua_type(L, 1) != LUA_TFUNCTION && !to_udata<JitBox>(L, 1))
    return arg_error(L, 1, "sl.make_jaxpr", "fun", "function");
  lua_settop(L, 1);
  if (!to_udata<JitBox>(L, 1)) {
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK)
      return eng::invalid_argument("{}", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error)");
  }
  lua_pushcclosure(L, lua_entry<make_jaxpr_call>, 1);
  return 1;
}

constexpr const char* kMakeJaxprDoc =
    "sl.make_jaxpr(f)(...) -> string: jax.make_jaxpr: f's program for these arguments\n"
    "  (traced as sl.jit traces it), printed as a jaxpr: `{ lambda consts ; args. let ... }`.\n"
    "  Its equations are the engine's ops (engine/ir/op.h), not JAX's primitives. A\n"
    "  shard_map'd f is one shard_map equation whose jaxpr is the per-device program with\n"
    "  varying manual axes in its types (f32[3]{V:i}) and pvary where an operand is made\n"
    "  varying (implicitly, as JAX inserts it, or by sl.lax.pcast).";

constexpr Function kScanFunctions[] = {
    {"scan", lua_entry<scan>,
     "sl.lax.scan(f, init, xs [, {length, reverse, unroll}]) -> carry, ys",
     "jax.lax.scan: carry, y = f(carry, x) for each slice x of xs along its leading axis (xs a\n"
     "  pytree, nil with length: x is nil); returns the last carry and the ys stacked. The carry\n"
     "  must keep its structure and types (shape, dtype, varying manual axes: JAX's error). The\n"
     "  engine has no loop op: the scan is unrolled (f runs once per iteration, as under\n"
     "  jax.disable_jit(); inside sl.jit / sl.grad / sl.shard_map each iteration is traced into\n"
     "  the program, and grad flows through). unroll is checked and has nothing left to do."},
};

}  // namespace

void open_lua_scan(lua_State* L, int sl) {
  lua_getfield(L, sl, "lax");
  if (lua_istable(L, -1)) add_functions(L, lua_gettop(L), "sl.lax", kScanFunctions);
  lua_pop(L, 1);
  lua_getfield(L, sl, "jit");
  lua_pushcclosure(L, lua_entry<make_jaxpr>, 1);
  set_doc(L, lua_gettop(L), "sl.make_jaxpr", kMakeJaxprDoc);
  lua_setfield(L, sl, "make_jaxpr");
}

}  // namespace shell
