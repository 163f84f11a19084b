// shell/lua_array.cpp: users' meshes and arrays (issue 13; docs/frontend.md): sl.make_mesh,
// sl.set_mesh / sl.use_mesh, sl.array, sl.arange, sl.zeros, sl.ones, sl.full, sl.random,
// sl.device_put, the Array type, and `apply` (eager dispatch cache and tracing).
#include "shell/lua_array.h"
#include "shell/lua_numpy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/base/limits.h"
#include "engine/frontend/array_print.h"
#include "engine/frontend/vma.h"
#include "engine/frontend/creation.h"
#include "engine/frontend/numpy.h"
#include "engine/sharding/shard_geometry.h"
#include "shell/bindings.h"
#include "shell/context.h"
#include "shell/lua_jit_tree.h"
#include "shell/lua_types.h"

namespace shell {

namespace fe = eng::frontend;

fe::Session& session(lua_State* L) { return context(L).session; }
const eng::Mesh& current_mesh(lua_State* L) { return session(L).mesh(); }

Result<ArrayBox*> arg_array(lua_State* L, int idx, std::string_view fn, std::string_view name) {
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_udata<ArrayBox>(L, idx, fn, name));
  ENG_RETURN_IF_ERROR(check_live(*a, fn));
  return a;
}

void push_array(lua_State* L, ArrayBox box) { push_udata(L, std::move(box)); }

void push_concrete(lua_State* L, fe::ArrayRef a) { push_array(L, fe::Value::concrete(std::move(a))); }

Result<Operand> arg_operand(lua_State* L, int idx, std::string_view fn, std::string_view name) {
  Operand o;
  if (lua_type(L, idx) == LUA_TNUMBER) {
    o.number = lua_tonumber(L, idx);
    return o;
  }
  if (ArrayBox* a = to_udata<ArrayBox>(L, idx)) {
    ENG_RETURN_IF_ERROR(check_live(*a, fn));
    o.array = a;
    return o;
  }
  return arg_error(L, idx, fn, name, "Array or number");
}

Result<std::optional<eng::PartitionSpec>> opt_spec(lua_State* L, int idx, std::string_view fn,
                                                   std::string_view name) {
  if (lua_isnoneornil(L, idx)) return std::optional<eng::PartitionSpec>();
  ENG_ASSIGN_OR_RETURN(eng::PartitionSpec * p, arg_spec(L, idx, fn, name));
  return std::optional<eng::PartitionSpec>(*p);
}

Result<std::optional<eng::PartitionSpec>> read_out_sharding(lua_State* L, int idx,
                                                            std::string_view fn) {
  if (lua_isnoneornil(L, idx)) return std::optional<eng::PartitionSpec>();
  ENG_RETURN_IF_ERROR(arg_table(L, idx, fn, "options"));
  static const std::vector<std::string> kKeys = {"out_sharding"};
  ENG_RETURN_IF_ERROR(check_keys(L, idx, fn, kKeys));
  push_field(L, idx, "out_sharding");
  Result<std::optional<eng::PartitionSpec>> s = opt_spec(L, lua_gettop(L), fn, "out_sharding");
  lua_pop(L, 1);
  return s;
}

void push_tracer(lua_State* L, const std::shared_ptr<fe::Trace>& tr, eng::ValueId v) {
  push_array(L, fe::Value::tracer(tr, v));
}

bool array_type_parts(lua_State* L, int idx, eng::Shape* shape, eng::NamedSharding* sharding,
                      std::string* dtype) {
  ArrayBox* a = to_udata<ArrayBox>(L, idx);
  if (!a || a->deleted) return false;
  Result<eng::NamedSharding> s = fe::sharding_of(*a);
  *shape = a->shape;
  *sharding = s.ok() ? *s : eng::NamedSharding{};
  *dtype = std::string(eng::dtype_name(a->dtype));
  return true;
}

Result<int> apply(lua_State* L, std::string_view fn, const std::string& key,
                  const std::vector<Operand>& ops, const OpFn& op) {
  ENG_ASSIGN_OR_RETURN(std::vector<fe::Value> outs, session(L).apply(fn, key, ops, op));
  for (fe::Value& v : outs) push_array(L, std::move(v));
  return static_cast<int>(outs.size());
}

namespace {

// ---- meshes -----------------------------------------------------------------------------

Result<eng::AxisType> parse_axis_type(lua_State* L, int idx, std::string_view fn) {
  ENG_ASSIGN_OR_RETURN(std::string s, arg_string(L, idx, fn, "axis_types"));
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower == "explicit") return eng::AxisType::kExplicit;
  if (lower == "auto") return eng::AxisType::kAuto;
  return eng::invalid_argument("{}: axis type '{}' is not Explicit or Auto (Manual is shard_map's)",
                               fn, s);
}

// {axis_types = sl.AxisType.Explicit | {"Explicit", "Auto"}}: one type for every axis, or one
// per axis (JAX's mixed meshes).
Result<std::vector<eng::AxisType>> read_axis_types(lua_State* L, int opts, size_t n,
                                                   std::string_view fn) {
  if (lua_isnoneornil(L, opts)) return std::vector<eng::AxisType>(n, eng::AxisType::kExplicit);
  if (lua_type(L, opts) == LUA_TTABLE) {  // positional, as jax.make_mesh's (Auto, Auto)
    const bool positional = lua_rawgeti(L, opts, 1) != LUA_TNIL;
    lua_pop(L, 1);
    if (positional) {
      lua_newtable(L);
      lua_pushvalue(L, opts);
      lua_setfield(L, -2, "axis_types");
      lua_replace(L, opts);
    }
  }
  ENG_RETURN_IF_ERROR(arg_table(L, opts, fn, "options"));
  static const std::vector<std::string> kKeys = {"axis_types"};
  ENG_RETURN_IF_ERROR(check_keys(L, opts, fn, kKeys));
  const int t = push_field(L, opts, "axis_types");
  const int at = lua_gettop(L);
  eng::AxisType type = eng::AxisType::kExplicit;
  std::vector<eng::AxisType> types;
  if (t == LUA_TSTRING) {
    ENG_ASSIGN_OR_RETURN(type, parse_axis_type(L, at, fn));
  } else if (t == LUA_TTABLE) {
    const size_t m = lua_rawlen(L, at);
    if (m != n) return eng::invalid_argument("{}: {} axis_types for {} axes", fn, m, n);
    for (size_t i = 1; i <= m; ++i) {
      lua_rawgeti(L, at, static_cast<lua_Integer>(i));
      Result<eng::AxisType> ti = parse_axis_type(L, lua_gettop(L), fn);
      lua_pop(L, 1);
      if (!ti.ok()) return ti.status();
      types.push_back(*ti);
    }
  } else if (t != LUA_TNIL) {
    return arg_error(L, at, fn, "axis_types", "string or table of strings");
  }
  lua_settop(L, at - 1);
  if (types.empty()) types.assign(n, type);
  return types;
}

