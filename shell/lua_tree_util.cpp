// shell/lua_tree_util.cpp: jax.tree_util's tree_map, tree_leaves and tree_all over Lua values
// (sl.tree_util, and sl.tree.map / leaves / all as jax.tree's names). A table without a
// metatable is a node (JAX's list, tuple and dict); anything else is a leaf: Arrays, numbers,
// booleans, strings, tables with a metatable. A node's children go in JAX's order: list
// positions 1..#t, then the string keys sorted (a dict's keys are sorted in JAX's flattening).
#include <lua.hpp>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "engine/frontend/session.h"
#include "shell/bindings.h"
#include "shell/lua_array.h"
#include "shell/lua_binding.h"

namespace shell {
namespace {

namespace fe = eng::frontend;

constexpr int kMaxDepth = 64;  // deeper nesting (or a table containing itself) is an error

bool is_node(lua_State* L, int idx) {
  if (lua_type(L, idx) != LUA_TTABLE) return false;
  if (!lua_getmetatable(L, idx)) return true;
  lua_pop(L, 1);
  return false;
}

struct Key {
  bool position = false;  // a list position (1..#t), else a string key
  lua_Integer i = 0;
  std::string s;
  bool operator==(const Key& o) const { return position == o.position && i == o.i && s == o.s; }
};

void push_key(lua_State* L, const Key& k) {
  if (k.position) {
    lua_pushinteger(L, k.i);
  } else {
    lua_pushlstring(L, k.s.data(), k.s.size());
  }
}

// The children's keys of the node at idx in JAX's order. A key that is neither a list position
// nor a string (a float, 0, a position past #t, a table) is an error naming it.
Result<std::vector<Key>> node_keys(lua_State* L, int idx, std::string_view fn) {
  idx = lua_absindex(L, idx);
  const lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, idx));
  std::vector<Key> keys;
  for (lua_Integer i = 1; i <= n; ++i) keys.push_back({true, i, {}});
  std::vector<std::string> named;
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    lua_pop(L, 1);  // the value; the key stays for lua_next
    if (lua_type(L, -1) == LUA_TSTRING) {
      size_t len = 0;
      const char* s = lua_tolstring(L, -1, &len);
      named.emplace_back(s, len);
      continue;
    }
    if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 1 && lua_tointeger(L, -1) <= n) continue;
    std::string key = luaL_tolstring(L, -1, nullptr);
    lua_pop(L, 2);  // the string and the key
    return eng::invalid_argument(
        "{}: a table key {} is neither a list position (1..{}) nor a string", fn, key, n);
  }
  std::sort(named.begin(), named.end());
  for (std::string& s : named) keys.push_back({false, 0, std::move(s)});
  return keys;
}

// Calls f (at index f) with the `count` values at first.. and leaves its one result pushed.
Status call_leaf(lua_State* L, int f, int first, int count, std::string_view fn) {
  lua_pushvalue(L, f);
  for (int i = 0; i < count; ++i) lua_pushvalue(L, first + i);
  if (lua_pcall(L, count, 1, 0) == LUA_OK) return eng::ok_status();
  std::string msg = lua_tostring(L, -1) != nullptr ? lua_tostring(L, -1) : "(error object)";
  lua_pop(L, 1);
  return eng::invalid_argument("{}: {}", fn, msg);
}

// Pushes f mapped over the `count` trees at first.. (absolute indices): tree 1's structure, each
// other tree the same structure (JAX's "Custom node type mismatch" / key mismatch error).
Status map_trees(lua_State* L, int f, int first, int count, int depth, std::string_view fn) {
  if (depth > kMaxDepth)
    return eng::invalid_argument("{}: trees nested over {} deep (or a table containing itself)",
                                 fn, kMaxDepth);
  if (!lua_checkstack(L, count + 8)) return eng::invalid_argument("{}: no Lua stack left", fn);
  if (!is_node(L, first)) return call_leaf(L, f, first, count, fn);
  ENG_ASSIGN_OR_RETURN(std::vector<Key> keys, node_keys(L, first, fn));
  for (int t = 1; t < count; ++t) {
    if (!is_node(L, first + t))
      return eng::invalid_argument("{}: tree {} has a leaf ({}) where tree 1 has a table", fn,
                                   t + 1, luaL_typename(L, first + t));
    ENG_ASSIGN_OR_RETURN(std::vector<Key> other, node_keys(L, first + t, fn));
    if (other != keys)
      return eng::invalid_argument(
          "{}: tree {} has a table of {} children where tree 1 has one of {} (or other keys)",
          fn, t + 1, other.size(), keys.size());
  }
  lua_createtable(L, 0, 0);
  const int out = lua_gettop(L);
  for (const Key& k : keys) {
    for (int t = 0; t < count; ++t) {
      push_key(L, k);
      lua_rawget(L, first + t);
    }
    Status s = map_trees(L, f, out + 1, count, depth + 1, fn);
    if (!s.ok()) {
      lua_settop(L, out - 1);
      return s;
    }
    push_key(L, k);
    lua_insert(L, -2);
    lua_rawset(L, out);
    lua_settop(L, out);
  }
  return eng::ok_status();
}

