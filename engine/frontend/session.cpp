// engine/frontend/session.cpp: the current mesh, the trace stack and `apply` with its eager
// cache (one Compiled per op signature, least recently used evicted first).
#include "engine/frontend/session.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "engine/base/hash.h"
#include "engine/sharding/shard_geometry.h"

namespace eng::frontend {

Value Value::concrete(ArrayRef a) {
  Value v;
  v.shape = a->array.shape;
  v.dtype = a->array.dtype;
  v.data = std::move(a);
  return v;
}

Value Value::tracer(std::shared_ptr<Trace> tr, ValueId id) {
  Value v;
  v.shape = tr->info(id).shape;
  v.dtype = tr->info(id).dtype;
  v.trace = std::move(tr);
  v.value = id;
  return v;
}

Status check_live(const Value& a, std::string_view fn) {
  if (!a.deleted) return ok_status();
  return failed_precondition("{}: Array has been deleted with shape={}[{}].", fn,
                             dtype_long_name(a.dtype), a.shape.to_list());
}

Result<NamedSharding> sharding_of(const Value& a) {
  if (!a.is_tracer()) return a.data->array.sharding;
  if (a.trace->eager()) return NamedSharding{a.trace->mesh(), PartitionSpec()};  // a block
  ENG_ASSIGN_OR_RETURN(PartitionSpec spec, a.trace->sharding_of(a.value));
  return NamedSharding{a.trace->mesh(), spec};
}

const std::vector<AxisType>& axis_types_of(const Value& a) {
  return a.is_tracer() ? a.trace->axis_types() : a.data->array.sharding.mesh.axis_types();
}

NamedSharding type_sharding(const NamedSharding& s, const std::vector<AxisType>& types) {
  std::vector<PartitionSpec::DimAxes> dims = s.spec.dims();
  for (auto& axes : dims)
    std::erase_if(axes, [&](const std::string& a) {
      const int i = s.mesh.axis_index(a);
      return i < 0 || static_cast<size_t>(i) >= types.size() || types[i] != AxisType::kExplicit;
    });
  return NamedSharding{s.mesh.with_axis_types(types), PartitionSpec(std::move(dims), s.spec.partial())};
}

NamedSharding type_sharding_of(const Value& a, const NamedSharding& s) {
  if (a.is_tracer() && !a.trace->eager())  // an eager shard_map's per-device value has no id
    if (const Mesh* view = a.trace->view_of(a.value))
      if (std::optional<PartitionSpec> vs = a.trace->to_view(*view, s.spec))
        return type_sharding({*view, *vs}, view->axis_types());
  return type_sharding(s, axis_types_of(a));
}

std::string unreduced_string(const NamedSharding& s) {
  std::vector<std::string> axes;
  for (const std::string& a : s.mesh.axis_names())
    if (std::find(s.spec.partial().begin(), s.spec.partial().end(), a) != s.spec.partial().end())
      axes.push_back(a);
  if (axes.empty()) return "";
  return axes.size() == 1 ? fmt::format("{{U:{}}}", axes[0])
                          : fmt::format("{{U:({})}}", fmt::join(axes, ","));
}

size_t EagerKeyHash::operator()(const EagerKey& k) const {
  uint64_t h = hash_mix(hash_bytes(k.fn), hash_bytes(k.statics));
  for (const std::string& o : k.operands) h = hash_mix(h, hash_bytes(o));
  return static_cast<size_t>(h);
}

const Mesh& Session::mesh() const {
  static const Mesh kOneDevice;
  return mesh_ ? *mesh_ : kOneDevice;
}

std::shared_ptr<Trace> Session::active_trace() const {
  return traces_.empty() ? nullptr : traces_.back();
}

void Session::pop_trace() {
  if (!traces_.empty()) traces_.pop_back();
}

std::string AbstractMesh::to_string() const {
  std::vector<std::string> axes, types;
  for (size_t i = 0; i < axis_names.size(); ++i) {
    axes.push_back(fmt::format("'{}': {}", axis_names[i], axis_sizes[i]));
    types.push_back(i < axis_types.size() ? axis_types[i] : "Auto");
  }
  if (axes.empty()) return "AbstractMesh()";
  return fmt::format("AbstractMesh({}, axis_types=({}{}))", fmt::join(axes, ", "),
                     fmt::join(types, ", "), types.size() == 1 ? "," : "");
}

AbstractMesh Session::abstract_mesh() const {
  const std::shared_ptr<Trace> tr = active_trace();
  if (tr && tr->view()) {  // use_abstract_mesh's
    AbstractMesh a{tr->view()->axis_names(), tr->view()->axis_sizes(), {}};
    for (AxisType t : tr->view()->axis_types()) a.axis_types.push_back(std::string(axis_type_name(t)));
    return a;
  }
  const Mesh& m = tr ? tr->mesh() : mesh();
  AbstractMesh a{m.axis_names(), m.axis_sizes(), {}};
  for (AxisType t : tr ? tr->axis_types() : m.axis_types())
    a.axis_types.push_back(std::string(axis_type_name(tr && tr->manual() ? AxisType::kManual : t)));
  return a;
}

namespace {

std::string operand_key(const Operand& o) {
  if (!o.array) return o.number == std::trunc(o.number) ? "int" : "num";
  const NamedSharding& s = o.array->data->array.sharding;
  return fmt::format("{}[{}]{}@{}", dtype_name(o.array->dtype), o.array->shape.to_list(),
                     remove_size_one_mesh_axis(s.spec, s.mesh).to_string(), s.mesh.repr());
}

}  // namespace

// x + 1 stays int32, x + 0.5 is float32 (session.h).
DType number_dtype(const std::vector<Operand>& ops, double number) {
  for (const Operand& o : ops) {
    if (!o.array) continue;
    if (o.array->dtype != DType::kI32) return o.array->dtype;
    return number == std::trunc(number) ? DType::kI32 : DType::kF32;
  }
  return DType::kF32;
}

Result<std::vector<Value>> Session::apply(std::string_view fn, const std::string& statics,
                                          const std::vector<Operand>& ops, const OpFn& op) {
  std::shared_ptr<Trace> tr;
  for (const Operand& o : ops)
    if (o.array) ENG_RETURN_IF_ERROR(check_live(*o.array, fn));
  for (const Operand& o : ops) {
    if (!o.array || !o.array->is_tracer()) continue;
    if (o.array->trace != active_trace())
      return invalid_argument(
          "{}: Encountered an unexpected tracer: an array traced by a jit that has returned (or "
          "by another jit) was used here; return it from the function instead",
          fn);
    tr = o.array->trace;
  }
  if (!tr) tr = active_trace();
  if (tr && tr->eager()) return apply_eager_manual(fn, statics, ops, op, tr);  // eager shard_map
  if (tr) return apply_traced(fn, ops, op);  // constants inside jit too
  return apply_eager(fn, statics, ops, op);
}

Result<std::vector<Value>> Session::apply_traced(std::string_view fn,
                                                 const std::vector<Operand>& ops, const OpFn& op) {
  std::shared_ptr<Trace> tr = active_trace();
  std::vector<ValueId> ins;
  for (const Operand& o : ops) {
    if (!o.array) {
      ins.push_back(tr->scalar(o.number, number_dtype(ops, o.number)));
    } else if (o.array->is_tracer()) {
      ins.push_back(o.array->value);
    } else {
      if (!(o.array->data->array.sharding.mesh == tr->mesh()))
        return invalid_argument("{}: an array on {} used inside a function traced on {}", fn,
                                o.array->data->array.sharding.mesh.to_string(),
                                tr->mesh().to_string());
      ins.push_back(tr->capture(o.array->data));  // a constvar
    }
  }
  ENG_ASSIGN_OR_RETURN(std::vector<ValueId> outs, with_context(fn, op(*tr, ins)));
  std::vector<Value> values;
  for (ValueId v : outs) values.push_back(Value::tracer(tr, v));
  return values;
}

// The eager cache (LRU, kEagerCacheCapacity entries): the entry for key, made by make on a miss.
Result<std::shared_ptr<Compiled>> Session::cached(
    EagerKey key, const std::function<Result<std::shared_ptr<Compiled>>()>& make) {
  if (auto it = eager_.find(key); it != eager_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);  // most recently used
    return it->second->second;
  }
  ENG_ASSIGN_OR_RETURN(std::shared_ptr<Compiled> c, make());
  ++eager_compiles_;
  if (eager_.size() >= kEagerCacheCapacity) {
    eager_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(key, c);
  eager_.emplace(std::move(key), lru_.begin());
  return c;
}

Result<std::shared_ptr<Compiled>> Session::eager_compiled(std::string_view fn, EagerKey key,
                                                          const std::vector<Operand>& ops,
                                                          const Mesh& mesh, const OpFn& op) {
  return cached(std::move(key), [&]() -> Result<std::shared_ptr<Compiled>> {
    Trace tr(std::string(fn), mesh);
    std::vector<ValueId> ins;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Operand& o = ops[i];
      const std::string name = fmt::format("x{}", i);
      ins.push_back(o.array ? tr.input(name, o.array->shape, o.array->dtype,
                                       o.array->data->array.sharding.spec)
                            : tr.input(name, Shape{}, number_dtype(ops, o.number), PartitionSpec()));
    }
    ENG_ASSIGN_OR_RETURN(std::vector<ValueId> outs, with_context(fn, op(tr, ins)));
    return with_context(fn, Compiled::create(std::move(tr), outs, {std::string(fn), {}}));
  });
}

