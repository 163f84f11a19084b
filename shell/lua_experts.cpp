// shell/lua_experts.cpp: t:experts() (shell/lua_experts.h): engine/train/expert_load.h's
// numbers as a Lua value that prints as its table.
#include "shell/lua_experts.h"

#include "engine/train/expert_load.h"

namespace shell {

namespace {

int experts_tostring(lua_State* L) {
  lua_getfield(L, 1, "text");
  return 1;
}

}  // namespace

Result<int> push_trainer_experts(lua_State* L, eng::Trainer& t) {
  constexpr std::string_view fn = "Trainer:experts";
  ENG_ASSIGN_OR_RETURN(eng::ExpertLoad load, eng::expert_load(t, fn));
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, load.step);
  lua_setfield(L, -2, "step");
  lua_pushinteger(L, load.capacity);
  lua_setfield(L, -2, "capacity");
  lua_createtable(L, static_cast<int>(load.layers.size()), 0);
  for (const auto& [l, layer] : load.layers) {
    lua_createtable(L, 0, 2);
    for (const auto& [key, xs] : {std::pair{"tokens", &layer.tokens}, {"dropped", &layer.dropped}}) {
      lua_createtable(L, static_cast<int>(xs->size()), 0);
      for (size_t e = 0; e < xs->size(); ++e) {
        lua_pushnumber(L, (*xs)[e]);
        lua_rawseti(L, -2, static_cast<lua_Integer>(e + 1));
      }
      lua_setfield(L, -2, key);
    }
    lua_rawseti(L, -2, l + 1);
  }
  lua_setfield(L, -2, "layers");
  lua_pushstring(L, load.text.c_str());
  lua_setfield(L, -2, "text");
  if (luaL_newmetatable(L, "shardlab.ExpertLoad")) {
    lua_pushcfunction(L, experts_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_setmetatable(L, -2);
  return 1;
}

}  // namespace shell
