// shell/lua_pipeline.h: the pipeline schedule as a Lua value (t:pipeline(), c:pipeline()) and
// the per-collective rows of c.cost (lua_pipeline.cpp).
#pragma once

#include <optional>

#include "engine/compile/executable.h"
#include "engine/model/pipeline_schedule.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"
#include "shell/lua_binding.h"
#include "shell/lua_types.h"

namespace shell {

// t:pipeline([{measure = bool}]) -> Pipeline (options at stack index 2, may be none) and
// c:pipeline() -> Pipeline: push the value; errors name the function.
Result<int> push_trainer_pipeline(lua_State* L, eng::Trainer& t);
Result<int> push_compiled_pipeline(lua_State* L, const CompiledBox& c);

// c.cost.collectives: one row per (op, mesh axes) of the per-device program: count, bytes one
// device receives per step, and how many of them run inside pipeline iterations.
void push_collective_rows(lua_State* L, const eng::Program& p);

}  // namespace shell
