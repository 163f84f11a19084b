// shell/lua_mesh.cpp: Lua bindings for meshes: sl.mesh and Mesh (sl.P is in lua_partition_spec.cpp).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/mesh/mesh.h"
#include "shell/bindings.h"
#include "shell/lua_array.h"
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
  lua_pushstring(L, m->all_axes(eng::AxisType::kExplicit) ? "explicit"
                   : m->any_axis(eng::AxisType::kExplicit) ? "mixed"
                                                            : "auto");
  return 1;
}

// An axis type by name ("Auto", "Explicit"; sl.AxisType's strings).
Result<eng::AxisType> axis_type_named(const std::string& s, std::string_view fn) {
  if (s == "Auto") return eng::AxisType::kAuto;
  if (s == "Explicit") return eng::AxisType::kExplicit;
  return eng::invalid_argument("{}: axis type '{}' is not Auto or Explicit", fn, s);
}

// The mesh (names, sizes, types) of an AbstractMesh table (sl.AbstractMesh's or
// sl.get_abstract_mesh's).
Result<eng::Mesh> abstract_mesh_at(lua_State* L, int idx, std::string_view fn) {
  if (lua_type(L, idx) != LUA_TTABLE) return arg_error(L, idx, fn, "mesh", "AbstractMesh");
  push_field(L, idx, "axis_names");
  Result<std::vector<std::string>> names = arg_string_list(L, lua_gettop(L), fn, "axis_names");
  lua_pop(L, 1);
  if (!names.ok()) return names.status();
  std::vector<int64_t> sizes;
  std::vector<eng::AxisType> types;
  const int ts = push_field(L, idx, "axis_sizes");
  const int tt = push_field(L, idx, "axis_types");
  if (ts != LUA_TTABLE || tt != LUA_TTABLE) {
    lua_pop(L, 2);
    return eng::invalid_argument("{}: the mesh must be an AbstractMesh (sl.AbstractMesh's) with "
                                 "axis_sizes and axis_types", fn);
  }
  for (lua_Integer i = 1; i <= static_cast<lua_Integer>(names->size()); ++i) {
    lua_rawgeti(L, -2, i);
    lua_rawgeti(L, -2, i);
    int ok = 0;
    const lua_Integer n = lua_tointegerx(L, -2, &ok);
    const char* t = lua_tostring(L, -1);
    const std::string type = t ? t : "Auto";
    lua_pop(L, 2);
    if (!ok || n < 1) {
      lua_pop(L, 2);
      return eng::invalid_argument("{}: axis_sizes[{}] must be a positive integer", fn, i);
    }
    Result<eng::AxisType> at = axis_type_named(type, fn);
    if (!at.ok()) {
      lua_pop(L, 2);
      return at.status();
    }
    sizes.push_back(n);
    types.push_back(*at);
  }
  lua_pop(L, 2);
  return with_context(fn, eng::Mesh::create(*names, sizes, types));
}

// sl.AbstractMesh(axis_sizes, axis_names [, axis_types]) (jax.sharding.AbstractMesh): a
// mesh's shape, names and types without devices; types Auto by default, as JAX's.
Result<int> abstract_mesh(lua_State* L) {
  constexpr std::string_view fn = "sl.AbstractMesh";
  ENG_ASSIGN_OR_RETURN(eng::Shape shape, read_dims(L, 1, fn));
  const std::vector<int64_t> sizes = shape.dims();
  std::vector<std::string> names;
  if (lua_type(L, 2) == LUA_TSTRING) {
    names.push_back(lua_tostring(L, 2));
  } else {
    ENG_ASSIGN_OR_RETURN(names, arg_string_list(L, 2, fn, "axis_names"));
  }
  std::vector<eng::AxisType> types(names.size(), eng::AxisType::kAuto);
  if (!lua_isnoneornil(L, 3)) {
    ENG_ASSIGN_OR_RETURN(std::vector<std::string> t, arg_string_list(L, 3, fn, "axis_types"));
    if (t.size() != names.size())
      return eng::invalid_argument("{}: {} axis_types for {} axes", fn, t.size(), names.size());
    for (size_t i = 0; i < t.size(); ++i) {
      ENG_ASSIGN_OR_RETURN(types[i], axis_type_named(t[i], fn));
    }
  }
  ENG_ASSIGN_OR_RETURN(eng::Mesh m, with_context(fn, eng::Mesh::create(names, sizes, types)));
  eng::frontend::AbstractMesh a{m.axis_names(), m.axis_sizes(), {}};
  for (eng::AxisType t : m.axis_types()) a.axis_types.push_back(std::string(eng::axis_type_name(t)));
  push_abstract_mesh(L, a);
  return 1;
}