Result<std::vector<Value>> Session::apply_eager(std::string_view fn, const std::string& statics,
                                                const std::vector<Operand>& ops, const OpFn& op) {
  const Mesh* m = nullptr;
  EagerKey key{std::string(fn), statics, {}};
  for (const Operand& o : ops) {
    key.operands.push_back(operand_key(o));
    if (!o.array) continue;
    const Mesh& om = o.array->data->array.sharding.mesh;
    if (m && !(*m == om))
      return invalid_argument("{}: operands live on different meshes: {} and {}", fn,
                              m->to_string(), om.to_string());
    m = &om;
  }
  if (!m) m = &mesh();
  ENG_ASSIGN_OR_RETURN(std::shared_ptr<Compiled> c,
                       eager_compiled(fn, std::move(key), ops, *m, op));
  std::vector<ArrayRef> ins;
  for (const Operand& o : ops) {
    if (o.array) {
      ins.push_back(o.array->data);
    } else {
      ENG_ASSIGN_OR_RETURN(ArrayRef a, device_put({o.number}, Shape{}, number_dtype(ops, o.number),
                                                  {*m, PartitionSpec()}));
      ins.push_back(std::move(a));
    }
  }
  ENG_ASSIGN_OR_RETURN(std::vector<ArrayRef> outs, with_context(fn, c->run(ins)));
  std::vector<Value> values;
  for (ArrayRef& a : outs) values.push_back(Value::concrete(std::move(a)));
  return values;
}

}  // namespace eng::frontend