// Appends the leaves of the value at idx to the list at `out`.
Status collect_leaves(lua_State* L, int idx, int out, lua_Integer* n, int depth,
                      std::string_view fn) {
  if (depth > kMaxDepth)
    return eng::invalid_argument("{}: a tree nested over {} deep (or a table containing itself)",
                                 fn, kMaxDepth);
  if (!lua_checkstack(L, 4)) return eng::invalid_argument("{}: no Lua stack left", fn);
  if (!is_node(L, idx)) {
    lua_pushvalue(L, idx);
    lua_rawseti(L, out, ++*n);
    return eng::ok_status();
  }
  ENG_ASSIGN_OR_RETURN(std::vector<Key> keys, node_keys(L, idx, fn));
  for (const Key& k : keys) {
    push_key(L, k);
    lua_rawget(L, idx);
    Status s = collect_leaves(L, lua_gettop(L), out, n, depth + 1, fn);
    lua_pop(L, 1);
    ENG_RETURN_IF_ERROR(s);
  }
  return eng::ok_status();
}

Result<int> push_leaves(lua_State* L, int idx, std::string_view fn) {
  idx = lua_absindex(L, idx);
  lua_createtable(L, 0, 0);
  lua_Integer n = 0;
  ENG_RETURN_IF_ERROR(collect_leaves(L, idx, lua_gettop(L), &n, 0, fn));
  return 1;
}

// tree_map(f, tree, ...rest)
Result<int> tree_map(lua_State* L) {
  constexpr std::string_view fn = "tree_map";
  if (lua_type(L, 1) != LUA_TFUNCTION) {
    if (luaL_getmetafield(L, 1, "__call") == LUA_TNIL) return arg_error(L, 1, fn, "f", "function");
    lua_pop(L, 1);
  }
  const int count = lua_gettop(L) - 1;
  if (count < 1) return eng::invalid_argument("{}: needs a tree after f", fn);
  ENG_RETURN_IF_ERROR(map_trees(L, 1, 2, count, 0, fn));
  return 1;
}

Result<int> tree_leaves(lua_State* L) { return push_leaves(L, 1, "tree_leaves"); }

// Python's bool() of a leaf: false and nil are false, a number is nonzero, an Array of one
// element its value (more elements: JAX's "truth value ... is ambiguous"), anything else true.
Result<bool> truthy(lua_State* L, int idx, std::string_view fn) {
  switch (lua_type(L, idx)) {
    case LUA_TNIL:
      return false;
    case LUA_TBOOLEAN:
      return lua_toboolean(L, idx) != 0;
    case LUA_TNUMBER:
      return lua_tonumber(L, idx) != 0;
    default:
      break;
  }
  ArrayBox* a = to_udata<ArrayBox>(L, idx);
  if (a == nullptr) return true;
  if (a->is_tracer())
    return eng::invalid_argument("{}: a traced Array has no truth value inside sl.jit (use "
                                 "sl.numpy.all)", fn);
  ENG_RETURN_IF_ERROR(check_live(*a, fn));
  if (a->shape.numel() != 1)
    return eng::invalid_argument(
        "{}: The truth value of an array with more than one element is ambiguous (shape {})", fn,
        a->shape.to_string());
  ENG_ASSIGN_OR_RETURN(std::vector<double> v, fe::fetch(*a->data));
  return v.at(0) != 0;
}

Result<int> tree_all(lua_State* L) {
  constexpr std::string_view fn = "tree_all";
  ENG_RETURN_IF_ERROR(push_leaves(L, 1, fn).status());
  const int leaves = lua_gettop(L);
  bool all = true;
  const lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, leaves));
  for (lua_Integer i = 1; all && i <= n; ++i) {
    lua_rawgeti(L, leaves, i);
    Result<bool> t = truthy(L, -1, fn);
    lua_pop(L, 1);
    ENG_RETURN_IF_ERROR(t.status());
    all = *t;
  }
  lua_settop(L, leaves - 1);
  lua_pushboolean(L, all);
  return 1;
}

constexpr Function kTreeUtilFunctions[] = {
    {"tree_map", lua_entry<tree_map>, "sl.tree_util.tree_map(f, tree, ...) -> tree",
     "jax.tree_util.tree_map: f applied to each leaf (with the matching leaves of the other\n"
     "  trees, which must have tree's structure). Tables without a metatable are nodes; Arrays,\n"
     "  numbers, booleans and strings are leaves."},
    {"tree_leaves", lua_entry<tree_leaves>, "sl.tree_util.tree_leaves(tree) -> {leaf, ...}",
     "The leaves in JAX's order: list positions first, then string keys sorted."},
    {"tree_all", lua_entry<tree_all>, "sl.tree_util.tree_all(tree) -> boolean",
     "Whether every leaf is true (Python's all(tree_leaves(tree)); an Array leaf must have one\n"
     "  element)."},
};

constexpr Function kTreeFunctions[] = {
    {"map", lua_entry<tree_map>, "sl.tree.map(f, tree, ...) -> tree", "jax.tree.map: tree_map."},
    {"leaves", lua_entry<tree_leaves>, "sl.tree.leaves(tree) -> {leaf, ...}",
     "jax.tree.leaves: tree_leaves."},
    {"all", lua_entry<tree_all>, "sl.tree.all(tree) -> boolean", "jax.tree.all: tree_all."},
};

}  // namespace

void open_lua_tree_util(lua_State* L, int sl) {
  lua_newtable(L);
  add_functions(L, lua_gettop(L), "sl.tree_util", kTreeUtilFunctions);
  lua_setfield(L, sl, "tree_util");
  lua_newtable(L);
  add_functions(L, lua_gettop(L), "sl.tree", kTreeFunctions);
  lua_setfield(L, sl, "tree");
}

}  // namespace shell
