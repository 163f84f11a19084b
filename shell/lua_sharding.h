// shell/lua_sharding.h: sharding inspection shared with the Trainer bindings (lua_train.cpp):
// the bodies of t:shardings(), t:audit() and t:visualize(), and the logical_axis_rules
// config value from a Lua table.
#pragma once

#include <string>

#include "engine/sharding/partition_spec.h"
#include "engine/train/trainer.h"
#include "shell/lua_binding.h"

namespace shell {

// Each reads its own arguments from index 2 on (index 1 is the trainer) and names `fn` in
// its errors.
Result<int> push_trainer_shardings(lua_State* L, const eng::Trainer& t);  // t:shardings([pat])
Result<int> push_trainer_audit(lua_State* L, const eng::Trainer& t);      // t:audit([tol])
Result<int> push_trainer_visualize(lua_State* L, const eng::Trainer& t);  // t:visualize(p [, o])

// logical_axis_rules from {{"embed", {"fsdp"}}, {"layers", "stage"}} (or a sl.rules() list),
// as the typed value the Config holds (Config::set_logical_axis_rules).
Result<eng::LogicalAxisRules> rules_from_table(lua_State* L, int idx, std::string_view fn);

}  // namespace shell