Result<int> make_mesh(lua_State* L) {
  constexpr std::string_view fn = "sl.make_mesh";
  ENG_RETURN_IF_ERROR(arg_table(L, 1, fn, "axis_shapes"));
  std::vector<int64_t> sizes;
  int64_t product = 1;
  for (lua_Integer i = 1; i <= static_cast<lua_Integer>(lua_rawlen(L, 1)); ++i) {
    lua_rawgeti(L, 1, i);
    int ok = 0;
    const lua_Integer v = lua_tointegerx(L, -1, &ok);
    lua_pop(L, 1);
    if (!ok || v < 1)
      return eng::invalid_argument("{}: axis_shapes[{}] must be a positive integer", fn, i);
    if (__builtin_mul_overflow(product, v, &product) || product > 4096)
      return eng::invalid_argument("{}: more than 4096 simulated devices", fn);
    sizes.push_back(v);
  }
  ENG_ASSIGN_OR_RETURN(std::vector<std::string> names, arg_string_list(L, 2, fn, "axis_names"));
  if (names.size() != sizes.size())
    return eng::invalid_argument("{}: {} axis_shapes but {} axis_names", fn, sizes.size(),
                                 names.size());
  ENG_ASSIGN_OR_RETURN(std::vector<eng::AxisType> types, read_axis_types(L, 3, sizes.size(), fn));
  ENG_ASSIGN_OR_RETURN(eng::Mesh m, with_context(fn, eng::Mesh::create(names, sizes, types)));
  push_udata(L, std::move(m));
  return 1;
}

// Appends the device ids of the (nested) list at idx, row-major, checking it is rectangular;
// a leaf is a device table ({id = d, ...}, sl.devices()'s).
Status read_device_ids(lua_State* L, int idx, size_t depth, std::vector<int64_t>& shape,
                       std::vector<int64_t>& ids, std::string_view fn) {
  if (depth > 8 || !lua_checkstack(L, 3))
    return eng::invalid_argument("{}: devices nested over 8 deep", fn);
  if (lua_type(L, idx) != LUA_TTABLE)
    return eng::invalid_argument("{}: devices must be (nested) lists of devices (sl.devices()'s "
                                 "tables), got {}", fn, luaL_typename(L, idx));
  if (lua_getfield(L, idx, "id") != LUA_TNIL) {
    int ok = 0;
    const lua_Integer id = lua_tointegerx(L, -1, &ok);
    lua_pop(L, 1);
    if (!ok) return eng::invalid_argument("{}: a device's id is not an integer", fn);
    if (depth != shape.size())
      return eng::invalid_argument("{}: ragged devices: a device at depth {} of a {}-d list", fn,
                                   depth, shape.size());
    ids.push_back(id);
    return eng::ok_status();
  }
  lua_pop(L, 1);
  const auto n = static_cast<int64_t>(lua_rawlen(L, idx));
  if (depth == shape.size()) {
    if (!ids.empty())
      return eng::invalid_argument("{}: ragged devices: a list at depth {} where devices were",
                                   fn, depth);
    if (n == 0) return eng::invalid_argument("{}: an empty list of devices", fn);
    shape.push_back(n);
  } else if (shape[depth] != n) {
    return eng::invalid_argument("{}: ragged devices: a list of {} at depth {}, expected {}", fn,
                                 n, depth, shape[depth]);
  }
  if (static_cast<int64_t>(ids.size()) + n > 4096)
    return eng::invalid_argument("{}: more than 4096 simulated devices", fn);
  for (int64_t i = 1; i <= n; ++i) {
    lua_rawgeti(L, idx, i);
    Status st = read_device_ids(L, lua_gettop(L), depth + 1, shape, ids, fn);
    lua_pop(L, 1);
    ENG_RETURN_IF_ERROR(st);
  }
  return eng::ok_status();
}

// jax.sharding.Mesh(devices, axis_names [, axis_types]): the mesh's shape is the nesting of
// devices (a list of sl.devices()'s tables, or lists of them). A simulated mesh numbers its
// devices 0..n-1 in row-major order, so the ids must be exactly those, in that order. The axis
// types default to Auto, as Mesh's do (jax.make_mesh's are Explicit).
Result<int> mesh_from_devices(lua_State* L) {
  constexpr std::string_view fn = "sl.sharding.Mesh";
  std::vector<int64_t> sizes, ids;
  if (const fe::DeviceGrid* g = to_device_grid(L, 1))  // numpy's array of devices
    sizes = g->shape, ids = g->ids;
  else
    ENG_RETURN_IF_ERROR(read_device_ids(L, 1, 0, sizes, ids, fn));
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] != static_cast<int64_t>(i))
      return eng::invalid_argument(
          "{}: device {} is at position {}: a simulated mesh numbers its {} devices 0..{} in "
          "row-major order, so Mesh takes sl.devices()[1..n] in order",
          fn, ids[i], i, ids.size(), ids.size() - 1);
  std::vector<std::string> names;
  if (lua_type(L, 2) == LUA_TSTRING) {
    names.push_back(lua_tostring(L, 2));
  } else {
    ENG_ASSIGN_OR_RETURN(names, arg_string_list(L, 2, fn, "axis_names"));
  }
  if (names.size() != sizes.size())
    return eng::invalid_argument("{}: devices of shape {} but {} axis_names", fn,
                                 eng::Shape(sizes).to_string(), names.size());
  std::vector<eng::AxisType> types(sizes.size(), eng::AxisType::kAuto);
  if (!lua_isnoneornil(L, 3)) {
    ENG_ASSIGN_OR_RETURN(types, read_axis_types(L, 3, sizes.size(), fn));
  }
  ENG_ASSIGN_OR_RETURN(eng::Mesh m, with_context(fn, eng::Mesh::create(names, sizes, types)));
  push_udata(L, std::move(m));
  return 1;
}

