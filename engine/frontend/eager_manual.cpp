// engine/frontend/eager_manual.cpp: eager shard_map (eager_manual.h). Every step is a small
// per-device program from the Session's eager cache: splitting the arguments (in_specs),
// each op of the body, assembling the results (out_specs).
#include "engine/frontend/eager_manual.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "engine/frontend/array_print.h"
#include "engine/frontend/numpy.h"
#include "engine/frontend/vma.h"
#include "engine/sharding/shard_geometry.h"

namespace eng::frontend {

namespace {

// The layout of a stacked per-device value: dim 0 over its varying axes (mesh order).
PartitionSpec stack_spec(const Mesh& mesh, uint32_t bits, int rank) {
  std::vector<PartitionSpec::DimAxes> dims(static_cast<size_t>(rank));
  dims[0] = vma_names(mesh, bits);
  return PartitionSpec(std::move(dims));
}

Shape with_leading_one(const Shape& s) {
  std::vector<int64_t> d = s.dims();
  d.insert(d.begin(), 1);
  return Shape(std::move(d));
}

Shape without_leading(const Shape& s) {
  std::vector<int64_t> d = s.dims();
  d.erase(d.begin());
  return Shape(std::move(d));
}

// `a` on `mesh` laid out by spec (through the host when it is placed otherwise).
Result<ArrayRef> placed(const ArrayRef& a, const Mesh& mesh, const PartitionSpec& spec) {
  const NamedSharding want{mesh, spec};
  if (a->array.sharding.mesh == mesh) {
    if (remove_size_one_mesh_axis(a->array.sharding.spec, mesh) ==
        remove_size_one_mesh_axis(spec, mesh))
      return a;
    return reshard_on_host(*a, want);
  }
  ENG_ASSIGN_OR_RETURN(std::vector<double> host, fetch(*a));
  return device_put(host, a->array.shape, a->array.dtype, want);
}

std::string block_key(const Value& v) {
  return fmt::format("{}[{}]{{{}}}", dtype_name(v.dtype), v.shape.to_list(), v.vma);
}

Value per_device(const std::shared_ptr<Trace>& em, ArrayRef data, uint32_t vma) {
  Value v;
  v.shape = without_leading(data->array.shape);
  v.dtype = data->array.dtype;
  v.data = std::move(data);
  v.trace = em;
  v.vma = vma;
  return v;
}

Status check_ours(const Value& v, const std::shared_ptr<Trace>& em, std::string_view fn) {
  ENG_RETURN_IF_ERROR(check_live(v, fn));
  if (v.is_tracer() && v.trace != em)
    return invalid_argument(
        "{}: Encountered an unexpected tracer: a value of another trace (a jit, or another "
        "shard_map call) was used in an eager shard_map",
        fn);
  return ok_status();
}

}  // namespace

std::shared_ptr<Trace> eager_trace(const std::string& name, const Mesh& mesh) {
  auto tr = std::make_shared<Trace>(name, mesh, /*manual=*/true);
  tr->set_eager();
  return tr;
}

Result<std::vector<Value>> Session::apply_eager_manual(std::string_view fn,
                                                       const std::string& statics,
                                                       const std::vector<Operand>& ops,
                                                       const OpFn& op,
                                                       const std::shared_ptr<Trace>& em) {
  const Mesh& mesh = em->mesh();
  EagerKey key{fmt::format("shard_map {}", fn), statics, {mesh.repr()}};
  std::vector<ArrayRef> ins;
  for (const Operand& o : ops) {
    if (!o.array) {
      key.operands.push_back(o.number == std::trunc(o.number) ? "int" : "num");
      ENG_ASSIGN_OR_RETURN(ArrayRef a, device_put({o.number}, Shape{}, number_dtype(ops, o.number),
                                                  {mesh, PartitionSpec()}));
      ins.push_back(std::move(a));
    } else if (o.array->is_tracer()) {
      ENG_RETURN_IF_ERROR(check_ours(*o.array, em, fn));
      key.operands.push_back(block_key(*o.array));
      ins.push_back(o.array->data);
    } else {  // a concrete array (closed over): invariant, the whole array on every device
      key.operands.push_back(fmt::format("{}[{}]", dtype_name(o.array->dtype),
                                         o.array->shape.to_list()));
      ENG_ASSIGN_OR_RETURN(ArrayRef a, placed(o.array->data, mesh, PartitionSpec()));
      ins.push_back(std::move(a));
    }
  }
  ENG_ASSIGN_OR_RETURN(
      std::shared_ptr<Compiled> c,
      cached(key, [&]() -> Result<std::shared_ptr<Compiled>> {
        Trace tr(std::string(fn), mesh, /*manual=*/true);
        std::vector<ValueId> xs;
        for (size_t i = 0; i < ops.size(); ++i) {
          const Operand& o = ops[i];
          const std::string name = fmt::format("x{}", i);
          if (!o.array) {
            xs.push_back(tr.input(name, Shape{}, number_dtype(ops, o.number), PartitionSpec()));
          } else if (o.array->is_tracer()) {
            const Shape& s = o.array->shape;
            const ValueId x = tr.input(name, with_leading_one(s), o.array->dtype,
                                       stack_spec(mesh, o.array->vma, s.rank() + 1));
            xs.push_back(tr.builder().reshape(x, s));
          } else {
            xs.push_back(tr.input(name, o.array->shape, o.array->dtype, PartitionSpec()));
          }
        }
        ENG_ASSIGN_OR_RETURN(std::vector<ValueId> outs, with_context(fn, op(tr, xs)));
        std::vector<ValueId> results;
        std::vector<std::optional<PartitionSpec>> specs;
        for (ValueId o : outs) {
          const uint32_t bits = tr.vma_bits(o);
          const Shape s = tr.info(o).shape;
          results.push_back(tr.builder().reshape(o, with_leading_one(s)));
          tr.add_vma(results.back(), bits);
          specs.push_back(stack_spec(mesh, bits, s.rank() + 1));
        }
        return with_context(fn, Compiled::create(std::move(tr), results, {std::string(fn), specs}));
      }));
  ENG_ASSIGN_OR_RETURN(std::vector<ArrayRef> outs, with_context(fn, c->run(ins)));
  std::vector<Value> values;
  for (size_t k = 0; k < outs.size(); ++k) {
    const ValueId r = c->traced().outputs()[k].value;
    values.push_back(per_device(em, std::move(outs[k]), c->vma()[static_cast<size_t>(r)]));
  }
  return values;
}

Result<std::vector<Value>> eager_blocks(Session& s, const std::shared_ptr<Trace>& em,
                                        const std::vector<Value>& leaves,
                                        const std::vector<PartitionSpec>& specs,
                                        const std::string& fn) {
  const Mesh& mesh = em->mesh();
  EagerKey key{"shard_map in_specs", "", {mesh.repr()}};
  std::vector<ArrayRef> ins;
  Trace check(fn, mesh, /*manual=*/true);  // np::check_spec's errors, as a traced shard_map's
  for (size_t k = 0; k < leaves.size(); ++k) {
    ENG_RETURN_IF_ERROR(check_ours(leaves[k], em, fn));
    if (leaves[k].is_tracer())
      return invalid_argument("{}: argument leaf {} is a per-device value of this shard_map", fn,
                              k + 1);
    ENG_RETURN_IF_ERROR(np::check_spec(check, specs[k], leaves[k].shape,
                                       fmt::format("{}: in_specs[{}]", fn, k + 1)));
    key.operands.push_back(fmt::format("{}[{}] {}", dtype_name(leaves[k].dtype),
                                       leaves[k].shape.to_list(), specs[k].to_string()));
    ENG_ASSIGN_OR_RETURN(ArrayRef a, placed(leaves[k].data, mesh, specs[k]));
    ins.push_back(std::move(a));
  }
  if (leaves.empty()) return std::vector<Value>{};
  ENG_ASSIGN_OR_RETURN(
      std::shared_ptr<Compiled> c, s.cached(key, [&]() -> Result<std::shared_ptr<Compiled>> {
        Trace tr(fn, mesh, /*manual=*/true);
        std::vector<ValueId> results;
        std::vector<std::optional<PartitionSpec>> out;
        for (size_t k = 0; k < leaves.size(); ++k) {
          const Shape block = local_shape(mesh, specs[k], leaves[k].shape);
          const ValueId x = tr.input(fmt::format("x{}", k), block, leaves[k].dtype, specs[k]);
          results.push_back(tr.builder().reshape(x, with_leading_one(block)));
          out.push_back(stack_spec(mesh, vma_of_spec(mesh, specs[k]), block.rank() + 1));
        }
        return Compiled::create(std::move(tr), results, {fn, out});
      }));
  ENG_ASSIGN_OR_RETURN(std::vector<ArrayRef> outs, c->run(ins));
  std::vector<Value> values;
  for (size_t k = 0; k < outs.size(); ++k)
    values.push_back(per_device(em, std::move(outs[k]), vma_of_spec(mesh, specs[k])));
  return values;
}

Result<std::vector<Value>> eager_arguments(Session& s, const std::shared_ptr<Trace>& em,
                                           const CallArgs& args, const std::string& fn) {
  std::vector<PartitionSpec> specs;
  for (size_t k = 0; k < args.leaves.size(); ++k) {
    if (args.leaf_in_specs[k]) {
      specs.push_back(*args.leaf_in_specs[k]);
      continue;
    }
    size_t pos = 0;  // the argument this leaf belongs to
    while (pos + 1 < args.first_leaf.size() && args.first_leaf[pos + 1] <= static_cast<int>(k)) ++pos;
    return invalid_argument("shard_map: in_specs has no spec for argument {}", pos + 1);
  }
  return eager_blocks(s, em, args.leaves, specs, fn);
}

Result<std::vector<ArrayRef>> eager_results(Session& s, const std::shared_ptr<Trace>& em,
                                            const std::vector<Value>& results,
                                            const std::vector<std::optional<PartitionSpec>>& out_specs,
                                            const std::string& fn) {
  const Mesh& mesh = em->mesh();
  std::vector<Value> rs;
  std::vector<uint32_t> bits;
  for (const Value& r : results) {
    ENG_RETURN_IF_ERROR(check_ours(r, em, fn));
    if (r.is_tracer()) {
      rs.push_back(r);
    } else {  // closed over and returned: invariant (JAX's P() for a constant)
      ENG_ASSIGN_OR_RETURN(std::vector<Value> b, eager_blocks(s, em, {r}, {PartitionSpec()}, fn));
      rs.push_back(std::move(b[0]));
    }
    bits.push_back(rs.back().vma);
  }
  ENG_RETURN_IF_ERROR(check_out_vma_bits(mesh, fn, bits, out_specs));
  if (out_specs.empty() && !rs.empty())
    return invalid_argument(
        "{}: out_specs is None (not given), but the function returned {} values: out_specs "
        "says how each result's blocks form it",
        fn, rs.size());
  if (rs.empty()) return std::vector<ArrayRef>{};
  EagerKey key{"shard_map out_specs", "", {mesh.repr()}};
  std::vector<PartitionSpec> specs;
  std::vector<ArrayRef> ins;
  for (size_t k = 0; k < rs.size(); ++k) {
    if (k >= out_specs.size() || !out_specs[k])
      return invalid_argument("{}: out_specs has no spec for result {}", fn, k + 1);
    specs.push_back(*out_specs[k]);
    key.operands.push_back(block_key(rs[k]) + " " + specs.back().to_string());
    ins.push_back(rs[k].data);
  }
  ENG_ASSIGN_OR_RETURN(
      std::shared_ptr<Compiled> c, s.cached(key, [&]() -> Result<std::shared_ptr<Compiled>> {
        Trace tr(fn, mesh, /*manual=*/true);
        std::vector<ValueId> outs;
        std::vector<std::optional<PartitionSpec>> out;
        for (size_t k = 0; k < rs.size(); ++k) {
          const Shape& block = rs[k].shape;
          const ValueId x = tr.input(fmt::format("x{}", k), with_leading_one(block), rs[k].dtype,
                                     stack_spec(mesh, rs[k].vma, block.rank() + 1));
          outs.push_back(tr.builder().reshape(x, block));
          out.push_back(specs[k]);
        }
        return Compiled::create(std::move(tr), outs, {fn, out});
      }));
  return c->run(ins);
}

Result<std::string> eager_repr(const Value& v) {
  const Mesh& mesh = v.trace->mesh();
  ENG_ASSIGN_OR_RETURN(std::vector<double> host, fetch(*v.data));
  const int64_t n = v.shape.numel();
  const std::vector<std::string>& names = mesh.axis_names();
  const std::vector<int64_t>& sizes = mesh.axis_sizes();
  const std::string axes = fmt::format("({},)", fmt::join(names, ", "));
  std::vector<std::string> parts;
  for (int64_t d = 0; d < mesh.num_devices(); ++d) {
    std::vector<int64_t> coord(sizes.size());
    for (int64_t k = static_cast<int64_t>(sizes.size()) - 1, rest = d; k >= 0; --k) {
      coord[static_cast<size_t>(k)] = rest % sizes[static_cast<size_t>(k)];
      rest /= sizes[static_cast<size_t>(k)];
    }
    int64_t slot = 0;  // d's block in the stack: its coordinates along the varying axes
    for (size_t k = 0; k < sizes.size() && k < 32; ++k)
      if (v.vma & (1u << k)) slot = slot * sizes[k] + coord[k];
    const auto first = host.begin() + slot * n;
    const std::vector<double> block(first, first + n);
    const std::string at = coord.size() == 1 ? fmt::format("({},)", coord[0])
                                             : fmt::format("({})", fmt::join(coord, ", "));
    parts.push_back(fmt::format("On TFRT_CPU_{} at mesh coordinates {} = {}:\n{}\n", d, axes, at,
                                array_str(block, v.shape, v.dtype)));
  }
  return fmt::format("{}", fmt::join(parts, "\n"));
}

}  // namespace eng::frontend
