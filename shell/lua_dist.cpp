// shell/lua_dist.cpp: JAX's process functions: sl.process_index(), sl.process_count(),
// sl.devices(), sl.local_devices() (engine/dist, docs/distributed.md); and Python's os.environ
// in Lua's os table, where XLA_FLAGS' --xla_force_host_platform_device_count sets the local
// device count until the devices are first listed (engine/dist/dist.h).
#include <lua.hpp>

#include <cstdlib>
#include <string>

#include "engine/dist/dist.h"
#include "engine/dist/local_devices.h"
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
  eng::dist::note_devices_in_use();  // the count is fixed from now on (JAX's backend started)
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

// os.environ[k]: getenv; os.environ[k] = v (a string, or nil to unset): setenv.
Result<int> environ_index(lua_State* L) {
  const char* v = lua_type(L, 2) == LUA_TSTRING ? std::getenv(lua_tostring(L, 2)) : nullptr;
  if (v) lua_pushstring(L, v);
  else lua_pushnil(L);
  return 1;
}
Result<int> environ_newindex(lua_State* L) {
  if (lua_type(L, 2) != LUA_TSTRING) return arg_error(L, 2, "os.environ", "key", "string");
  if (!lua_isnil(L, 3) && lua_type(L, 3) != LUA_TSTRING)
    return arg_error(L, 3, "os.environ", "value", "string");
  const std::string key = lua_tostring(L, 2);
  if (lua_isnil(L, 3)) unsetenv(key.c_str());
  else setenv(key.c_str(), lua_tostring(L, 3), 1);
  if (key == "XLA_FLAGS") ENG_RETURN_IF_ERROR(eng::dist::devices_from_xla_flags());
  return 0;
}

constexpr Function kDistFunctions[] = {
    {"process_index", lua_entry<process_index>, "sl.process_index() -> integer",
     "This process's index (0 without mpirun; the MPI rank under `mpirun -np P shardlab`)."},
    {"process_count", lua_entry<process_count>, "sl.process_count() -> integer",
     "Number of processes running this script (1 without mpirun)."},
    {"devices", lua_entry<devices>, "sl.devices() -> {{id=, process_index=}, ...}",
     "Every device of the job: process_count() x local devices per process (--local-devices,\n"
     "SHARDLAB_LOCAL_DEVICES, else XLA_FLAGS' --xla_force_host_platform_device_count, also when\n"
     "os.environ['XLA_FLAGS'] is set before the devices are first listed; default 1). A mesh\n"
     "of N devices puts devices [p*N/P, (p+1)*N/P) on process p, which runs only those."},
    {"local_devices", lua_entry<local_devices>, "sl.local_devices() -> {{id=, process_index=}, ...}",
     "The devices of this process (a slice of sl.devices())."},
};

}  // namespace

void open_lua_dist(lua_State* L, int sl) {
  add_functions(L, sl, "sl", kDistFunctions);
  if (lua_getglobal(L, "os") == LUA_TTABLE) {  // os.environ, Python's
    lua_newtable(L);
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, lua_entry<environ_index>);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, lua_entry<environ_newindex>);
    lua_setfield(L, -2, "__newindex");
    lua_setmetatable(L, -2);
    lua_setfield(L, -2, "environ");
  }
  lua_pop(L, 1);
}

}  // namespace shell