// Returns JAX's set_mesh object: closing it restores the previous mesh (lua_mesh_context.cpp).
Result<int> set_mesh(lua_State* L) {
  std::optional<eng::Mesh> prev = session(L).mesh_set();
  if (lua_isnil(L, 1)) {
    session(L).set_mesh(std::nullopt);
  } else {
    ENG_ASSIGN_OR_RETURN(eng::Mesh * m, arg_udata<eng::Mesh>(L, 1, "sl.set_mesh", "mesh"));
    session(L).set_mesh(*m);
  }
  push_mesh_context(L, std::move(prev));
  return 1;
}

Result<int> get_mesh(lua_State* L) {
  push_udata(L, current_mesh(L));
  return 1;
}

// sl.get_abstract_mesh() (jax.sharding.get_abstract_mesh): a table {axis_names, axis_sizes,
// axis_types, shape = {name = size}} that prints as JAX's AbstractMesh.
int abstract_mesh_tostring(lua_State* L) {
  lua_getfield(L, 1, "text");
  return 1;
}
}  // namespace

void push_abstract_mesh(lua_State* L, const fe::AbstractMesh& a) {
  const int n = static_cast<int>(a.axis_names.size());
  lua_createtable(L, 0, 5);
  lua_createtable(L, n, 0);  // axis_names
  lua_createtable(L, n, 0);  // axis_sizes
  lua_createtable(L, n, 0);  // axis_types
  lua_createtable(L, 0, n);  // shape
  for (int i = 0; i < n; ++i) {
    lua_pushstring(L, a.axis_names[i].c_str());
    lua_rawseti(L, -5, i + 1);
    lua_pushinteger(L, a.axis_sizes[i]);
    lua_rawseti(L, -4, i + 1);
    lua_pushstring(L, a.axis_types[static_cast<size_t>(i)].c_str());
    lua_rawseti(L, -3, i + 1);
    lua_pushinteger(L, a.axis_sizes[i]);
    lua_setfield(L, -2, a.axis_names[i].c_str());
  }
  lua_setfield(L, -5, "shape");
  lua_setfield(L, -4, "axis_types");
  lua_setfield(L, -3, "axis_sizes");
  lua_setfield(L, -2, "axis_names");
  lua_pushstring(L, a.to_string().c_str());
  lua_setfield(L, -2, "text");
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, abstract_mesh_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_setmetatable(L, -2);
}

namespace {

Result<int> get_abstract_mesh(lua_State* L) {
  push_abstract_mesh(L, session(L).abstract_mesh());
  return 1;
}

// sl.use_mesh(m, f, ...): f(...) with m as the current mesh, restored afterwards (also when f
// raises: the error is re-raised). sl.use_mesh(m): sl.set_mesh(m), whose returned object
// restores the previous mesh when closed (`local _ <close> = sl.use_mesh(m)`).
Result<int> use_mesh(lua_State* L) {
  constexpr std::string_view fn = "sl.use_mesh";
  ENG_ASSIGN_OR_RETURN(eng::Mesh * m, arg_udata<eng::Mesh>(L, 1, fn, "mesh"));
  if (lua_isnoneornil(L, 2)) {  // JAX's `with use_mesh(m):`: sl.set_mesh's object
    lua_settop(L, 1);
    return set_mesh(L);
  }
  if (lua_type(L, 2) != LUA_TFUNCTION) return arg_error(L, 2, fn, "f", "function");
  std::optional<eng::Mesh> saved = session(L).mesh_set();
  session(L).set_mesh(*m);
  const int base = 1;
  const int rc = lua_pcall(L, lua_gettop(L) - 2, LUA_MULTRET, 0);
  session(L).set_mesh(saved);
  if (rc != LUA_OK) {
    std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error object)";
    return eng::invalid_argument("{}", msg);
  }
  return lua_gettop(L) - base;
}

// ---- reading values and options ---------------------------------------------------------



// Values of a nested Lua table (rectangular), row-major, and its shape.
// integers (when given) is cleared by a value that is not a Lua integer (3.0, true).
Status read_nested(lua_State* L, int idx, int depth, std::vector<int64_t>& shape,
                   std::vector<double>& out, std::string_view fn, bool* integers = nullptr) {
  if (depth > eng::kMaxRank)
    return eng::invalid_argument("{}: values nested {} deep, over the limit of {} dims per array",
                                 fn, depth, eng::kMaxRank);
  if (!lua_checkstack(L, 2)) return eng::invalid_argument("{}: no Lua stack left", fn);
  if (lua_type(L, idx) == LUA_TNUMBER) {
    if (depth != static_cast<int>(shape.size()))
      return eng::invalid_argument(
          "{}: ragged values: a number at depth {} where the shape {} "
          "needs a list",
          fn, depth, eng::Shape(shape).to_string());
    if (integers != nullptr && !lua_isinteger(L, idx)) *integers = false;
    out.push_back(lua_tonumber(L, idx));
    return eng::ok_status();
  }
  if (lua_type(L, idx) == LUA_TBOOLEAN) {
    if (integers != nullptr) *integers = false;
    out.push_back(lua_toboolean(L, idx) ? 1 : 0);
    return eng::ok_status();
  }
  if (lua_type(L, idx) != LUA_TTABLE)
    return eng::invalid_argument("{}: values must be numbers or (nested) lists, got {}", fn,
                                 luaL_typename(L, idx));
  const int64_t n = static_cast<int64_t>(lua_rawlen(L, idx));
  if (depth == static_cast<int>(shape.size())) {
    if (!out.empty())
      return eng::invalid_argument("{}: ragged values: a list at depth {} where numbers were", fn,
                                   depth);
    shape.push_back(n);
  } else if (shape[depth] != n) {
    return eng::invalid_argument("{}: ragged values: a list of {} at depth {}, expected {}", fn, n,
                                 depth, shape[depth]);
  }
  if (static_cast<int64_t>(out.size()) + n > fe::kMaxHostValues)
    return eng::invalid_argument("{}: too many values", fn);
  for (int64_t i = 1; i <= n; ++i) {
    lua_rawgeti(L, idx, i);
    Status s = read_nested(L, lua_gettop(L), depth + 1, shape, out, fn, integers);
    lua_pop(L, 1);
    ENG_RETURN_IF_ERROR(s);
  }
  return eng::ok_status();
}


