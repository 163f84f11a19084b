// engine/frontend/vma.cpp: varying manual axes inside sl.shard_map (vma.h), with
// Trace::vma_bits / add_vma (trace.h). The rules are JAX's jax/_src/lax/parallel.py and
// shard_map.py at cec06d1 (collective_vma_rule, bind_psum_invariant, _axis_index's,
// _inout_vma_error).
#include "engine/frontend/vma.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/frontend/numpy.h"
#include "engine/sharding/shard_geometry.h"

namespace eng::frontend {

uint32_t vma_of_axes(const Mesh& mesh, const std::vector<std::string>& axes) {
  uint32_t bits = 0;
  for (const std::string& a : axes) {
    const int k = mesh.axis_index(a);
    if (k >= 0 && k < 32 && mesh.axis_sizes()[static_cast<size_t>(k)] > 1) bits |= 1u << k;
  }
  return bits;
}

uint32_t vma_of_spec(const Mesh& mesh, const PartitionSpec& spec) {
  uint32_t bits = 0;
  for (const PartitionSpec::DimAxes& d : spec.dims()) bits |= vma_of_axes(mesh, d);
  return bits;
}

std::vector<std::string> vma_names(const Mesh& mesh, uint32_t bits) {
  std::vector<std::string> out;
  const std::vector<std::string>& names = mesh.axis_names();
  for (size_t k = 0; k < names.size() && k < 32; ++k)
    if (bits & (1u << k)) out.push_back(names[k]);
  return out;
}

std::string vma_string(const Mesh& mesh, uint32_t bits) {
  return vma_string(vma_names(mesh, bits));
}

std::string vma_string(const std::vector<std::string>& n) {
  if (n.empty()) return "";
  return n.size() == 1 ? fmt::format("{{V:{}}}", n[0])
                       : fmt::format("{{V:({})}}", fmt::join(n, ","));
}

std::vector<std::string> vma_of(const Value& v) {
  if (v.is_tracer() && v.trace->eager()) return vma_names(v.trace->mesh(), v.vma);
  if (!v.is_tracer() || !v.trace->manual()) return {};
  return vma_names(v.trace->mesh(), v.trace->vma_bits(v.value));
}

namespace {

bool names_axes(OpKind k) {  // the collectives (and dynamic_slice) over mesh_axes
  return k == OpKind::kAllGather || k == OpKind::kReduceScatter || k == OpKind::kAllReduce ||
         k == OpKind::kAllToAll || k == OpKind::kCollectivePermute || k == OpKind::kDynamicSlice;
}

}  // namespace

uint32_t op_vma(const Mesh& mesh, const Instr& in, uint32_t operands) {
  if (names_axes(in.kind)) return operands | vma_of_axes(mesh, in.attrs.mesh_axes);
  return operands;
}

uint32_t out_vma(const Mesh& mesh, const Instr& in, uint32_t operands) {
  const uint32_t axes = vma_of_axes(mesh, in.attrs.mesh_axes);
  if (in.kind == OpKind::kAxisIndex) return axes;
  if (in.kind == OpKind::kAllReduce) return operands & ~axes;  // psum_invariant
  return op_vma(mesh, in, operands);
}

// ---- Trace's derivation ---------------------------------------------------------------------

uint32_t Trace::vma_bits(ValueId v) const {
  if (!manual_) return 0;
  const Program& p = b_.program();
  auto given = [&](ValueId x) {
    auto it = vma_given_.find(x);
    return it == vma_given_.end() ? 0u : it->second;
  };
  while (vma_.size() < p.values().size()) vma_.push_back(given(static_cast<ValueId>(vma_.size())));
  for (; vma_instrs_ < p.instrs().size(); ++vma_instrs_) {
    const Instr& in = p.instrs()[vma_instrs_];
    uint32_t operands = 0;
    for (ValueId i : in.inputs) operands |= vma_[static_cast<size_t>(i)];
    const uint32_t out = out_vma(mesh_, in, operands);
    for (ValueId o : in.outputs) vma_[static_cast<size_t>(o)] = out | given(o);
  }
  return v >= 0 && static_cast<size_t>(v) < vma_.size() ? vma_[static_cast<size_t>(v)] : 0;
}

void Trace::add_vma(ValueId v, uint32_t bits) {
  vma_given_[v] |= bits;
  if (v >= 0 && static_cast<size_t>(v) < vma_.size()) vma_[static_cast<size_t>(v)] |= bits;
}

// ---- pcast, check_vma, grad ------------------------------------------------------------------

Result<ValueId> pcast(Trace& tr, ValueId x, const std::vector<std::string>& axes_in,
                      std::string_view to) {
  if (to != "varying" && to != "reduced" && to != "unreduced")
    return invalid_argument(
        "pcast: Got unexpected `to` value. Allowed `to` values are: {{'unreduced', 'reduced', "
        "'varying'}}, got '{}'",
        to);
  if (axes_in.empty()) return x;
  ENG_ASSIGN_OR_RETURN(std::vector<std::string> axes, np::group_axes(tr, "pcast", axes_in));
  const uint32_t want = vma_of_axes(tr.mesh(), axes), has = tr.vma_bits(x);
  const std::string type = tr.info(x).type_string() + vma_string(tr.mesh(), has);
  if ((has & want) && (has & want) != want)
    return invalid_argument(
        "jax.lax.pcast can only accept axis_name which corresponds to one of varying, "
        "unreduced, reduced or invarying state of the input. Got input type: {}, axes: ({}) "
        "and input state: {{'varying', 'invarying'}}",
        type, fmt::join(axes, ", "));
  const std::string_view from = (has & want) ? "varying" : "invarying";
  if (from != "invarying" || to != "varying")
    return invalid_argument("pcast: Unsupported pcast from={}, to='{}'{}", from, to,
                            to == "varying" ? "" : " (shardlab has no reduced/unreduced types)");
  // The values stay; the type changes. An identity op carries the new vma (a convert to its
  // own dtype), so that grad sums its cotangent over `axes` (pvary's transpose).
  const ValueId y = tr.builder().convert(x, tr.info(x).dtype);
  tr.add_vma(y, want);
  return y;
}

namespace {

std::string tuple_text(const std::vector<std::string>& items) {
  return items.size() == 1 ? fmt::format("({},)", items[0])
                           : fmt::format("({})", fmt::join(items, ", "));
}

}  // namespace

Status check_out_vma(const Trace& tr, std::string_view fn, const std::vector<ValueId>& results,
                     const std::vector<std::optional<PartitionSpec>>& out_specs) {
  if (!tr.manual()) return ok_status();
  std::vector<uint32_t> bits;
  for (ValueId r : results) bits.push_back(tr.vma_bits(r));
  return check_out_vma_bits(tr.mesh(), fn, bits, out_specs);
}

Status check_out_vma_bits(const Mesh& mesh, std::string_view fn, const std::vector<uint32_t>& results,
                          const std::vector<std::optional<PartitionSpec>>& out_specs) {
  std::vector<std::string> msgs;
  for (size_t i = 0; i < results.size() && i < out_specs.size(); ++i) {
    if (!out_specs[i]) continue;
    const PartitionSpec& spec = *out_specs[i];
    std::vector<std::string> unmentioned;
    uint32_t named = 0;
    for (const PartitionSpec::DimAxes& d : spec.dims())
      for (const std::string& a : d)
        if (mesh.has_axis(a)) named |= 1u << mesh.axis_index(a);
    for (size_t k = 0; k < mesh.axis_names().size(); ++k)
      if (!(named & (1u << k))) unmentioned.push_back(mesh.axis_names()[k]);
    const uint32_t got = results[i];
    if (!(got & ~named)) continue;
    const std::string key = results.size() == 1 ? "" : fmt::format("[{}]", i);
    if (unmentioned.size() > 1) {
      msgs.push_back(fmt::format(
          "* out_specs{} is {} which implies that the corresponding output value is only "
          "varying across mesh axes {{{}}} and not {{{}}}, but it was inferred to be possibly "
          "varying over {{{}}}",
          key, spec.to_string(), fmt::join(vma_names(mesh, named), ","),
          fmt::join(vma_names(mesh, got & ~named), ","), fmt::join(vma_names(mesh, got), ",")));
    } else {
      msgs.push_back(fmt::format(
          "* out_specs{} is {} which implies that the corresponding output value is replicated "
          "across mesh axis '{}', but could not infer replication over any axes",
          key, spec.to_string(), unmentioned[0]));
    }
  }
  if (msgs.empty()) return ok_status();
  if (msgs.size() == 1) msgs[0] = msgs[0].substr(2);  // no bullet for one
  std::vector<std::string> sizes, names;
  for (size_t k = 0; k < mesh.axis_names().size(); ++k) {
    sizes.push_back(std::to_string(mesh.axis_sizes()[k]));
    names.push_back("'" + mesh.axis_names()[k] + "'");
  }
  return invalid_argument(
      "shard_map applied to the function '{}' was given out_specs which require replication "
      "which can't be statically inferred given the mesh:\n\nThe mesh given has shape {} with "
      "corresponding axis names {}.\n\n{}\n\nCheck if these output values are meant to be "
      "replicated over those mesh axes. If not, consider revising the corresponding out_specs "
      "entries. If so, consider disabling the check by passing the check_vma=False argument to "
      "`jax.shard_map`.",
      fn, tuple_text(sizes), tuple_text(names), fmt::join(msgs, "\n\n"));
}

CotangentHook vma_cotangent_hook(const Trace& tr) {
  return [&tr](Builder& b, const Instr& in, ValueId operand, ValueId ct) -> ValueId {
    uint32_t operands = 0;
    for (ValueId i : in.inputs) operands |= tr.vma_bits(i);
    uint32_t over = op_vma(tr.mesh(), in, operands);
    // pcast's result varies beyond its operand (a cast, not a rule): its axes count too
    if (in.kind != OpKind::kAllReduce) over |= tr.vma_bits(in.outputs[0]);
    const uint32_t diff = over & ~tr.vma_bits(operand);
    if (!diff) return ct;
    OpAttrs a;
    a.mesh_axes = vma_names(tr.mesh(), diff);
    a.group_size = axes_size(tr.mesh(), a.mesh_axes);
    return b.emit(OpKind::kAllReduce, {ct}, a)[0];
  };
}

}  // namespace eng::frontend
