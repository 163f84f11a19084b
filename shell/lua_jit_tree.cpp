// shell/lua_jit_tree.cpp: flattening Lua tables of Arrays into leaves and back (pytrees).
#include "shell/lua_jit_tree.h"

#include <fmt/format.h>

#include <algorithm>

namespace shell {
namespace {

constexpr int kMaxTreeDepth = 32;

// path: the tables being flattened, outermost first (a table met again is a cycle).
Status flatten_at(lua_State* L, int idx, const std::string& what, Tree* tree,
                  std::vector<ArrayBox*>* leaves, int depth, std::vector<const void*>* path) {
  if (ArrayBox* a = to_udata<ArrayBox>(L, idx)) {
    tree->leaf = true;
    leaves->push_back(a);
    return eng::ok_status();
  }
  if (lua_type(L, idx) != LUA_TTABLE)
    return eng::invalid_argument("{} is {} (expected an Array or a table of Arrays)", what,
                                 luaL_typename(L, idx));
  if (depth >= kMaxTreeDepth)
    return eng::invalid_argument("{}: tables nested over {} deep", what, kMaxTreeDepth);
  idx = lua_absindex(L, idx);
  const void* self = lua_topointer(L, idx);
  if (std::find(path->begin(), path->end(), self) != path->end())
    return eng::invalid_argument("{} contains itself (a pytree must be a tree)", what);
  // Each level holds the table, a key and a value on the Lua stack: make room (Lua only
  // promises LUA_MINSTACK slots to a C function).
  if (!lua_checkstack(L, 4))
    return eng::invalid_argument("{}: no Lua stack left for tables nested {} deep", what, depth);
  path->push_back(self);
  tree->leaf = false;
  std::vector<TreeKey> keys;
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    TreeKey k;
    if (lua_isinteger(L, -2)) {
      k.i = lua_tointeger(L, -2);
    } else if (lua_type(L, -2) == LUA_TSTRING) {
      k.is_int = false;
      k.s = lua_tostring(L, -2);
    } else {
      const std::string t = luaL_typename(L, -2);
      lua_pop(L, 2);
      return eng::invalid_argument("{} has a key of type {}: keys must be integers or strings",
                                   what, t);
    }
    keys.push_back(std::move(k));
    lua_pop(L, 1);
  }
  std::sort(keys.begin(), keys.end(), [](const TreeKey& a, const TreeKey& b) {
    if (a.is_int != b.is_int) return a.is_int;
    return a.is_int ? a.i < b.i : a.s < b.s;
  });
  for (TreeKey& k : keys) {
    if (k.is_int) {
      lua_rawgeti(L, idx, k.i);
    } else {
      lua_pushlstring(L, k.s.data(), k.s.size());
      lua_rawget(L, idx);
    }
    Tree kid;
    Status st = flatten_at(L, -1, what + k.to_string(), &kid, leaves, depth + 1, path);
    lua_pop(L, 1);
    if (!st.ok()) return st;
    tree->kids.emplace_back(std::move(k), std::move(kid));
  }
  path->pop_back();
  return eng::ok_status();
}

}  // namespace

Status flatten(lua_State* L, int idx, const std::string& what, Tree* tree,
               std::vector<ArrayBox*>* leaves) {
  *tree = Tree{};
  std::vector<const void*> path;
  return flatten_at(L, idx, what, tree, leaves, 0, &path);
}

void unflatten(lua_State* L, const Tree& tree, int* next,
               const std::function<void(int)>& push_leaf) {
  if (tree.leaf) {
    push_leaf((*next)++);
    return;
  }
  // flatten() bounds a Tree's depth (kMaxTreeDepth); each level holds a table and a key.
  ENG_CHECK(lua_checkstack(L, 3), "unflatten: no Lua stack left");
  lua_createtable(L, 0, static_cast<int>(tree.kids.size()));
  for (const auto& [k, kid] : tree.kids) {
    unflatten(L, kid, next, push_leaf);
    if (k.is_int) {
      lua_rawseti(L, -2, k.i);
    } else {
      lua_pushlstring(L, k.s.data(), k.s.size());
      lua_insert(L, -2);
      lua_rawset(L, -3);
    }
  }
}

}  // namespace shell
