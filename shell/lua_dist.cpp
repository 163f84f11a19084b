// shell/lua_dist.cpp: JAX's process functions: sl.process_index(), sl.process_count(),
// sl.devices(), sl.local_devices() (engine/dist, docs/distributed.md).
#include <lua.hpp>

#include "engine/dist/dist.h"
#include "shell/bindings.h"
#include "shell/lua_binding.h"

namespace shell {
namespace {

Result<int> process_index(lua_State* L) {
  lua_pushinteger(L, eng::dist::process().index);
  return 1;
}

Result<int> process_count(lua_State* L) {
  lua_pushinteger(L, eng::dist::process().count);
  return 1;
}

// Devices [lo, hi) as a list of {id = d, process_index = p} (JAX's Device.id, .process_index).
void push_devices(lua_State* L, int64_t lo, int64_t hi) {
  const eng::dist::Process& p = eng::dist::process();
  lua_createtable(L, static_cast<int>(hi - lo), 0);
  for (int64_t d = lo; d < hi; ++d) {
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, d);
    lua_setfield(L, -2, "id");
    lua_pushinteger(L, d / p.local_devices);
    lua_setfield(L, -2, "process_index");
    lua_rawseti(L, -2, d - lo + 1);
  }
}

Result<int> devices(lua_State* L) {
  const eng::dist::Process& p = eng::dist::process();
  push_devices(L, 0, static_cast<int64_t>(p.count) * p.local_devices);
  return 1;
}

Result<int> local_devices(lua_State* L) {
  const eng::dist::Process& p = eng::dist::process();
  push_devices(L, static_cast<int64_t>(p.index) * p.local_devices,
               static_cast<int64_t>(p.index + 1) * p.local_devices);
  return 1;
}

constexpr Function kDistFunctions[] = {
    {"process_index", lua_entry<process_index>, "sl.process_index() -> integer",
     "This process's index (0 without mpirun; the MPI rank under `mpirun -np P shardlab`)."},
    {"process_count", lua_entry<process_count>, "sl.process_count() -> integer",
     "Number of processes running this script (1 without mpirun)."},
    {"devices", lua_entry<devices>, "sl.devices() -> {{id=, process_index=}, ...}",
     "Every device of the job: process_count() x local devices per process (--local-devices,\n"
     "SHARDLAB_LOCAL_DEVICES; default 1). A mesh of N devices puts devices\n"
     "[p*N/P, (p+1)*N/P) on process p, which runs only those."},
    {"local_devices", lua_entry<local_devices>, "sl.local_devices() -> {{id=, process_index=}, ...}",
     "The devices of this process (a slice of sl.devices())."},
};

}  // namespace

void open_lua_dist(lua_State* L, int sl) { add_functions(L, sl, "sl", kDistFunctions); }

}  // namespace shell
