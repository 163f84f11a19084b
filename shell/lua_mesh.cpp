// shell/lua_mesh.cpp: Lua bindings for meshes: sl.mesh and Mesh (sl.P is in lua_partition_spec.cpp).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/mesh/mesh.h"
#include "shell/bindings.h"
#include "shell/lua_binding.h"
#include "shell/lua_types.h"

namespace shell {

std::string mesh_label(const eng::Mesh& m) {
  std::vector<std::string> parts;
  for (int i = 0; i < m.num_axes(); ++i)
    if (m.axis_sizes()[i] > 1) parts.push_back(fmt::format("'{}': {}", m.axis_names()[i], m.axis_sizes()[i]));
  if (parts.empty()) return fmt::format("Mesh({} device{})", m.num_devices(), m.num_devices() == 1 ? "" : "s");
  return fmt::format("Mesh({}) ({} devices)", fmt::join(parts, ", "), m.num_devices());
}

namespace {

// sl.mesh{data=2, fsdp=-1, tensor=2, devices=8, mode="auto"}: MaxText's 12 axes, all kept.
Result<int> mesh(lua_State* L) {
  constexpr std::string_view fn = "sl.mesh";
  ENG_RETURN_IF_ERROR(arg_table(L, 1, fn, "options"));
  const std::vector<std::string>& axes = eng::maxtext_mesh_axes();
  std::vector<std::string> allowed = axes;
  allowed.insert(allowed.end(), {"devices", "mode"});
  ENG_RETURN_IF_ERROR(check_keys(L, 1, fn, allowed));
  std::vector<int64_t> sizes;
  std::string fill_axis;
  int64_t product = 1;
  for (const std::string& a : axes) {
    ENG_ASSIGN_OR_RETURN(std::optional<int64_t> v, field_int(L, 1, a.c_str(), fn));
    sizes.push_back(v.value_or(1));
    if (sizes.back() == -1) fill_axis = a;
    else if (sizes.back() >= 1 && __builtin_mul_overflow(product, sizes.back(), &product))
      return eng::invalid_argument("sl.mesh: the product of the axis sizes overflows at {}={}", a,
                                   sizes.back());
  }
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> devices, field_int(L, 1, "devices", fn));
  if (!devices && !fill_axis.empty())
    return eng::invalid_argument("sl.mesh: {}=-1 needs devices=N to fill it", fill_axis);
  ENG_ASSIGN_OR_RETURN(std::optional<std::string> mode, field_string(L, 1, "mode", fn));
  eng::AxisType type = eng::AxisType::kAuto;
  if (mode && *mode == "explicit") type = eng::AxisType::kExplicit;
  else if (mode && *mode != "auto")
    return eng::invalid_argument("sl.mesh: argument 'mode' expected \"auto\" or \"explicit\", got \"{}\"",
                                 *mode);
  ENG_ASSIGN_OR_RETURN(eng::Mesh m, with_context(fn, eng::Mesh::from_parallelism(
                                            axes, sizes, devices.value_or(product), type)));
  push_udata(L, std::move(m));
  return 1;
}


Result<int> mesh_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Mesh * m, arg_udata<eng::Mesh>(L, 1, "Mesh:__tostring"));
  lua_pushstring(L, m->to_string().c_str());
  return 1;
}
Result<int> mesh_eq(lua_State* L) {
  eng::Mesh *a = to_udata<eng::Mesh>(L, 1), *b = to_udata<eng::Mesh>(L, 2);
  lua_pushboolean(L, a && b && *a == *b);
  return 1;
}
Result<int> mesh_devices(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Mesh * m, arg_udata<eng::Mesh>(L, 1, "Mesh:devices"));
  lua_pushinteger(L, m->num_devices());
  return 1;
}
Result<int> mesh_axis_names(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Mesh * m, arg_udata<eng::Mesh>(L, 1, "Mesh:axis_names"));
  push_strings(L, m->axis_names());
  return 1;
}
// __tostring of m:shape(): the axes in mesh order (a Lua table has none; `order` in the
// metatable keeps it), as JAX's mesh.shape is ordered.
Result<int> shape_tostring(lua_State* L) {
  if (lua_type(L, 1) != LUA_TTABLE) return arg_error(L, 1, "MeshShape:__tostring", "", "table");
  std::vector<std::string> parts;
  lua_getmetatable(L, 1);
  if (push_field(L, -1, "order") == LUA_TTABLE)
    for (lua_Integer i = 1; lua_rawgeti(L, -1, i) == LUA_TSTRING; ++i) {
      std::string axis = lua_tostring(L, -1);
      lua_pop(L, 1);
      push_field(L, 1, axis.c_str());
      parts.push_back(fmt::format("{} = {}", axis, lua_tointeger(L, -1)));
      lua_pop(L, 1);
    }
  lua_settop(L, 1);
  lua_pushstring(L, fmt::format("{{{}}}", fmt::join(parts, ", ")).c_str());
  return 1;
}

