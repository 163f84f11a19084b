// shell/bindings.h: the Lua API (global `sl`, also `require "shardlab"`), one open function per engine module.
//
// To add a module (e.g. the trainer): write shell/lua_train.cpp with
//   void open_lua_train(lua_State* L, int sl) { add_functions(L, sl, "sl", kTrainFunctions); ... }
// using the framework in shell/lua_binding.h, declare it here, and add one line to kModules in
// bindings.cpp. Every function and method needs a docstring (Function::signature and ::doc).
#pragma once

#include <lua.hpp>

#include <span>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/train/config.h"

namespace shell {

struct ShellContext;

// Each opens one module's bindings into the `sl` table at stack index `sl`.
void open_lua_shell(lua_State* L, int sl);  // sl.pretty, sl.help, sl.timing, ..., global who()
void open_lua_store(lua_State* L, int sl);  // sl.sql
void open_lua_mesh(lua_State* L, int sl);   // sl.mesh and the Mesh type
void open_lua_partition_spec(lua_State* L, int sl);  // sl.P and the PartitionSpec type
void open_lua_config(lua_State* L, int sl);    // sl.config, sl.config_keys and Config
void open_lua_train(lua_State* L, int sl);     // sl.trainer, Trainer and StepHandle
void open_lua_compiled(lua_State* L, int sl);  // the Compiled type (t:compile())
void open_lua_pipeline(lua_State* L, int sl);  // sl.pipeline_schedule (lua_pipeline.cpp)
void open_lua_plot(lua_State* L, int sl);   // the `plot` module (also sl.plot): spark, line, save, show
void open_lua_dist(lua_State* L, int sl);  // sl.process_index, process_count, devices, local_devices
void open_lua_sharding(lua_State* L, int sl);  // sl.rules, sl.logical_to_mesh, sl.visualize, ...
void open_lua_runs(lua_State* L, int sl);   // sl.runs, sl.run
void open_lua_search(lua_State* L, int sl);  // sl.search (lua_search.cpp)
void open_lua_tree_util(lua_State* L, int sl);  // sl.tree_util, sl.tree (jax.tree_util's)

// Creates `sl`, opens every module, sets the global and package.loaded["shardlab"].
// Must run inside a protected call (it uses raising Lua API calls).
void open_shardlab(lua_State* L, ShellContext* ctx);
// An uncaught error is ending the script (or notebook) with `error`: every run a live trainer
// records ends FAILED (lua_shell.cpp), unless Ctrl-C or SIGTERM ended it (then KILLED).
void fail_open_runs(lua_State* L, const std::string& error);
// The script's arguments of the form key=value (a config key: letters, digits, '_'), as
// MaxText-style overrides every sl.config applies (ShellContext::arg_overrides); other
// arguments are the script's own. Errors (an unknown key, a value of the wrong type) name the
// argument, so `shardlab train.lua stesp=5` fails before the script runs.
eng::Result<std::vector<eng::ConfigOverride>> script_config_overrides(std::span<char* const> args);
// Records the current global names as the system's (who() hides them); open_shardlab calls it.
void remember_system_globals(lua_State* L);

}  // namespace shell