// sl.array and np.array. infer_int: jnp.array's dtype when none is given, int32 when every value
// is a Lua integer (Python's ints), float32 otherwise (an empty list too); sl.array's is float32.
Result<int> make_array(lua_State* L, std::string_view fn, bool infer_int) {
  ENG_ASSIGN_OR_RETURN(Placement p, read_placement(L, 2, fn));
  if (ArrayBox* a = to_udata<ArrayBox>(L, 1); a && !a->is_tracer()) {
    ENG_RETURN_IF_ERROR(check_live(*a, fn));
    ENG_ASSIGN_OR_RETURN(std::vector<double> v, fe::fetch(*a->data));
    if (!p.dtype_given) p.dtype = a->dtype;
    return put_values(L, fn, v, a->shape, p);
  }
  std::vector<int64_t> shape;
  std::vector<double> values;
  bool integers = true;
  ENG_RETURN_IF_ERROR(read_nested(L, 1, 0, shape, values, fn, &integers));
  ENG_ASSIGN_OR_RETURN(eng::Shape s, with_context(fn, eng::Shape::checked(shape)));
  if (infer_int && !p.dtype_given && integers && !values.empty()) p.dtype = eng::DType::kI32;
  return put_values(L, fn, values, s, p);
}

Result<int> array(lua_State* L) { return make_array(L, "sl.array", false); }
// np.array of sl.devices()' tables (a list, or lists of them) is numpy's array of devices.
Result<int> np_array(lua_State* L) {
  const int top = lua_gettop(L);
  bool devices = false;
  for (int idx = 1, depth = 0; !devices && depth < 9 && lua_type(L, idx) == LUA_TTABLE; ++depth) {
    lua_pushstring(L, "id");  // raw: never a user's __index (lua_binding.h)
    devices = lua_rawget(L, idx) == LUA_TNUMBER;
    lua_pop(L, 1);
    lua_rawgeti(L, idx, 1);
    idx = lua_gettop(L);
  }
  lua_settop(L, top);
  if (!devices) return make_array(L, "np.array", true);
  std::vector<int64_t> shape, ids;
  ENG_RETURN_IF_ERROR(read_device_ids(L, 1, 0, shape, ids, "np.array"));
  if (shape.empty()) return eng::invalid_argument("np.array: a device, not a list of them");
  push_device_grid(L, std::move(ids), std::move(shape));
  return 1;
}

}  // namespace

Result<std::vector<int64_t>> read_shape_table(lua_State* L, int idx, std::string_view fn) {
  std::vector<int64_t> dims;
  for (lua_Integer i = 1; i <= static_cast<lua_Integer>(lua_rawlen(L, idx)); ++i) {
    lua_rawgeti(L, idx, i);
    int ok = 0;
    const lua_Integer d = lua_tointegerx(L, -1, &ok);
    lua_pop(L, 1);
    if (!ok) return eng::invalid_argument("{}: shape[{}] is not an integer", fn, i);
    dims.push_back(d);
  }
  return dims;
}

// {dtype=, sharding = sl.P(...), out_sharding = sl.P(...), mesh=} at idx (may be none), or a
// dtype name there (jnp.zeros(shape, dtype)); out_sharding is JAX's name for sharding.
Result<Placement> read_placement(lua_State* L, int idx, std::string_view fn) {
  Placement p;
  p.sharding.mesh = current_mesh(L);
  if (lua_isnoneornil(L, idx)) return p;
  if (lua_type(L, idx) == LUA_TSTRING) {
    ENG_ASSIGN_OR_RETURN(p.dtype, with_context(fn, eng::parse_dtype(lua_tostring(L, idx))));
    p.dtype_given = true;
    return p;
  }
  ENG_RETURN_IF_ERROR(arg_table(L, idx, fn, "options"));
  static const std::vector<std::string> kKeys = {"dtype", "sharding", "out_sharding", "mesh"};
  ENG_RETURN_IF_ERROR(check_keys(L, idx, fn, kKeys));
  ENG_ASSIGN_OR_RETURN(std::optional<std::string> dt, field_string(L, idx, "dtype", fn));
  if (dt) {
    ENG_ASSIGN_OR_RETURN(p.dtype, with_context(fn, eng::parse_dtype(*dt)));
    p.dtype_given = true;
  }
  push_field(L, idx, "mesh");
  if (!lua_isnil(L, -1)) {
    Result<eng::Mesh*> m = arg_udata<eng::Mesh>(L, lua_gettop(L), fn, "mesh");
    if (!m.ok()) return m.status();
    p.sharding.mesh = **m;
  }
  lua_pop(L, 1);
  for (const char* key : {"sharding", "out_sharding"}) {
    push_field(L, idx, key);
    const int s = lua_gettop(L);
    Status st = eng::ok_status();
    if (auto* ns = to_udata<eng::NamedSharding>(L, s))
      p.sharding = *ns;  // its mesh too, as device_put's NamedSharding
    else if (auto* spec = to_udata<eng::PartitionSpec>(L, s))
      p.sharding.spec = *spec;
    else if (!lua_isnil(L, s))
      st = arg_error(L, s, fn, key, "PartitionSpec (sl.P(...)) or NamedSharding");
    lua_pop(L, 1);
    ENG_RETURN_IF_ERROR(st);
  }
  return p;
}

