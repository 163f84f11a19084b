// shell/context.h: per-interpreter shell state reachable from every binding (db path, lazily opened store).
#pragma once

#include <lua.hpp>

#include <memory>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/frontend/session.h"
#include "engine/store/metrics_store.h"
#include "engine/train/config.h"

namespace eng {
class Trainer;
}

namespace shell {

struct ShellContext {
  std::string db_path = "shardlab.db";         // --db, $SHARDLAB_DB, or ./shardlab.db
  std::unique_ptr<eng::MetricsStore> store;    // opened on first use by open_store()
  bool color = false;                          // stdout is a tty (and colours are wanted)
  bool timing = true;                          // sl.timing: the REPL shows slow commands' times
  bool interactive = false;                    // the REPL is reading commands (not a script)
  std::vector<const eng::Trainer*> trainers;   // live Trainer userdata (lua_train.cpp keeps it)
  // The script's key=value arguments (`shardlab train.lua steps=5`): MaxText's command-line
  // overrides, applied by every sl.config after its own keys (shell/cli.cpp checks them first).
  std::vector<eng::ConfigOverride> arg_overrides;
  bool arg_overrides_applied = false;          // some sl.config applied them
  eng::frontend::Session session;              // sl.set_mesh's mesh, sl.jit traces, eager cache

  // Real compiles so far by the live trainers (%timeit tells a compiling first call apart).
  int64_t compiles() const;

  // The store, opened from db_path the first time (so `shardlab -e 'print(1)'` creates no file).
  eng::Result<eng::MetricsStore*> open_store();
};

// Stores ctx (not owned) in L's registry; context(L) returns it. Set before bindings run.
void set_context(lua_State* L, ShellContext* ctx);
ShellContext& context(lua_State* L);

}  // namespace shell
