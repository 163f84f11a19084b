// shell/lua_shard_map_eager.cpp: a shard_map'd function called on concrete arrays outside
// sl.jit runs eagerly, as JAX's (engine/frontend/eager_manual.h has the semantics): the Lua
// body runs once on per-device values, each op it applies runs at once.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "engine/frontend/eager_manual.h"
#include "shell/lua_array.h"
#include "shell/lua_jit.h"
#include "shell/lua_jit_tree.h"

namespace shell {

Result<int> eager_shard_map(lua_State* L, const JitBox& j, int fidx, int first, int n,
                            const fe::CallArgs& args) {
  std::shared_ptr<fe::Trace> em = fe::eager_trace(j.name(), args.mesh);
  ENG_ASSIGN_OR_RETURN(std::vector<fe::Value> blocks, fe::eager_arguments(session(L), em, args, j.name()));
  const int base = lua_gettop(L);
  if (!lua_checkstack(L, n + 8)) return eng::invalid_argument("{}: no Lua stack left", j.name());
  lua_pushvalue(L, fidx);
  for (int i = 0; i < n; ++i) {
    if (!args.trees[static_cast<size_t>(i)]) {
      lua_pushvalue(L, first + i);
      continue;
    }
    int next = args.first_leaf[static_cast<size_t>(i)];
    unflatten(L, *args.trees[static_cast<size_t>(i)], &next,
              [&](int k) { push_array(L, blocks[static_cast<size_t>(k)]); });
  }
  session(L).push_trace(em);
  const int rc = lua_pcall(L, n, LUA_MULTRET, 0);
  session(L).pop_trace();
  if (rc != LUA_OK) {
    std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error object)";
    lua_settop(L, base);
    return eng::invalid_argument("{}", msg);
  }
  std::vector<Tree> trees;
  std::vector<fe::Value> results;
  for (int k = base + 1; k <= lua_gettop(L); ++k) {
    Tree t;
    std::vector<ArrayBox*> boxes;
    Status st = flatten(
        L, k, fmt::format("{}: the function must return Arrays; result {}", j.name(), k - base), &t,
        &boxes);
    if (!st.ok()) {
      lua_settop(L, base);
      return st;
    }
    for (ArrayBox* b : boxes) results.push_back(*b);
    trees.push_back(std::move(t));
  }
  lua_settop(L, base);
  ENG_ASSIGN_OR_RETURN(std::vector<fe::ArrayRef> outs,
                       fe::eager_results(session(L), em, results, j.options().out_specs, j.name()));
  int next = 0;
  for (const Tree& t : trees)
    unflatten(L, t, &next, [&](int k) { push_concrete(L, outs[static_cast<size_t>(k)]); });
  return static_cast<int>(trees.size());
}

}  // namespace shell
