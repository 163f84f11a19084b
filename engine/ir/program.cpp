// engine/ir/program.cpp: the jaxpr-like text dump and the structural fingerprint.
#include "engine/ir/program.h"

#include <fmt/format.h>

#include "engine/base/hash.h"

namespace eng {

std::string_view arg_role_name(ArgRole r) {
  switch (r) {
    case ArgRole::kParam: return "param";
    case ArgRole::kOptMu: return "opt_mu";
    case ArgRole::kOptNu: return "opt_nu";
    case ArgRole::kStep: return "step";
    case ArgRole::kBatch: return "batch";
  }
  return "?";
}

std::string ValueInfo::type_string(const Mesh* mesh) const {
  const PartitionSpec* s = spec.has_value() ? &*spec : nullptr;
  return typeof_string(dtype_name(dtype), shape, mesh ? s : nullptr, mesh);
}

std::string producer_description(const Program& p, ValueId v) {
  const ValueInfo& info = p.value(v);
  if (info.producer < 0) return "argument";
  const std::string op(op_name(p.instrs()[info.producer].kind));
  return info.recomputed ? op + " (remat)" : op;
}

int Program::find_arg(std::string_view name) const {
  for (size_t i = 0; i < args_.size(); ++i)
    if (values_[args_[i].value].name == name) return static_cast<int>(i);
  return -1;
}

int Program::find_output(std::string_view name) const {
  for (size_t i = 0; i < outputs_.size(); ++i)
    if (outputs_[i].name == name) return static_cast<int>(i);
  return -1;
}

// jaxpr's variable names: a..z, ba..bz, ca.., like jax.core's var naming.
std::string value_name(ValueId id) {
  std::string s;
  int64_t n = id;
  do {
    s.insert(s.begin(), static_cast<char>('a' + n % 26));
    n = n / 26;
  } while (n > 0 && s.size() < 8);
  return s;
}

std::string Program::to_text() const {
  std::string out;
  for (const Argument& a : args_) {
    const ValueInfo& v = values_[a.value];
    out += fmt::format("# {}:{} {} {}\n", value_name(a.value), v.type_string(), arg_role_name(a.role),
                       v.name);
  }
  out += "{ lambda ; ";
  for (size_t i = 0; i < args_.size(); ++i) {
    const ValueInfo& v = values_[args_[i].value];
    out += fmt::format("{}{}:{}", i ? " " : "", value_name(args_[i].value), v.type_string());
  }
  out += ". let\n";
  for (const Instr& in : instrs_) {
    out += "    ";
    for (ValueId o : in.outputs) out += fmt::format("{}:{} ", value_name(o), values_[o].type_string());
    out += fmt::format("= {}{}", op_name(in.kind), format_attrs(in.kind, in.attrs));
    for (ValueId i : in.inputs) out += " " + value_name(i);
    out += "\n";
  }
  out += "  in (";
  for (size_t i = 0; i < outputs_.size(); ++i)
    out += fmt::format("{}{}", i ? ", " : "", value_name(outputs_[i].value));
  out += ") }\n";
  return out;
}

uint64_t Program::fingerprint() const {
  uint64_t h = hash_bytes(name_);
  auto hash_value = [&](const ValueInfo& v) {
    h = hash_mix(h, v.shape.hash());
    h = hash_mix(h, static_cast<uint64_t>(v.dtype));
    h = hash_mix(h, hash_bytes(v.name));
    for (const auto& l : v.logical) h = hash_mix(h, hash_bytes(l));
    h = hash_mix(h, v.spec ? v.spec->hash() : 0);
  };
  for (const Argument& a : args_) {
    hash_value(values_[a.value]);
    h = hash_mix(h, static_cast<uint64_t>(a.role));
  }
  for (const Instr& in : instrs_) {
    h = hash_mix(h, hash_attrs(in.kind, in.attrs));
    for (ValueId i : in.inputs) h = hash_mix(h, static_cast<uint64_t>(i));
    for (ValueId o : in.outputs) hash_value(values_[o]);
  }
  for (const ProgramOutput& o : outputs_) {
    h = hash_mix(h, static_cast<uint64_t>(o.value));
    h = hash_mix(h, hash_bytes(o.name));
    h = hash_mix(h, static_cast<uint64_t>(o.aliased_arg + 1));
  }
  return h;
}

namespace {
// Operand slots the bf16 kernels keep in f32 (input slots, output slots), as bit masks.
struct Bf16Slots {
  OpKind kind;
  uint32_t f32_inputs, f32_outputs;
};
constexpr Bf16Slots kBf16Kernels[] = {
    {OpKind::kMatmul, 0, 0},           {OpKind::kRmsNorm, 0b10, 0b10},
    {OpKind::kRmsNormGrad, 0b110, 0b10}, {OpKind::kRope, 0, 0},
    {OpKind::kAttention, 0, 0b10},     {OpKind::kAttentionGrad, 0b10000, 0},
    {OpKind::kSwiglu, 0, 0},           {OpKind::kSwigluGrad, 0, 0},
    {OpKind::kAdd, 0, 0},              {OpKind::kMul, 0, 0},
    // The loss head: bf16 logits and dlogits, f32 statistics (lse, max, sums, xent, dxent).
    {OpKind::kSoftmaxCrossEntropy, 0, 0b11}, {OpKind::kSoftmaxCrossEntropyGrad, 0b1100, 0},
    {OpKind::kVocabMax, 0, 0b1},       {OpKind::kVocabStats, 0b10, 0b11},
    // Mixture of experts: bf16 logits, combine weights, activations and expert GEMMs; f32
    // router bias, load-balance loss, load and (bias_grad) the bias's gradient.
    {OpKind::kMoeRoute, 0b10, 0b110},  {OpKind::kMoeRouteGrad, 0b100, 0},
    {OpKind::kMoeRouteGrad, 0b100, 0b1}, {OpKind::kMoeDispatch, 0, 0},
    {OpKind::kMoeCombine, 0, 0},       {OpKind::kMoeCombineWeightsGrad, 0, 0},
    {OpKind::kExpertMatmul, 0, 0},     {OpKind::kExpertMatmulGrad, 0, 0},
};

bool slot_ok(const Program& p, ValueId v, bool f32_slot) {
  const DType d = p.value(v).dtype;
  return d == DType::kI32 || d == (f32_slot ? DType::kF32 : DType::kBF16);
}

// An op may have several rows (one per form of its operands); any row that fits picks the kernel.
bool fits(const Program& p, const Instr& in, const Bf16Slots& k) {
  for (size_t i = 0; i < in.inputs.size(); ++i)
    if (!slot_ok(p, in.inputs[i], i < 32 && ((k.f32_inputs >> i) & 1u))) return false;
  for (size_t o = 0; o < in.outputs.size(); ++o)
    if (!slot_ok(p, in.outputs[o], o < 32 && ((k.f32_outputs >> o) & 1u))) return false;
  return true;
}
}  // namespace

bool uses_bf16_kernel(const Program& p, const Instr& in) {
  // Integer arithmetic (op.h OpDef::integer: the builder made every operand i32) is no bf16
  // kernel's, though slot_ok accepts i32 in any slot.
  if (has_integer_kernel(in.kind) && p.value(in.outputs[0]).dtype == DType::kI32) return false;
  for (const Bf16Slots& k : kBf16Kernels)
    if (k.kind == in.kind && fits(p, in, k)) return true;
  return false;
}

}  // namespace eng
