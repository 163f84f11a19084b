// shell/lua_jit.h: the Jitted userdata (engine/frontend/jit_function.h) shared by
// shell/lua_jit.cpp (calling transformed functions: reading arguments, calling the Lua
// function on tracers) and shell/lua_jit_api.cpp (sl.jit, sl.grad, sl.vmap, ...: the
// constructors that read their options). Internal to the shell.
#pragma once

#include <memory>

#include "engine/frontend/jit_function.h"
#include "shell/lua_binding.h"
#include "shell/lua_jit_tree.h"

namespace shell {

namespace fe = eng::frontend;

using fe::Transform;
// A Jitted userdata is the engine's JitFunction (options, per-signature cache, last miss).
using JitBox = fe::JitFunction;
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

// If the call's last argument is {out_sharding = ...} (auto_axes) or {in_sharding = ...}
// (explicit_axes), replaces the Jitted at slot 1 by its variant with those specs and pops the
// table (lua_jit_api.cpp); false when the call has no such table.
Result<bool> use_call_sharding(lua_State* L);

// Defines the Jitted type (callable; :lower, :cache_info) and the Lowered type.
void define_jit_types(lua_State* L);
// A shard_map'd function called on concrete arrays outside sl.jit: run eagerly
// (shell/lua_shard_map_eager.cpp; engine/frontend/eager_manual.h).
Result<int> eager_shard_map(lua_State* L, const JitBox& j, int fidx, int first, int n,
                            const fe::CallArgs& args);
// sl.lax.scan and sl.make_jaxpr (shell/lua_scan_jaxpr.cpp); open_lua_jit calls it.
void open_lua_scan(lua_State* L, int sl);

}  // namespace shell