Result<int> put_values(lua_State* L, std::string_view fn, const std::vector<double>& values,
                       const eng::Shape& shape, const Placement& p) {
  ENG_ASSIGN_OR_RETURN(fe::ArrayRef a,
                       with_context(fn, fe::device_put(values, shape, p.dtype, p.sharding)));
  push_concrete(L, std::move(a));
  return 1;
}

Result<eng::Shape> read_dims(lua_State* L, int idx, std::string_view fn) {
  std::vector<int64_t> dims;
  if (lua_type(L, idx) == LUA_TNUMBER) {
    ENG_ASSIGN_OR_RETURN(int64_t d, arg_int(L, idx, fn, "shape"));
    dims.push_back(d);
  } else {
    if (lua_type(L, idx) != LUA_TTABLE)
      return arg_error(L, idx, fn, "shape", "a shape {d0, d1, ...}");
    ENG_ASSIGN_OR_RETURN(dims, read_shape_table(L, idx, fn));
  }
  return with_context(fn, eng::Shape::checked(std::move(dims)));
}

namespace {


Result<int> filled(lua_State* L, std::string_view fn, double value, int opts) {
  ENG_ASSIGN_OR_RETURN(eng::Shape s, read_dims(L, 1, fn));
  ENG_ASSIGN_OR_RETURN(Placement p, read_placement(L, opts, fn));
  ENG_RETURN_IF_ERROR(with_context(fn, eng::check_array_bytes(s, p.dtype, "array")));
  ENG_RETURN_IF_ERROR(fe::check_host_values(s, fn));
  return put_values(L, fn, std::vector<double>(static_cast<size_t>(s.numel()), value), s, p);
}
Result<int> zeros(lua_State* L) { return filled(L, "sl.zeros", 0.0, 2); }
Result<int> ones(lua_State* L) { return filled(L, "sl.ones", 1.0, 2); }
Result<int> full(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(double v, arg_number(L, 2, "sl.full", "fill_value"));
  return filled(L, "sl.full", v, 3);
}

// sl.arange(stop) / sl.arange(start, stop [, step]) [, options]: int32 for integer arguments
// (as jnp.arange), float32 otherwise.
Result<int> arange(lua_State* L) {
  constexpr std::string_view fn = "sl.arange";
  int n = 0;
  double a[3] = {0, 0, 1};
  bool ints = true;
  while (n < 3 && lua_type(L, n + 1) == LUA_TNUMBER) {
    ints = ints && lua_isinteger(L, n + 1);
    a[n] = lua_tonumber(L, n + 1);
    ++n;
  }
  if (n == 0) return arg_error(L, 1, fn, "stop", "number");
  const double start = n == 1 ? 0 : a[0], stop = n == 1 ? a[0] : a[1], step = n == 3 ? a[2] : 1;
  ENG_ASSIGN_OR_RETURN(std::vector<double> v, fe::arange_values(start, stop, step, fn));
  ENG_ASSIGN_OR_RETURN(Placement p, read_placement(L, n + 1, fn));
  if (!p.dtype_given) p.dtype = ints ? eng::DType::kI32 : eng::DType::kF32;
  return put_values(L, fn, v, eng::Shape{static_cast<int64_t>(v.size())}, p);
}

// sl.device_put(x, sharding [, mesh]): x an Array (re-placed), a pytree of them, or values;
// sharding sl.P(...) on `mesh` (default: set_mesh's mesh, else x's, else one device), or a
// NamedSharding (its own mesh).
Result<int> device_put(lua_State* L);

// jax.device_put of a pytree (a table whose leaves are all Arrays): the table rebuilt with each
// leaf placed by the same sharding (the arguments after the table).
Result<int> device_put_tree(lua_State* L) {
  const int top = lua_gettop(L);
  lua_newtable(L);
  const int out = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, 1) != 0) {  // key, value
    lua_pushcfunction(L, lua_type(L, -1) == LUA_TTABLE ? lua_entry<device_put_tree>
                                                       : lua_entry<device_put>);
    lua_insert(L, -2);  // key, f, value
    for (int i = 2; i <= top; ++i) lua_pushvalue(L, i);
    if (lua_pcall(L, top, 1, 0) != LUA_OK) {
      std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error object)";
      return eng::invalid_argument("{}", msg);
    }
    lua_pushvalue(L, -2);  // key, result, key
    lua_insert(L, -2);     // key, key, result
    lua_rawset(L, out);
  }
  return 1;
}

Result<int> device_put(lua_State* L) {
  constexpr std::string_view fn = "sl.device_put";
  if (lua_type(L, 1) == LUA_TTABLE && lua_getmetatable(L, 1)) {
    lua_pop(L, 1);
  } else if (lua_type(L, 1) == LUA_TTABLE) {
    Tree t;
    std::vector<ArrayBox*> leaves;
    if (flatten(L, 1, std::string(fn), &t, &leaves).ok() && !leaves.empty())
      return device_put_tree(L);
  }
  ArrayBox* a = to_udata<ArrayBox>(L, 1);
  if (a) ENG_RETURN_IF_ERROR(check_live(*a, fn));
  // A spec is resolved on set_mesh's mesh (JAX's), else on x's.
  const bool own_mesh = a && !a->is_tracer() && !session(L).mesh_set();
  eng::NamedSharding target{own_mesh ? a->data->array.sharding.mesh : current_mesh(L), {}};
  if (auto* ns = to_udata<eng::NamedSharding>(L, 2)) {
    target = *ns;
  } else {
    ENG_ASSIGN_OR_RETURN(eng::PartitionSpec * spec,
                         arg_udata<eng::PartitionSpec>(L, 2, fn, "sharding"));
    target.spec = *spec;
  }
  if (!lua_isnoneornil(L, 3)) {
    ENG_ASSIGN_OR_RETURN(eng::Mesh * m, arg_udata<eng::Mesh>(L, 3, fn, "mesh"));
    target.mesh = *m;
  }
  if (a && a->is_tracer())
    return eng::invalid_argument("{}: inside jit use sl.reshard(x, spec)", fn);
  if (a) {
    ENG_ASSIGN_OR_RETURN(std::vector<double> v, fe::fetch(*a->data));
    ENG_ASSIGN_OR_RETURN(fe::ArrayRef r,
                         with_context(fn, fe::device_put(v, a->shape, a->dtype, target)));
    push_concrete(L, std::move(r));
    return 1;
  }
  std::vector<int64_t> shape;
  std::vector<double> values;
  ENG_RETURN_IF_ERROR(read_nested(L, 1, 0, shape, values, fn));
  ENG_ASSIGN_OR_RETURN(eng::Shape s, with_context(fn, eng::Shape::checked(shape)));
  Placement p;
  p.sharding = target;
  return put_values(L, fn, values, s, p);
}