// What sl.use_abstract_mesh returns: closing it ends the view on the trace it began on.
int view_close(lua_State* L) {
  lua_getfield(L, 1, "trace");
  const lua_Integer id = lua_tointeger(L, -1);
  lua_getfield(L, 1, "depth");
  const lua_Integer depth = lua_tointeger(L, -1);
  std::shared_ptr<eng::frontend::Trace> tr = session(L).active_trace();
  // Ends the view and whatever began inside it; closing twice does nothing.
  if (tr && tr->id() == id && depth >= 0) tr->close_to(static_cast<size_t>(depth));
  return 0;
}

// sl.use_abstract_mesh(m) (jax.sharding.use_abstract_mesh, Python's `with`): inside a jit,
// the abstract mesh becomes m, another mesh of the same devices whose axes are runs of the
// jit's (engine/frontend/trace.h Trace::begin_view); `local _ <close> = ...` ends it.
Result<int> use_abstract_mesh(lua_State* L) {
  constexpr std::string_view fn = "sl.use_abstract_mesh";
  ENG_ASSIGN_OR_RETURN(eng::Mesh view, abstract_mesh_at(L, 1, fn));
  std::shared_ptr<eng::frontend::Trace> tr = session(L).active_trace();
  if (!tr || tr->manual())
    return eng::invalid_argument(
        "{}: only inside sl.jit here (its values are typed on the view); at the top level, "
        "sl.use_mesh sets a concrete mesh",
        fn);
  const size_t depth = tr->open_depth();
  ENG_RETURN_IF_ERROR(tr->begin_view(view));
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, static_cast<lua_Integer>(tr->id()));
  lua_setfield(L, -2, "trace");
  lua_pushinteger(L, static_cast<lua_Integer>(depth));
  lua_setfield(L, -2, "depth");
  if (luaL_newmetatable(L, "AbstractMeshScope")) {
    lua_pushcfunction(L, view_close);
    lua_setfield(L, -2, "__close");
  }
  lua_setmetatable(L, -2);
  return 1;
}

constexpr Function kMeshFunctions[] = {
    {"AbstractMesh", lua_entry<abstract_mesh>,
     "sl.AbstractMesh(axis_sizes, axis_names [, axis_types]) -> AbstractMesh",
     "jax.sharding.AbstractMesh: a mesh's shape, axis names and types (Auto by default) without\n"
     "  devices; prints AbstractMesh('A': 8, axis_types=(Explicit,))."},
    {"use_abstract_mesh", lua_entry<use_abstract_mesh>,
     "sl.use_abstract_mesh(abstract_mesh) -> to-be-closed value",
     "jax.sharding.use_abstract_mesh, inside sl.jit: until the value is closed (`local _ <close>\n"
     "  = sl.use_abstract_mesh(m)`), specs of sl.reshard / with_sharding_constraint name m's axes\n"
     "  and the values made are typed on m (the jit's results among them are placed on it). m has\n"
     "  the jit mesh's device count, and each of its axes is a run of the jit mesh's consecutive\n"
     "  axes (('A': 8) over ('X': 4, 'Y': 2): A is (X, Y))."},
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
    {"mode", lua_entry<mesh_mode>, "m:mode() -> string", "\"auto\", \"explicit\" (every axis Explicit) or \"mixed\"."},
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
