// shell/bindings.cpp: the module table that builds `sl`, and the shell context behind every binding.
#include "shell/bindings.h"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/train/trainer.h"
#include "shell/context.h"
#include "shell/interrupt.h"
#include "shell/lua_array.h"
#include "shell/lua_binding.h"

namespace shell {
namespace {

constexpr const char* kContextKey = "shardlab.context";

// One entry per engine module, in the order they are opened (commands as data).
struct Module {
  const char* name;                   // for error messages
  void (*open)(lua_State* L, int sl); // adds the module's functions and types to `sl`
};
constexpr Module kModules[] = {
    {"shell", open_lua_shell},
    {"store", open_lua_store},
    {"mesh", open_lua_mesh},
    {"partition_spec", open_lua_partition_spec},
    {"config", open_lua_config},
    {"train", open_lua_train},
    {"compiled", open_lua_compiled},
    {"pipeline", open_lua_pipeline},
    {"sharding", open_lua_sharding},
    {"plot", open_lua_plot},
    {"runs", open_lua_runs},
    {"search", open_lua_search},
    {"array", open_lua_array},  // users' own programs: make_mesh, arrays, numpy, jit
    {"dist", open_lua_dist},    // processes under mpirun (engine/dist)
    {"tree_util", open_lua_tree_util},  // jax.tree_util over Lua tables
};

}  // namespace

eng::Result<eng::MetricsStore*> ShellContext::open_store() {
  if (!store) {
    ENG_ASSIGN_OR_RETURN(store, eng::MetricsStore::open(db_path));
    store->set_interrupt_check(shell_interrupt_requested);  // Ctrl-C stops a long sl.sql
  }
  return store.get();
}

int64_t ShellContext::compiles() const {
  int64_t n = 0;
  for (const eng::Trainer* t : trainers) n += t->num_compiles();
  return n;
}

void set_context(lua_State* L, ShellContext* ctx) {
  lua_pushlightuserdata(L, ctx);
  lua_setfield(L, LUA_REGISTRYINDEX, kContextKey);
}

ShellContext& context(lua_State* L) {
  lua_getfield(L, LUA_REGISTRYINDEX, kContextKey);
  auto* ctx = static_cast<ShellContext*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  ENG_CHECK(ctx != nullptr, "shell: no ShellContext registered in this lua_State");
  return *ctx;
}

void open_shardlab(lua_State* L, ShellContext* ctx) {
  set_context(L, ctx);
  lua_newtable(L);
  int sl = lua_gettop(L);
  lua_getfield(L, LUA_REGISTRYINDEX, "shardlab.doc");  // sl.doc: the docstring registry
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "shardlab.doc");
  }
  lua_setfield(L, sl, "doc");
  for (const Module& m : kModules) m.open(L, sl);

  // ?sl lists every sl.* binding with its signature.
  std::string summary = "sl: the shardlab Lua API (also require \"shardlab\")";
  lua_getfield(L, sl, "doc");
  std::vector<std::string> lines;
  lua_pushnil(L);
  while (lua_next(L, -2) != 0) {
    if (lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) == LUA_TSTRING) {
      std::string key = lua_tostring(L, -2), text = lua_tostring(L, -1);
      if (key.rfind("sl.", 0) == 0) lines.push_back("  " + text.substr(0, text.find('\n')));
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  std::sort(lines.begin(), lines.end());
  for (const std::string& l : lines) summary += "\n" + l;
  summary += "\nType ?name for details, e.g. ?sl.mesh";
  set_doc(L, sl, "sl", summary);

  lua_pushvalue(L, sl);
  lua_setglobal(L, "sl");
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_pushvalue(L, sl);
  lua_setfield(L, -2, "shardlab");
  lua_pop(L, 2);
  remember_system_globals(L);  // who() lists only what the user defines after this
}

}  // namespace shell
