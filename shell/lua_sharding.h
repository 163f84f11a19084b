// shell/lua_sharding.h: sharding values shared with the Trainer bindings (lua_train.cpp):
// ShardingTable and AuditReport values, the device-grid renderer behind sl.visualize and
// t:visualize, and the logical_axis_rules config value from a Lua table.
#pragma once

#include <string>

#include "engine/sharding/logical_rules.h"
#include "engine/sharding/partition_spec.h"
#include "engine/train/config.h"
#include "engine/train/inspect.h"
#include "shell/lua_binding.h"

namespace shell {

// What sl.visualize / sl.typeof were given: a row of t:shardings(), (shape, NamedSharding) or
// (shape, PartitionSpec, Mesh). `next` is the index of the first argument after them.
struct ShapedSharding {
  eng::Shape shape;
  eng::NamedSharding sharding;
  std::string dtype = "f32";
  std::string label;  // the row's path, or ""
  int next = 0;
};

// The grid of x (sl.visualize's text); reads its options table ({dims=, color=}) at `opts`.
Result<std::string> render_sharding(lua_State* L, const ShapedSharding& x, int opts,
                                    std::string_view fn);
void push_audit_report(lua_State* L, const eng::ReplicationReport& r);  // an AuditReport table
void push_sharding_table(lua_State* L, eng::ShardingTable table);       // a ShardingTable userdata
// The same with the logical-axis rule that fired for each dim of each row (a "rules" column and
// field), resolved with `rules` on the table's mesh (eng::explain_logical_to_mesh); with
// show_skipped, the table also prints the rules of each dim's name that did not fire, and why.
void push_sharding_table(lua_State* L, eng::ShardingTable table, const eng::LogicalAxisRules& rules,
                         bool show_skipped);
// t:shardings()'s value: the rules `config` compiles with (compile_options_from_config), and
// the options table at opts_idx ({skipped = true}; none or nil: fired rules only).
Result<int> push_trainer_sharding_table(lua_State* L, eng::ShardingTable table,
                                        const eng::Config& config, int opts_idx,
                                        std::string_view fn);

// logical_axis_rules from {{"embed", {"fsdp"}}, {"layers", "stage"}} (or a sl.rules() list),
// as the typed value the Config holds (Config::set_logical_axis_rules).
Result<eng::LogicalAxisRules> rules_from_table(lua_State* L, int idx, std::string_view fn);

}  // namespace shell