// ---- random: counter-based (a key and an element index give each value) -----------------

using KeyBox = fe::PrngKey;

}  // namespace
}  // namespace shell

template <>
struct shell::LuaType<shell::KeyBox> {
  static constexpr const char* kName = "PRNGKey";
};

namespace shell {
namespace {

Result<int> random_key(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(int64_t seed, arg_int(L, 1, "sl.random.key", "seed"));
  push_udata(L, fe::prng_key(seed));
  return 1;
}

Result<int> random_split(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(KeyBox * k, arg_udata<KeyBox>(L, 1, "sl.random.split", "key"));
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> n, opt_int(L, 2, "sl.random.split", "num"));
  ENG_ASSIGN_OR_RETURN(std::vector<KeyBox> keys,
                       fe::prng_split(*k, n.value_or(2), "sl.random.split"));
  lua_createtable(L, static_cast<int>(keys.size()), 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    push_udata(L, keys[i]);
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  return 1;
}

Result<int> random_fill(lua_State* L, std::string_view fn, bool normal) {
  ENG_ASSIGN_OR_RETURN(KeyBox * k, arg_udata<KeyBox>(L, 1, fn, "key"));
  const KeyBox key = *k;
  ENG_ASSIGN_OR_RETURN(eng::Shape s, read_dims(L, 2, fn));
  ENG_ASSIGN_OR_RETURN(Placement p, read_placement(L, 3, fn));
  ENG_RETURN_IF_ERROR(with_context(fn, eng::check_array_bytes(s, p.dtype, "array")));
  ENG_RETURN_IF_ERROR(fe::check_host_values(s, fn));
  const std::vector<double> v = fe::random_values(key, s.numel(), normal);
  return put_values(L, fn, v, s, p);
}
Result<int> random_normal(lua_State* L) { return random_fill(L, "sl.random.normal", true); }
Result<int> random_uniform(lua_State* L) { return random_fill(L, "sl.random.uniform", false); }

Result<int> key_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(KeyBox * k, arg_udata<KeyBox>(L, 1, "PRNGKey:__tostring"));
  lua_pushstring(L, fmt::format("PRNGKey({:016x})", k->seed).c_str());
  return 1;
}

Result<int> array_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, "Array:__tostring"));
  ENG_ASSIGN_OR_RETURN(std::string s, fe::array_repr(*a));
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

Status not_traced(const ArrayBox& a, std::string_view fn) {
  if (a.is_tracer())
    return eng::invalid_argument(
        "{}: this is a traced array (inside sl.jit it has no values yet; ConcretizationTypeError "
        "in JAX): return it from the function and read the result",
        fn);
  return eng::ok_status();
}

// x:totable() / x:item() inside an eager shard_map: an invariant value's block (JAX's
// to_concrete_value); one varying over mesh axes has a block per device.
Status has_values(const ArrayBox& a, std::string_view fn) {
  if (!a.is_tracer() || !a.trace->eager()) return not_traced(a, fn);
  if (a.vma == 0) return eng::ok_status();
  return eng::invalid_argument("{}: this shard_map value varies over mesh axes ({}): one block per "
                               "device (print it, or return it)", fn, fmt::join(fe::vma_of(a), ", "));
}

void push_nested(lua_State* L, const std::vector<double>& v, const eng::Shape& s, int dim,
                 int64_t offset, bool ints) {
  if (dim == s.rank()) {
    if (ints)
      lua_pushinteger(L, static_cast<lua_Integer>(v[offset]));
    else
      lua_pushnumber(L, v[offset]);
    return;
  }
  const int64_t stride = s.prod(dim + 1, s.rank());
  lua_createtable(L, static_cast<int>(s[dim]), 0);
  for (int64_t i = 0; i < s[dim]; ++i) {
    push_nested(L, v, s, dim + 1, offset + i * stride, ints);
    lua_rawseti(L, -2, i + 1);
  }
}

Result<int> array_totable(lua_State* L) {
  constexpr std::string_view fn = "Array:totable";
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn));
  ENG_RETURN_IF_ERROR(has_values(*a, fn));
  if (a->shape.numel() > (int64_t{1} << 24))
    return eng::invalid_argument("{}: {} elements is more than a Lua table should hold (2^24)", fn,
                                 a->shape.numel());
  ENG_ASSIGN_OR_RETURN(std::vector<double> v, fe::fetch(*a->data));
  push_nested(L, v, a->shape, 0, 0, a->dtype == eng::DType::kI32);
  return 1;
}

Result<int> array_item(lua_State* L) {
  constexpr std::string_view fn = "Array:item";
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn));
  ENG_RETURN_IF_ERROR(has_values(*a, fn));
  if (a->shape.numel() != 1)
    return eng::invalid_argument(
        "{}: can only convert an array of size 1 to a number, got shape {}", fn,
        a->shape.to_string());
  ENG_ASSIGN_OR_RETURN(std::vector<double> v, fe::fetch(*a->data));
  lua_pushnumber(L, v[0]);
  return 1;
}

