// engine/frontend/session.h: the front-end's per-interpreter runtime (issue 29; docs/frontend.md):
// a Value (a concrete array on a mesh's simulated devices, or a tracer of an active trace),
// and a Session holding the current mesh (sl.set_mesh), the stack of traces being recorded
// (sl.jit inside sl.jit) and the eager cache, behind `apply`, the one path every numpy-style
// op takes: eager (compiled once per signature, cached, then run) or traced (recorded into
// the innermost trace). No Lua here: shell/lua_array.cpp binds it.
//
//   Session s;
//   Value x = Value::concrete(device_put({1, 2}, Shape{2}, DType::kF32, {s.mesh(), {}}).value());
//   ENG_ASSIGN_OR_RETURN(std::vector<Value> y,
//                        s.apply("add", "", {Operand{&x}, Operand{&x}}, op));  // x + x
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/frontend/trace.h"

namespace eng::frontend {

// A front-end array: concrete (its shards) or a tracer (a value of a trace being recorded).
struct Value {
  ArrayRef data;                 // concrete: the shards (null for a tracer)
  std::shared_ptr<Trace> trace;  // a tracer: the trace it belongs to
  ValueId value = kNoValue;      // ... and its value there
  Shape shape;
  DType dtype = DType::kF32;
  bool deleted = false;  // donated to a jitted call (donate_argnums): its buffers are gone
  // trace->eager(): a per-device value of an eager shard_map (eager_manual.h): `data` stacks
  // the devices' blocks over these varying manual axes (mesh bits), `shape` is a block's.
  uint32_t vma = 0;
  bool is_tracer() const { return trace != nullptr; }
  const Mesh& mesh() const { return is_tracer() ? trace->mesh() : data->array.sharding.mesh; }

  static Value concrete(ArrayRef a);
  static Value tracer(std::shared_ptr<Trace> tr, ValueId v);
};

// JAX's error for a donated array used again: "Array has been deleted with shape=float32[3]."
Status check_live(const Value& a, std::string_view fn);
// x.sharding: a concrete array's, or for a tracer what the partitioner gives it so far.
Result<NamedSharding> sharding_of(const Value& a);
// The axis types in scope for a: a tracer's trace's (switched inside auto_axes /
// explicit_axes), a concrete array's mesh's.
const std::vector<AxisType>& axis_types_of(const Value& a);
// jax.typeof(a).sharding from a's sharding `s`: the spec names only the axes Explicit in
// `types` (Auto axes are the compiler's business), on the mesh with those types.
NamedSharding type_sharding(const NamedSharding& s, const std::vector<AxisType>& types);
// The same for a's sharding s: a tracer made under use_abstract_mesh is typed on that mesh.
NamedSharding type_sharding_of(const Value& a, const NamedSharding& s);
// The unreduced axes of a type as JAX prints them after it: "{U:Y}", "{U:(X,Y)}" (mesh
// order); "" when none.
std::string unreduced_string(const NamedSharding& s);

// One operand of an op: an array or a number (a scalar of the arrays' float dtype).
struct Operand {
  const Value* array = nullptr;
  double number = 0;
};
// The dtype a number takes next to these operands (JAX's weak types): the first array's float
// dtype; next to int32, int32 for an integer and float32 otherwise; float32 with no array.
DType number_dtype(const std::vector<Operand>& ops, double number);

// The op on traced values; returns its results.
using OpFn = std::function<Result<std::vector<ValueId>>(Trace&, std::span<const ValueId>)>;

// The eager cache's key: the op, its static arguments and its operands' types (dtype, shape,
// sharding without size-1 axes, mesh; "num" for a number).
struct EagerKey {
  std::string fn;
  std::string statics;
  std::vector<std::string> operands;
  bool operator==(const EagerKey&) const = default;
};
struct EagerKeyHash {
  size_t operator()(const EagerKey& k) const;
};

// jax.sharding.get_abstract_mesh(): the axes of the mesh in scope with their types, printed
// "AbstractMesh('X': 2, 'Y': 4, axis_types=(Explicit, Explicit))".
struct AbstractMesh {
  std::vector<std::string> axis_names;
  std::vector<int64_t> axis_sizes;
  std::vector<std::string> axis_types;  // per axis: "Auto", "Explicit" or "Manual"
  std::string to_string() const;
};

class Session {
 public:
  // The eager cache holds this many executables; the least recently used one goes first.
  static constexpr size_t kEagerCacheCapacity = 512;

  // The mesh arrays are created on when no sharding names one: set_mesh's, else one device.
  const Mesh& mesh() const;
  const std::optional<Mesh>& mesh_set() const { return mesh_; }
  void set_mesh(std::optional<Mesh> mesh) { mesh_ = std::move(mesh); }

  // The innermost trace being recorded, or null; a traced call pushes and pops it.
  std::shared_ptr<Trace> active_trace() const;
  void push_trace(std::shared_ptr<Trace> tr) { traces_.push_back(std::move(tr)); }
  void pop_trace();
  int trace_depth() const { return static_cast<int>(traces_.size()); }
  // The abstract mesh in scope: the innermost trace's, with its axis types in scope
  // (Trace::axis_types: auto_axes / explicit_axes switch some; a shard_map body's axes are
  // Manual), else the current mesh's.
  AbstractMesh abstract_mesh() const;

  // Applies op to operands: traced into the active trace when there is one (or an operand is
  // its tracer), else compiled once per signature (`statics` names the op's static arguments:
  // axis, shape, ...) and run. Errors: a deleted operand, a tracer of a trace that has
  // returned, operands on different meshes, and the op's own (prefixed with fn).
  Result<std::vector<Value>> apply(std::string_view fn, const std::string& statics,
                                   const std::vector<Operand>& operands, const OpFn& op);

  // The eager cache's program for key, made by make on a miss (eager shard_map's programs,
  // engine/frontend/eager_manual.cpp).
  Result<std::shared_ptr<Compiled>> cached(EagerKey key,
                                           const std::function<Result<std::shared_ptr<Compiled>>()>& make);

  // The eager cache: entries now, and compiles so far (misses).
  size_t eager_cache_size() const { return eager_.size(); }
  int64_t eager_compiles() const { return eager_compiles_; }

 private:
  using LruList = std::list<std::pair<EagerKey, std::shared_ptr<Compiled>>>;
  Result<std::vector<Value>> apply_traced(std::string_view fn, const std::vector<Operand>& ops,
                                          const OpFn& op);
  Result<std::vector<Value>> apply_eager(std::string_view fn, const std::string& statics,
                                         const std::vector<Operand>& ops, const OpFn& op);
  // An op on an eager shard_map's per-device values (eager_manual.cpp).
  Result<std::vector<Value>> apply_eager_manual(std::string_view fn, const std::string& statics,
                                                const std::vector<Operand>& ops, const OpFn& op,
                                                const std::shared_ptr<Trace>& em);
  Result<std::shared_ptr<Compiled>> eager_compiled(std::string_view fn, EagerKey key,
                                                   const std::vector<Operand>& ops,
                                                   const Mesh& mesh, const OpFn& op);

  std::optional<Mesh> mesh_;                    // set_mesh's; none: one device
  std::vector<std::shared_ptr<Trace>> traces_;  // active traces, innermost last
  LruList lru_;                                 // most recently used first
  std::unordered_map<EagerKey, LruList::iterator, EagerKeyHash> eager_;
  int64_t eager_compiles_ = 0;
};

}  // namespace eng::frontend
