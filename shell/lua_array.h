// shell/lua_array.h: users' own arrays in Lua (issue 13; docs/frontend.md): the Array userdata
// (a front-end Value: concrete, on a mesh's simulated devices, or a tracer inside sl.jit), the
// session (engine/frontend/session.h: current mesh, traces, eager cache) and `apply`, the one
// path every sl.numpy op takes.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/frontend/device_grid.h"
#include "engine/frontend/session.h"
#include "shell/lua_binding.h"

namespace shell {

// An Array userdata is the front-end's Value (engine/frontend/session.h).
using ArrayBox = eng::frontend::Value;
using eng::frontend::check_live;
template <>
struct LuaType<ArrayBox> {
  static constexpr const char* kName = "Array";
};

// This interpreter's front-end session: the current mesh (sl.set_mesh, else one device), the
// sl.jit traces being recorded, the eager cache (shell/context.h holds it).
eng::frontend::Session& session(lua_State* L);
const eng::Mesh& current_mesh(lua_State* L);

Result<ArrayBox*> arg_array(lua_State* L, int idx, std::string_view fn, std::string_view name = {});
void push_array(lua_State* L, ArrayBox box);
void push_concrete(lua_State* L, eng::frontend::ArrayRef a);

// One operand of an op: an Array or a Lua number.
using Operand = eng::frontend::Operand;
Result<Operand> arg_operand(lua_State* L, int idx, std::string_view fn, std::string_view name = {});
// The integers of the shape table at idx ({2, -1}); "fn: shape[2] is not an integer" otherwise.
Result<std::vector<int64_t>> read_shape_table(lua_State* L, int idx, std::string_view fn);

using OpFn = eng::frontend::OpFn;
// Applies op to operands (Session::apply: eager or traced) and pushes its results (arrays).
// `key` names the op's static arguments (axis, shape, ...): with the operands' types it is the
// eager cache key.
Result<int> apply(lua_State* L, std::string_view fn, const std::string& key,
                  const std::vector<Operand>& operands, const OpFn& op);

// Where a new array goes (sl.zeros's and np.zeros's options): its dtype and sharding.
struct Placement {
  eng::DType dtype = eng::DType::kF32;
  bool dtype_given = false;
  eng::NamedSharding sharding;  // on the current mesh unless the options name one
};
// {dtype=, sharding | out_sharding = sl.P(...), mesh=} or a dtype name at idx (may be none).
Result<Placement> read_placement(lua_State* L, int idx, std::string_view fn);
// Places host values (row-major) as p says and pushes the Array.
Result<int> put_values(lua_State* L, std::string_view fn, const std::vector<double>& values,
                       const eng::Shape& shape, const Placement& p);
// A shape at idx: a number (rank 1) or a table {d0, d1, ...}.
Result<eng::Shape> read_dims(lua_State* L, int idx, std::string_view fn);

// A PartitionSpec argument (sl.P(...)) or nil.
Result<std::optional<eng::PartitionSpec>> opt_spec(lua_State* L, int idx, std::string_view fn,
                                                   std::string_view name);

// {out_sharding = sl.P(...)} at idx (nil or none: no out_sharding).
Result<std::optional<eng::PartitionSpec>> read_out_sharding(lua_State* L, int idx,
                                                            std::string_view fn);
// A jax.sharding.AbstractMesh as Lua sees it (sl.get_abstract_mesh's value): a table
// {axis_names, axis_sizes, axis_types, shape = {name = size}, text} printing as JAX's.
void push_abstract_mesh(lua_State* L, const eng::frontend::AbstractMesh& a);
// Pushes traced value v of tr as an Array (a tracer).
void push_tracer(lua_State* L, const std::shared_ptr<eng::frontend::Trace>& tr, eng::ValueId v);

// sl.typeof / sl.visualize read an Array through this (lua_sharding.cpp calls it first).
bool array_type_parts(lua_State* L, int idx, eng::Shape* shape, eng::NamedSharding* sharding,
                      std::string* dtype);

// Pushes what sl.set_mesh returns: its __close sets `prev` again (lua_mesh_context.cpp).
void push_mesh_context(lua_State* L, std::optional<eng::Mesh> prev);

// numpy's object array of devices (engine/frontend/device_grid.h; lua_mesh_context.cpp).
void push_device_grid(lua_State* L, std::vector<int64_t> ids, std::vector<int64_t> shape);
const eng::frontend::DeviceGrid* to_device_grid(lua_State* L, int idx);

// sl.make_mesh, arrays, sl.random, then sl.numpy and sl.jit (registered in bindings.cpp).
void open_lua_array(lua_State* L, int sl);
void open_lua_numpy(lua_State* L, int sl, int array_methods);  // sl.numpy (also sl.np)
void open_lua_jit(lua_State* L, int sl);                       // sl.jit, sl.grad, ...

}  // namespace shell
