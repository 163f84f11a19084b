// shell/lua_mesh_context.cpp: what sl.set_mesh (and sl.use_mesh without a function) returns,
// and numpy's np.array of devices (below).
// JAX's `set_mesh` object: the mesh is set at once (the global setter), and the object's
// __close restores the mesh that was current before, so Lua 5.4's to-be-closed variable is
// Python's `with jax.set_mesh(mesh):` (docs/frontend.md):
//   do local _ <close> = sl.set_mesh(m); ... end   -- the previous mesh again after `end`
#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/frontend/device_grid.h"
#include "shell/lua_array.h"

namespace shell {

struct MeshContext {
  std::optional<eng::Mesh> prev;  // the mesh __close restores (none: one device)
  std::optional<eng::Mesh> now;   // the mesh set
  bool closed = false;
};
template <>
struct LuaType<MeshContext> {
  static constexpr const char* kName = "set_mesh";
};

namespace {

Result<int> context_close(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(MeshContext * c, arg_udata<MeshContext>(L, 1, "set_mesh:__close"));
  if (!c->closed) session(L).set_mesh(c->prev);  // a second close changes nothing
  c->closed = true;
  return 0;
}

Result<int> context_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(MeshContext * c, arg_udata<MeshContext>(L, 1, "set_mesh:__tostring"));
  const std::string s =
      fmt::format("set_mesh({})", c->now ? c->now->to_string() : std::string("None"));
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

}  // namespace

void push_mesh_context(lua_State* L, std::optional<eng::Mesh> prev) {
  if (luaL_getmetatable(L, LuaType<MeshContext>::kName) == LUA_TNIL) {
    lua_pop(L, 1);
    define_type(L, {"set_mesh",
                    "What sl.set_mesh returns: the mesh is already set; closing it (a Lua <close>\n"
                    "  variable: `do local _ <close> = sl.set_mesh(m) ... end`, Python's `with\n"
                    "  jax.set_mesh(m):`) restores the mesh that was current before.",
                    lua_entry<context_tostring>, nullptr, udata_gc<MeshContext>, {}});
    luaL_getmetatable(L, LuaType<MeshContext>::kName);
    lua_pushcfunction(L, lua_entry<context_close>);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
  push_udata(L, MeshContext{std::move(prev), session(L).mesh_set(), false});
}

// ---- np.array(devices): numpy's object array of devices (engine/frontend/device_grid.h) ----

template <>
struct LuaType<eng::frontend::DeviceGrid> {
  static constexpr const char* kName = "ndarray";
};

namespace {

using Grid = eng::frontend::DeviceGrid;

Result<int> grid_reshape(lua_State* L) {
  constexpr std::string_view fn = "ndarray:reshape";
  ENG_ASSIGN_OR_RETURN(Grid * g, arg_udata<Grid>(L, 1, fn));
  std::vector<int64_t> dims;
  if (lua_type(L, 2) == LUA_TTABLE) {
    ENG_ASSIGN_OR_RETURN(dims, read_shape_table(L, 2, fn));
  }
  for (int i = 2; lua_type(L, 2) != LUA_TTABLE && i <= lua_gettop(L); ++i) {
    ENG_ASSIGN_OR_RETURN(int64_t d, arg_int(L, i, fn, "shape"));
    dims.push_back(d);
  }
  ENG_ASSIGN_OR_RETURN(Grid r, g->reshape(std::move(dims)));
  push_udata(L, std::move(r));
  return 1;
}

Result<int> grid_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(Grid * g, arg_udata<Grid>(L, 1, "ndarray:__tostring"));
  lua_pushstring(L, g->repr().c_str());
  return 1;
}

Result<int> grid_property(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(Grid * g, arg_udata<Grid>(L, 1, "ndarray"));
  const std::string key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
  if (key == "shape") {
    lua_createtable(L, static_cast<int>(g->shape.size()), 0);
    for (size_t k = 0; k < g->shape.size(); ++k) {
      lua_pushinteger(L, g->shape[k]);
      lua_rawseti(L, -2, static_cast<lua_Integer>(k) + 1);
    }
  } else if (key == "ndim" || key == "size") {
    lua_pushinteger(L, static_cast<lua_Integer>(key == "ndim" ? g->shape.size() : g->ids.size()));
  } else {
    lua_pushnil(L);
  }
  return 1;
}

constexpr Method kGridMethods[] = {
    {"reshape", lua_entry<grid_reshape>, "a:reshape(d0, d1, ...) -> ndarray",
     "numpy's reshape of the devices, row-major (one dim may be -1)."},
};
constexpr const char* kGridProperties[] = {"shape", "ndim", "size"};

}  // namespace

void push_device_grid(lua_State* L, std::vector<int64_t> ids, std::vector<int64_t> shape) {
  if (luaL_getmetatable(L, LuaType<Grid>::kName) == LUA_TNIL)
    define_type(L, {"ndarray",
                    "numpy's object array of devices (sl.numpy.array of sl.devices()' tables):\n"
                    "  .shape, .ndim, .size, :reshape(...); sl.sharding.Mesh takes it.",
                    lua_entry<grid_tostring>, nullptr, udata_gc<Grid>, kGridMethods,
                    lua_entry<grid_property>, kGridProperties});
  lua_pop(L, 1);
  push_udata(L, Grid{std::move(ids), std::move(shape)});
}

const Grid* to_device_grid(lua_State* L, int idx) { return to_udata<Grid>(L, idx); }

}  // namespace shell