// x:addressable_shards(): per device {device, index = {{start, stop}, ...} (0-based, stop
// exclusive, as Python slices), shape = local shape, data = the block as a one-device Array}.
Result<int> array_shards(lua_State* L) {
  constexpr std::string_view fn = "Array:addressable_shards";
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn));
  ENG_RETURN_IF_ERROR(not_traced(*a, fn));
  const eng::Array& arr = a->data->array;
  const eng::Mesh& mesh = arr.sharding.mesh;
  const eng::Shape local = arr.sharding.local_shape(arr.shape);
  lua_createtable(L, static_cast<int>(mesh.num_devices()), 0);
  for (int64_t d = 0; d < mesh.num_devices(); ++d) {
    const std::vector<int64_t> off = arr.sharding.local_offset(arr.shape, d);
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, d);
    lua_setfield(L, -2, "device");
    lua_createtable(L, arr.shape.rank(), 0);
    for (int i = 0; i < arr.shape.rank(); ++i) {
      lua_createtable(L, 2, 0);
      lua_pushinteger(L, off[i]);
      lua_rawseti(L, -2, 1);
      lua_pushinteger(L, off[i] + local[i]);
      lua_rawseti(L, -2, 2);
      lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "index");
    lua_createtable(L, local.rank(), 0);
    for (int i = 0; i < local.rank(); ++i) {
      lua_pushinteger(L, local[i]);
      lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "shape");
    // The device's own bytes (each device holds only its block), onto one device.
    ENG_ASSIGN_OR_RETURN(fe::ArrayRef block, fe::shard_block(*a->data, d));
    push_concrete(L, std::move(block));
    lua_setfield(L, -2, "data");
    lua_rawseti(L, -2, d + 1);
  }
  return 1;
}

Result<int> array_block(lua_State* L) {
  ENG_RETURN_IF_ERROR(arg_array(L, 1, "Array:block_until_ready").status());
  lua_settop(L, 1);  // execution is synchronous: the array is ready
  return 1;
}

Result<int> array_property(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, "Array"));
  if (lua_type(L, 2) == LUA_TNUMBER || lua_type(L, 2) == LUA_TTABLE) return array_getitem(L);
  if (lua_type(L, 2) == LUA_TUSERDATA) return array_index_by_array(L);  // x[i], i traced
  const std::string key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
  if (key == "T") return array_transposed(L);  // lua_numpy_ops.cpp
  if (key == "at") return array_at(L);         // lua_index.cpp
  if (key == "shape") {
    lua_createtable(L, a->shape.rank(), 0);
    for (int i = 0; i < a->shape.rank(); ++i) {
      lua_pushinteger(L, a->shape[i]);
      lua_rawseti(L, -2, i + 1);
    }
  } else if (key == "dtype") {
    lua_pushstring(L, std::string(eng::dtype_long_name(a->dtype)).c_str());
  } else if (key == "ndim") {
    lua_pushinteger(L, a->shape.rank());
  } else if (key == "size") {
    lua_pushinteger(L, a->shape.numel());
  } else if (key == "sharding") {
    ENG_ASSIGN_OR_RETURN(eng::NamedSharding s, fe::sharding_of(*a));
    push_udata(L, std::move(s));  // jax.Array.sharding: a NamedSharding (.spec, .mesh)
  } else if (key == "mesh") {
    push_udata(L, a->is_tracer() ? a->trace->mesh() : a->data->array.sharding.mesh);
  } else if (key == "type") {
    ENG_ASSIGN_OR_RETURN(eng::NamedSharding s, fe::sharding_of(*a));
    eng::PartitionSpec spec = eng::remove_size_one_mesh_axis(s.spec, s.mesh);
    lua_pushstring(L,
                   eng::typeof_string(eng::dtype_name(a->dtype), a->shape, &spec, &s.mesh).c_str());
  } else {
    lua_pushnil(L);
  }
  return 1;
}

constexpr Function kArrayFunctions[] = {
    {"make_mesh", lua_entry<make_mesh>,
     "sl.make_mesh(axis_shapes, axis_names [, {axis_types = \"Explicit\"|\"Auto\"|{...}}]) -> Mesh",
     "A mesh with any axis names, like jax.make_mesh: sl.make_mesh({4, 2}, {\"X\", \"Y\"}).\n"
     "  Explicit axes by default (as JAX's); one type for all, or one per axis ({\"Auto\",\n"
     "  \"Explicit\"}); prints Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit))."},
    {"set_mesh", lua_entry<set_mesh>, "sl.set_mesh(mesh | nil) -> set_mesh",
     "The mesh arrays are placed on when no mesh is named (jax.set_mesh); nil: one device.\n"
     "  Closing what it returns restores the previous mesh: `do local _ <close> =\n"
     "  sl.set_mesh(m) ... end` is Python's `with jax.set_mesh(m):`."},
    {"get_mesh", lua_entry<get_mesh>, "sl.get_mesh() -> Mesh", "The current mesh (sl.set_mesh's)."},
    {"get_abstract_mesh", lua_entry<get_abstract_mesh>,
     "sl.get_abstract_mesh() -> {axis_names, axis_sizes, axis_types, shape}",
     "jax.sharding.get_abstract_mesh: the mesh in scope with its axis types (inside\n"
     "  sl.auto_axes / sl.explicit_axes their axes switched, inside sl.shard_map Manual); prints\n"
     "  as AbstractMesh('X': 2, 'Y': 4, axis_types=(Auto, Explicit))."},
    {"use_mesh", lua_entry<use_mesh>, "sl.use_mesh(mesh, f, ...) -> f(...) | sl.use_mesh(mesh)",
     "Runs f with mesh as the current mesh and restores the previous one (Python's `with\n"
     "  jax.set_mesh(mesh):`), also when f raises. Without f: sl.set_mesh(mesh), whose closing\n"
     "  restores the previous mesh: `local _ <close> = sl.use_mesh(mesh)`."},
    {"array", lua_entry<array>,
     "sl.array(values [, {dtype=\"float32\", sharding=sl.P(...), mesh=m}]) -> Array",
     "An array from (nested) Lua lists of numbers, placed on the simulated devices of the mesh\n"
     "  (default sl.get_mesh()): each device holds only its shards. dtype float32 (default),\n"
     "  bfloat16 or int32."},
    {"zeros", lua_entry<zeros>,
     "sl.zeros(shape [, dtype | {dtype, out_sharding, mesh}]) -> Array",
     "Zeros (also np.zeros, np.empty; sharding= is out_sharding=)."},
    {"ones", lua_entry<ones>, "sl.ones(shape [, dtype | {dtype, out_sharding, mesh}]) -> Array",
     "Ones."},
    {"full", lua_entry<full>,
     "sl.full(shape, value [, dtype | {dtype, out_sharding, mesh}]) -> Array",
     "An array filled with value."},
    {"arange", lua_entry<arange>,
     "sl.arange([start,] stop [, step] [, dtype | {dtype, out_sharding, mesh}]) -> Array",
     "Evenly spaced values (jnp.arange): int32 for integer arguments, float32 otherwise."},
    {"device_put", lua_entry<device_put>, "sl.device_put(x, spec [, mesh]) -> Array",
     "x (an Array or values) placed with sharding spec on mesh (default: sl.set_mesh's, else "
     "x's); a table of Arrays (a pytree) gives the table with each placed so."},
};

