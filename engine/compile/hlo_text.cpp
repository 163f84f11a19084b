// engine/compile/hlo_text.cpp: see hlo_text.h.
#include "engine/compile/hlo_text.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include <fmt/format.h>

namespace eng {
namespace {

// XLA's opcode for an engine op that is that operation; nullptr: a custom-call.
const char* hlo_opcode(OpKind k) {
  switch (k) {
    case OpKind::kAdd: return "add";
    case OpKind::kMul: return "multiply";
    case OpKind::kMatmul: return "dot";
    case OpKind::kConvert: return "convert";
    case OpKind::kReshape: return "reshape";
    case OpKind::kSlice: return "slice";
    case OpKind::kPad: return "pad";
    case OpKind::kConcat: return "concatenate";
    case OpKind::kTranspose: return "transpose";
    case OpKind::kCompare: return "compare";
    case OpKind::kSelect: return "select";
    case OpKind::kExp: return "exponential";
    case OpKind::kLog: return "log";
    case OpKind::kTanh: return "tanh";
    case OpKind::kSqrt: return "sqrt";
    case OpKind::kAbs: return "abs";
    case OpKind::kSign: return "sign";
    case OpKind::kSin: return "sine";
    case OpKind::kCos: return "cosine";
    case OpKind::kFloor: return "floor";
    case OpKind::kLog1p: return "log-plus-one";
    case OpKind::kExpm1: return "exponential-minus-one";
    case OpKind::kAllGather: return "all-gather";
    case OpKind::kReduceScatter: return "reduce-scatter";
    case OpKind::kAllReduce: return "all-reduce";
    case OpKind::kAllToAll: return "all-to-all";
    case OpKind::kCollectivePermute: return "collective-permute";
    default: return nullptr;
  }
}

std::string element_type(DType d) {
  switch (d) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "s32";
  }
  return std::string(dtype_name(d));
}

// "f32[4,8]{1,0}": XLA's shape with a row-major layout.
std::string hlo_shape(const ValueInfo& v) {
  const int r = v.shape.rank();
  std::vector<std::string> dims, layout;
  for (int i = 0; i < r; ++i) dims.push_back(std::to_string(v.shape.dims()[i]));
  for (int i = r - 1; i >= 0; --i) layout.push_back(std::to_string(i));
  if (r == 0) return fmt::format("{}[]", element_type(v.dtype));  // scalars have no layout
  return fmt::format("{}[{}]{{{}}}", element_type(v.dtype), fmt::join(dims, ","), fmt::join(layout, ","));
}

// The devices of each group of a collective over `axes` (the executor's grouping: devices that
// share every other coordinate, ranked by their coordinates along axes, major to minor).
std::vector<std::vector<int64_t>> replica_groups(const Mesh& mesh, const std::vector<std::string>& axes) {
  std::vector<int> along;
  for (const std::string& a : axes) along.push_back(mesh.axis_index(a));
  std::map<std::vector<int64_t>, std::vector<std::pair<int64_t, int64_t>>> groups;  // key -> (rank, device)
  for (int64_t d = 0; d < mesh.num_devices(); ++d) {
    std::vector<int64_t> c = mesh.device_coords(d), key;
    int64_t rank = 0;
    for (int i : along) rank = rank * mesh.axis_sizes()[i] + c[i];
    for (int i = 0; i < static_cast<int>(c.size()); ++i)
      if (std::find(along.begin(), along.end(), i) == along.end()) key.push_back(c[i]);
    groups[key].push_back({rank, d});
  }
  std::vector<std::vector<int64_t>> out;
  for (auto& [key, members] : groups) {
    std::sort(members.begin(), members.end());
    out.emplace_back();
    for (const auto& m : members) out.back().push_back(m.second);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string groups_text(const std::vector<std::vector<int64_t>>& g) {
  std::vector<std::string> parts;
  for (const auto& members : g) parts.push_back(fmt::format("{{{}}}", fmt::join(members, ",")));
  return fmt::format("{{{}}}", fmt::join(parts, ","));
}

// collective-permute's pairs: member r sends to (r + shift) mod G, or with fill_zero only
// inside [0, G) and from the source members [start, start + size) when size > 0.
std::string permute_pairs(const Mesh& mesh, const OpAttrs& a) {
  std::vector<std::string> pairs;
  for (const auto& g : replica_groups(mesh, a.mesh_axes)) {
    const int64_t G = static_cast<int64_t>(g.size());
    for (int64_t r = 0; r < G; ++r) {
      int64_t t = r + a.shift;
      if (a.fill_zero) {
        if (t < 0 || t >= G) continue;
        if (a.size > 0 && (r < a.start || r >= a.start + a.size)) continue;
      } else {
        t = ((t % G) + G) % G;
      }
      pairs.push_back(fmt::format("{{{},{}}}", g[r], g[t]));
    }
  }
  return fmt::format("{{{}}}", fmt::join(pairs, ","));
}

}  // namespace

std::string hlo_text(const Program& p, const Mesh& mesh) {
  std::map<ValueId, std::string> names;
  std::string out = fmt::format("HloModule jit_{}, num_partitions={}\n\n", p.name().empty() ? "main" : p.name(),
                                mesh.num_devices());
  bool sum = false, max = false;
  for (const Instr& in : p.instrs())
    if (in.kind == OpKind::kAllReduce || in.kind == OpKind::kReduceScatter)
      (in.attrs.reduce_max ? max : sum) = true;
  for (auto [used, name, op] : {std::tuple{sum, "region_add", "add"}, std::tuple{max, "region_max", "maximum"}})
    if (used)
      out += fmt::format("%{} (a: f32[], b: f32[]) -> f32[] {{\n  %a = f32[] parameter(0)\n  "
                         "%b = f32[] parameter(1)\n  ROOT %{}.0 = f32[] {}(f32[] %a, f32[] %b)\n}}\n\n",
                         name, op, op);
  std::vector<std::string> params;
  for (size_t i = 0; i < p.args().size(); ++i) {
    const ValueId v = p.args()[i].value;
    names[v] = fmt::format("Arg_{}.{}", i, i + 1);
    params.push_back(fmt::format("{}: {}", names[v], hlo_shape(p.value(v))));
  }
  std::vector<std::string> results;
  for (const ProgramOutput& o : p.outputs()) results.push_back(hlo_shape(p.value(o.value)));
  out += fmt::format("ENTRY %main ({}) -> ({}) {{\n", fmt::join(params, ", "), fmt::join(results, ", "));
  for (size_t i = 0; i < p.args().size(); ++i) {
    const ValueId v = p.args()[i].value;
    out += fmt::format("  %{} = {} parameter({})\n", names[v], hlo_shape(p.value(v)), i);
  }
  int counter = static_cast<int>(p.args().size()) + 1, channel = 0;
  auto name_of = [&](ValueId v) {
    auto it = names.find(v);
    return it != names.end() ? it->second : value_name(v);
  };
  auto operands = [&](const Instr& in) {
    std::vector<std::string> ops;
    for (ValueId v : in.inputs) ops.push_back(fmt::format("{} %{}", hlo_shape(p.value(v)), name_of(v)));
    return fmt::format("{}", fmt::join(ops, ", "));
  };
  for (const Instr& in : p.instrs()) {
    const char* opcode = hlo_opcode(in.kind);
    const std::string base = opcode ? opcode : "custom-call";
    std::string type;
    if (in.outputs.size() == 1) {
      type = hlo_shape(p.value(in.outputs[0]));
    } else {
      std::vector<std::string> ts;
      for (ValueId o : in.outputs) ts.push_back(hlo_shape(p.value(o)));
      type = fmt::format("({})", fmt::join(ts, ", "));
    }
    const std::string name = fmt::format("{}.{}", base, counter++);
    std::string attrs;
    const OpAttrs& a = in.attrs;
    switch (in.kind) {
      case OpKind::kAllReduce:
      case OpKind::kReduceScatter:
      case OpKind::kAllGather:
      case OpKind::kAllToAll:
        attrs = fmt::format(", channel_id={}, replica_groups={}", ++channel,
                            groups_text(replica_groups(mesh, a.mesh_axes)));
        if (in.kind == OpKind::kAllGather || in.kind == OpKind::kReduceScatter)
          attrs += fmt::format(", dimensions={{{}}}", a.dim);
        if (in.kind == OpKind::kAllToAll) attrs += fmt::format(", dimensions={{{}}}", a.dim);
        attrs += ", use_global_device_ids=true";
        if (in.kind == OpKind::kAllReduce || in.kind == OpKind::kReduceScatter)
          attrs += a.reduce_max ? ", to_apply=%region_max" : ", to_apply=%region_add";
        break;
      case OpKind::kCollectivePermute:
        attrs = fmt::format(", channel_id={}, source_target_pairs={}", ++channel, permute_pairs(mesh, a));
        break;
      default:
        if (!opcode) attrs = fmt::format(", custom_call_target=\"{}\"", op_name(in.kind));
    }
    out += fmt::format("  %{} = {} {}({}){}\n", name, type, base, operands(in), attrs);
    if (in.outputs.size() == 1) {
      names[in.outputs[0]] = name;
    } else {
      for (size_t o = 0; o < in.outputs.size(); ++o) {
        const std::string e = fmt::format("get-tuple-element.{}", counter++);
        out += fmt::format("  %{} = {} get-tuple-element({} %{}), index={}\n", e,
                           hlo_shape(p.value(in.outputs[o])), type, name, o);
        names[in.outputs[o]] = e;
      }
    }
  }
  std::vector<std::string> outs;
  for (const ProgramOutput& o : p.outputs())
    outs.push_back(fmt::format("{} %{}", hlo_shape(p.value(o.value)), name_of(o.value)));
  out += fmt::format("  ROOT %tuple.{} = ({}) tuple({})\n}}\n", counter, fmt::join(results, ", "),
                     fmt::join(outs, ", "));
  return out;
}

}  // namespace eng
