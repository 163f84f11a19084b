// engine/frontend/jaxpr.cpp: jax.make_jaxpr's text (jaxpr.h).
#include "engine/frontend/jaxpr.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <vector>

#include "engine/frontend/vma.h"
#include "engine/sharding/shard_geometry.h"

namespace eng::frontend {

namespace {

// Fresh jaxpr variable names: a, b, ..., z, ba, ...
struct Namer {
  int next = 0;
  std::map<ValueId, std::string> names;
  std::string fresh() { return value_name(next++); }
  const std::string& of(ValueId v) {
    auto it = names.find(v);
    if (it == names.end()) it = names.emplace(v, fresh()).first;
    return it->second;
  }
};

std::string specs_text(const std::vector<NamedSharding>& s) {
  std::vector<std::string> items;
  for (const NamedSharding& n : s) items.push_back(n.spec.to_string());
  return items.size() == 1 ? fmt::format("({},)", items[0])
                           : fmt::format("({})", fmt::join(items, ", "));
}

std::string axes_tuple(const std::vector<std::string>& axes) {
  std::vector<std::string> q;
  for (const std::string& a : axes) q.push_back("'" + a + "'");
  return q.size() == 1 ? fmt::format("({},)", q[0]) : fmt::format("({})", fmt::join(q, ", "));
}

// The body's `{ lambda consts ; args. let ... in (outs) }`, each line indented by `indent`.
std::string body_text(const Compiled& c, Namer& n, const std::string& indent) {
  const Program& p = c.traced();
  const Mesh& mesh = c.mesh();
  const bool manual = !c.vma().empty();
  auto bits = [&](ValueId v) {
    return manual && static_cast<size_t>(v) < c.vma().size() ? c.vma()[static_cast<size_t>(v)] : 0u;
  };
  auto type = [&](ValueId v, uint32_t b) { return p.value(v).type_string() + vma_string(mesh, b); };
  auto decl = [&](ValueId v) { return fmt::format("{}:{}", n.of(v), type(v, bits(v))); };
  const size_t inputs = c.in_shardings().size();
  std::vector<std::string> consts, args;  // named as JAX names them: constvars first
  for (size_t k = inputs; k < p.args().size(); ++k) consts.push_back(decl(p.args()[k].value));
  for (size_t k = 0; k < inputs && k < p.args().size(); ++k) args.push_back(decl(p.args()[k].value));
  std::string out = fmt::format("{{ lambda {}; {}. let\n", fmt::join(consts, " "),
                                fmt::join(args, " "));
  for (const Instr& in : p.instrs()) {
    uint32_t operands = 0;
    for (ValueId i : in.inputs) operands |= bits(i);
    const uint32_t want = manual ? op_vma(mesh, in, operands) : 0;
    std::vector<std::string> ins;
    for (ValueId i : in.inputs) {
      if ((bits(i) | want) == bits(i)) {
        ins.push_back(n.of(i));
        continue;
      }
      const std::string name = n.fresh();  // JAX's implicit pvary of this operand
      out += fmt::format("{}    {}:{} = pvary[axes={}] {}\n", indent, name, type(i, want),
                         axes_tuple(vma_names(mesh, want & ~bits(i))), n.of(i));
      ins.push_back(name);
    }
    std::vector<std::string> outs;
    for (ValueId o : in.outputs) outs.push_back(decl(o));
    // jax.lax.pcast(x, axes, to='varying'): an identity convert whose result varies more
    const bool pcast = in.kind == OpKind::kConvert && in.inputs.size() == 1 &&
                       p.value(in.inputs[0]).dtype == p.value(in.outputs[0]).dtype &&
                       bits(in.outputs[0]) != bits(in.inputs[0]);
    const std::string op =
        pcast ? fmt::format("pvary[axes={}]",
                            axes_tuple(vma_names(mesh, bits(in.outputs[0]) & ~bits(in.inputs[0]))))
              : fmt::format("{}{}", op_name(in.kind), format_attrs(in.kind, in.attrs));
    out += fmt::format("{}    {} = {} {}\n", indent, fmt::join(outs, " "), op, fmt::join(ins, " "));
  }
  std::vector<std::string> results;
  for (const ProgramOutput& o : p.outputs()) results.push_back(n.of(o.value));
  out += fmt::format("{}  in ({}{}) }}", indent, fmt::join(results, ", "),
                     results.size() == 1 ? "," : "");
  return out;
}

// The global shape of per-device blocks `local` laid out by `spec`.
Shape global_shape(const Mesh& mesh, const PartitionSpec& spec, const Shape& local) {
  std::vector<int64_t> d = local.dims();
  for (int i = 0; i < spec.rank() && i < local.rank(); ++i) d[i] *= axes_size(mesh, spec.dim(i));
  return Shape(std::move(d));
}

}  // namespace

std::string jaxpr_text(const Compiled& c) {
  Namer n;
  if (c.vma().empty()) return body_text(c, n, "") + "\n";
  // shard_map: the global arrays in and out, around the per-device body.
  const Program& p = c.traced();
  std::vector<std::string> args, outs, passed;
  for (size_t k = 0; k < c.in_shardings().size(); ++k) {
    const ValueInfo& v = p.value(p.args()[k].value);
    const std::string name = n.fresh();
    passed.push_back(name);
    args.push_back(fmt::format(
        "{}:{}", name,
        typeof_string(dtype_name(v.dtype), global_shape(c.mesh(), c.in_shardings()[k].spec, v.shape),
                      nullptr, nullptr)));
  }
  std::vector<std::string> out_names;
  for (size_t k = 0; k < c.out_shapes().size(); ++k) {
    const ValueInfo& v = p.value(p.outputs()[k].value);
    out_names.push_back(n.fresh());
    outs.push_back(fmt::format("{}:{}", out_names.back(),
                               typeof_string(dtype_name(v.dtype), c.out_shapes()[k], nullptr,
                                             nullptr)));
  }
  const std::string body = body_text(c, n, "      ");
  return fmt::format(
      "{{ lambda ; {}. let\n    {} = shard_map[\n      in_specs={}\n      jaxpr={}\n"
      "      mesh={}\n      out_specs={}\n    ] {}\n  in ({}{}) }}\n",
      fmt::join(args, " "), fmt::join(outs, " "), specs_text(c.in_shardings()), body,
      c.mesh().to_string(), specs_text(c.out_shardings()), fmt::join(passed, " "),
      fmt::join(out_names, ", "), out_names.size() == 1 ? "," : "");
}

}  // namespace eng::frontend
