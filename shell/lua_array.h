// shell/lua_array.h: users' own arrays in Lua (issue 13; docs/frontend.md): the Array userdata
// (concrete, on a mesh's simulated devices, or a tracer inside sl.jit), the current mesh
// (sl.set_mesh), and `apply`, the one path every sl.numpy op takes: eager (compiled once per
// signature and cached, then run) or traced (recorded into the active sl.jit trace).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/frontend/trace.h"
#include "shell/lua_binding.h"

namespace shell {

struct ArrayBox {
  eng::frontend::ArrayRef data;                 // concrete: the shards (null for a tracer)
  std::shared_ptr<eng::frontend::Trace> trace;  // a tracer: the trace it belongs to
  eng::ValueId value = eng::kNoValue;           // ... and its value there
  eng::Shape shape;
  eng::DType dtype = eng::DType::kF32;
  bool deleted = false;  // donated to a jitted call (donate_argnums): its buffers are gone
  bool is_tracer() const { return trace != nullptr; }
};
// JAX's error for a donated array used again: "Array has been deleted with shape=float32[3]."
Status check_live(const ArrayBox& a, std::string_view fn);
template <>
struct LuaType<ArrayBox> {
  static constexpr const char* kName = "Array";
};

// The mesh arrays are created on when no sharding names one: sl.set_mesh's, else one device.
const eng::Mesh& current_mesh();
void set_current_mesh(std::optional<eng::Mesh> mesh);

// The innermost sl.jit trace being recorded, or null; pushed and popped by lua_jit.cpp.
std::shared_ptr<eng::frontend::Trace> active_trace();
void push_trace(std::shared_ptr<eng::frontend::Trace> tr);
void pop_trace();
int trace_depth();  // number of active traces

Result<ArrayBox*> arg_array(lua_State* L, int idx, std::string_view fn, std::string_view name = {});
void push_array(lua_State* L, ArrayBox box);
void push_concrete(lua_State* L, eng::frontend::ArrayRef a);
// x.sharding's spec: a concrete array's, or for a tracer what the partitioner gives it so far.
Result<eng::NamedSharding> array_sharding(const ArrayBox& a);
// The array as NumPy prints it (a tracer as JAX does): shell/lua_array_print.cpp.
Result<std::string> array_repr(const ArrayBox& a);

// One operand of an op: an Array or a Lua number.
struct Operand {
  ArrayBox* array = nullptr;
  double number = 0;
};
Result<Operand> arg_operand(lua_State* L, int idx, std::string_view fn, std::string_view name = {});
// The integers of the shape table at idx ({2, -1}); "fn: shape[2] is not an integer" otherwise.
Result<std::vector<int64_t>> read_shape_table(lua_State* L, int idx, std::string_view fn);

// The op on traced values; returns its results.
using OpFn = std::function<Result<std::vector<eng::ValueId>>(eng::frontend::Trace&,
                                                             std::span<const eng::ValueId>)>;
// Applies op to operands and pushes its results (arrays). `key` names the op and its static
// arguments (axis, shape, ...): with the operands' types it is the eager cache key.
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
// Pushes traced value v of tr as an Array (a tracer).
void push_tracer(lua_State* L, const std::shared_ptr<eng::frontend::Trace>& tr, eng::ValueId v);

// sl.typeof / sl.visualize read an Array through this (lua_sharding.cpp calls it first).
bool array_type_parts(lua_State* L, int idx, eng::Shape* shape, eng::NamedSharding* sharding,
                      std::string* dtype);

// sl.make_mesh, arrays, sl.random, then sl.numpy and sl.jit (registered in bindings.cpp).
void open_lua_array(lua_State* L, int sl);
void open_lua_numpy(lua_State* L, int sl, int array_methods);  // sl.numpy (also sl.np)
void open_lua_jit(lua_State* L, int sl);                       // sl.jit, sl.grad, ...

}  // namespace shell