constexpr Function kMeshConstructor[] = {
    {"Mesh", lua_entry<mesh_from_devices>,
     "sl.sharding.Mesh(devices, axis_names [, axis_types]) -> Mesh",
     "jax.sharding.Mesh: a mesh over devices (sl.devices()'s tables, nested to the mesh's shape;\n"
     "  a simulated mesh's devices are 0..n-1 in order, so the first n, in order). Axis types\n"
     "  Auto by default, as Mesh's. sl.devices() lists --local-devices (SHARDLAB_LOCAL_DEVICES)\n"
     "  per process: the XLA_FLAGS device count's counterpart."},
};

constexpr Function kNpArrayFunctions[] = {
    {"array", lua_entry<np_array>,
     "np.array(values [, dtype | {dtype, sharding, mesh}]) -> Array",
     "jnp.array: sl.array's, int32 when every value is a Lua integer and no dtype is given\n"
     "  (jnp.array([3, 1, 4]) is int32), float32 otherwise."},
};

constexpr Function kRandomFunctions[] = {
    {"key", lua_entry<random_key>, "sl.random.key(seed) -> PRNGKey",
     "A counter-based key (like jax.random.key): the same key gives the same values."},
    {"split", lua_entry<random_split>, "sl.random.split(key [, num=2]) -> {PRNGKey}",
     "num new independent keys."},
    {"normal", lua_entry<random_normal>,
     "sl.random.normal(key, shape [, {dtype, sharding, mesh}]) -> Array",
     "Standard normal values: element i depends only on the key and i (not on the sharding).\n"
     "  Not JAX's threefry bits: same key and shape give the same values here, not JAX's."},
    {"uniform", lua_entry<random_uniform>,
     "sl.random.uniform(key, shape [, {dtype, sharding, mesh}]) -> Array", "Uniform in (0, 1)."},
};

constexpr Method kArrayMethods[] = {
    {"totable", lua_entry<array_totable>, "x:totable() -> nested Lua lists", "The values."},
    {"item", lua_entry<array_item>, "x:item() -> number", "The value of a one-element array."},
    {"addressable_shards", lua_entry<array_shards>,
     "x:addressable_shards() -> {{device, index, shape, data}}",
     "Each device's shard: device id, index ranges per dim ({start, stop}, 0-based, stop\n"
     "  exclusive), local shape, and data (the device's block as a one-device Array)."},
    {"block_until_ready", lua_entry<array_block>, "x:block_until_ready() -> x",
     "Returns x (execution is synchronous)."},
};
constexpr const char* kArrayProperties[] = {"shape",    "dtype", "ndim", "size", "T",
                                            "sharding", "mesh",  "type", "at"};

}  // namespace

void open_lua_array(lua_State* L, int sl) {
  define_type(
      L, {"Array",
          "An array on a mesh's simulated devices (each holds only its shards), or inside\n"
          "  sl.jit a traced value. Fields: x.shape, x.dtype, x.ndim, x.size, x.sharding (a\n"
          "  NamedSharding: .spec, .mesh), x.mesh, x.type (the layout's text, f32[8@X,4]), x.at[i]:set(v) / :add(v) /\n"
          "  :get() (JAX's x.at). Operators + - * / % and unary - are sl.numpy's; x[i] indexes\n"
          "  (0-based; i may be a traced int32 scalar); methods also include sl.numpy's reshape,\n"
          "  sum, mean, astype.",
          lua_entry<array_tostring>, nullptr, udata_gc<ArrayBox>, kArrayMethods,
          lua_entry<array_property>, kArrayProperties});
  define_type(L, {"PRNGKey",
                  "A counter-based random key (sl.random.key).",
                  lua_entry<key_tostring>,
                  nullptr,
                  udata_gc<KeyBox>,
                  {}});
  add_functions(L, sl, "sl", kArrayFunctions);
  lua_newtable(L);
  add_functions(L, lua_gettop(L), "sl.random", kRandomFunctions);
  lua_setfield(L, sl, "random");
  lua_createtable(L, 0, 2);  // sl.AxisType.Explicit / .Auto, as jax.sharding.AxisType
  lua_pushstring(L, "Explicit");
  lua_setfield(L, -2, "Explicit");
  lua_pushstring(L, "Auto");
  lua_setfield(L, -2, "Auto");
  lua_setfield(L, sl, "AxisType");
  luaL_getmetatable(L, "Array");
  open_lua_numpy(L, sl, lua_gettop(L));
  lua_pop(L, 1);
  lua_getfield(L, sl, "numpy");
  add_functions(L, lua_gettop(L), "sl.numpy", kNpArrayFunctions);
  lua_pop(L, 1);
  lua_getfield(L, sl, "sharding");  // made by open_lua_numpy (jax.sharding's names)
  if (lua_istable(L, -1)) add_functions(L, lua_gettop(L), "sl.sharding", kMeshConstructor);
  lua_pop(L, 1);
  open_lua_jit(L, sl);
  // jax.experimental.shard, the tutorials' import of reshard, auto_axes and explicit_axes:
  // the functions sl.sharding has (sl's own).
  lua_createtable(L, 0, 1);
  lua_createtable(L, 0, 3);
  for (const char* name : {"reshard", "auto_axes", "explicit_axes"}) {
    lua_getfield(L, sl, name);
    lua_setfield(L, -2, name);
  }
  lua_setfield(L, -2, "shard");
  lua_setfield(L, sl, "experimental");
}

}  // namespace shell