// m.shape(m), i.e. m:shape(): the shape table is callable and returns itself.
Result<int> shape_call(lua_State* L) {
  lua_settop(L, 1);
  return 1;
}

Result<int> mesh_shape(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Mesh * m, arg_udata<eng::Mesh>(L, 1, "Mesh:shape"));
  lua_createtable(L, 0, m->num_axes());
  for (int i = 0; i < m->num_axes(); ++i) {
    lua_pushinteger(L, m->axis_sizes()[i]);
    lua_setfield(L, -2, m->axis_names()[i].c_str());
  }
  lua_createtable(L, 0, 3);  // metatable: the order, and printing in it
  lua_createtable(L, m->num_axes(), 0);
  for (int i = 0; i < m->num_axes(); ++i) {
    lua_pushstring(L, m->axis_names()[i].c_str());
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "order");
  lua_pushcfunction(L, lua_entry<shape_tostring>);
  lua_setfield(L, -2, "__tostring");
  lua_pushstring(L, "MeshShape");
  lua_setfield(L, -2, "__name");
  lua_pushcfunction(L, lua_entry<shape_call>);  // m:shape() as well as JAX's m.shape['i']
  lua_setfield(L, -2, "__call");
  lua_setmetatable(L, -2);
  return 1;
}

// m.shape, JAX's mesh.shape (the axis sizes by name); the only property of a Mesh.
Result<int> mesh_property(lua_State* L) {
  if (std::string_view(luaL_optstring(L, 2, "")) != "shape") {
    lua_pushnil(L);
    return 1;
  }
  lua_settop(L, 1);
  return mesh_shape(L);
}
Result<int> mesh_size(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Mesh * m, arg_udata<eng::Mesh>(L, 1, "Mesh:size"));
  ENG_ASSIGN_OR_RETURN(std::string axis, arg_string(L, 2, "Mesh:size", "axis"));
  if (!m->has_axis(axis))
    return eng::invalid_argument("Mesh:size: no axis '{}' in {}", axis, m->to_string());
  lua_pushinteger(L, m->axis_size(axis));
  return 1;
}
Result<int> mesh_mode(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Mesh * m, arg_udata<eng::Mesh>(L, 1, "Mesh:mode"));
  lua_pushstring(L, m->axis_type() == eng::AxisType::kExplicit ? "explicit" : "auto");
  return 1;
}


constexpr Function kMeshFunctions[] = {
    {"mesh", lua_entry<mesh>,
     "sl.mesh{data=2, fsdp=-1, tensor=2, devices=8, mode=\"auto\"} -> Mesh",
     "A device mesh over MaxText's 12 axes (diloco, data, stage, fsdp, fsdp_transpose, context,\n"
     "  context_usp_ulysses, context_autoregressive, tensor, tensor_sequence, expert,\n"
     "  autoregressive); unnamed axes have size 1 and are kept, as in MaxText. One axis may be -1:\n"
     "  it is filled so the sizes multiply to `devices` (default: their product). mode \"auto\"\n"
     "  (default) or \"explicit\" sets the axis types."},
};

constexpr Method kMeshMethods[] = {
    {"devices", lua_entry<mesh_devices>, "m:devices() -> integer", "Number of devices."},
    {"axis_names", lua_entry<mesh_axis_names>, "m:axis_names() -> {string}",
     "Axis names, major to minor."},
    {"size", lua_entry<mesh_size>, "m:size(axis) -> integer", "Size of one axis."},
    {"mode", lua_entry<mesh_mode>, "m:mode() -> string", "\"auto\" or \"explicit\"."},
};


}  // namespace

void open_lua_mesh(lua_State* L, int sl) {
  static constexpr const char* kMeshProperties[] = {"shape"};
  define_type(L, {"Mesh",
                  "A named device mesh (jax.sharding.Mesh); prints like JAX. m.shape: the axis\n"
                  "  sizes by name (m.shape['x'], as JAX's mesh.shape; m:shape() also works).",
                  lua_entry<mesh_tostring>, lua_entry<mesh_eq>, udata_gc<eng::Mesh>, kMeshMethods,
                  lua_entry<mesh_property>, kMeshProperties});
  add_functions(L, sl, "sl", kMeshFunctions);
}

}  // namespace shell
