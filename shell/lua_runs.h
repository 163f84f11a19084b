// shell/lua_runs.h: runs as Lua values (sl.runs, sl.run, t.run), from the metrics store.
#pragma once

#include <lua.hpp>
#include <string>

#include "engine/base/status.h"
#include "engine/store/metrics_store.h"

namespace shell {

// Pushes the run `id` (a run_id, or a unique name) as a table: its runs columns, then params,
// tags and metrics (latest value per key) as {key = value}, steps and compilations as arrays of
// rows. Errors name the id when no run matches.
eng::Result<int> push_run(lua_State* L, eng::MetricsStore& store, const std::string& id,
                          std::string_view fn);

}  // namespace shell
