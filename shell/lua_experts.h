// shell/lua_experts.h: t:experts(), the mixture-of-experts load of the last step as a Lua
// value that prints as a table with a sparkline per layer (lua_experts.cpp).
#pragma once

#include "engine/train/trainer.h"
#include "shell/lua_binding.h"

namespace shell {

// Pushes {step, capacity, layers = {{tokens = {...}, dropped = {...}}, ...}, text}; prints as
// text. An error names the function when the model has no experts or no step has run.
Result<int> push_trainer_experts(lua_State* L, eng::Trainer& t);

}  // namespace shell
