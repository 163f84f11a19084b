// engine/ir/op.cpp: the ir/ op table (attribute schema, integer inputs, in-place outputs,
// collectives), the unary op table, and attribute printing/hashing through the field walker.
#include "engine/ir/op.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "engine/base/check.h"
#include "engine/base/hash.h"
#include "engine/ir/op_table.h"

namespace eng {

std::string_view op_name(OpKind kind) {
  static constexpr std::string_view kNames[] = {
#define ENG_OP_NAME(Name, printed, cls) printed,
      ENG_OPS(ENG_OP_NAME)
#undef ENG_OP_NAME
  };
  return kNames[op_index(kind)];
}

namespace {

using P = AttrPrint;
using A = OpAttrs;

// Printed attributes per op (op.h's semantics table), in print order.
constexpr AttrField kDepth[] = {{"depth", &A::depth}};
constexpr AttrField kMatmul[] = {{"a_split", &A::a_split},
                                 {"b_split", &A::b_split},
                                 {"trans_a", &A::trans_a, P::kFlag},
                                 {"trans_b", &A::trans_b, P::kFlag}};
constexpr AttrField kEps[] = {{"eps", &A::eps}};
constexpr AttrField kRope[] = {{"min_timescale", &A::min_timescale},
                               {"max_timescale", &A::max_timescale},
                               {"inverse", &A::inverse, P::kFlag},
                               {"interleave", &A::rope_interleave, P::kFlag},
                               {"llama31_scale", &A::rope_use_scale, P::kFlag}};
constexpr AttrField kAttention[] = {{"scale", &A::scale}, {"causal", {}, P::kLiteral}};
constexpr AttrField kScale[] = {{"scale", &A::scale}};
constexpr AttrField kScaleUnlessOne[] = {{"scale", &A::scale, P::kUnlessDefault}};
constexpr AttrField kConvert[] = {{"dtype", &A::dtype}};
constexpr AttrField kConstraint[] = {{"logical", &A::logical, P::kLogical},
                                     {"raw", &A::raw, P::kFlag},
                                     {"drop", &A::mesh_axes, P::kUnlessDefault}};
constexpr AttrField kUnnormalized[] = {{"unnormalized", &A::unnormalized, P::kFlag}};
constexpr AttrField kDimAxes[] = {{"dim", &A::dim}, {"axes", &A::mesh_axes}};
constexpr AttrField kAllReduce[] = {{"axes", &A::mesh_axes}, {"max", &A::reduce_max, P::kFlag}};
constexpr AttrField kAllToAll[] = {
    {"split_dim", &A::dim}, {"concat_dim", &A::dim2}, {"axes", &A::mesh_axes}};
constexpr AttrField kPermute[] = {{"axes", &A::mesh_axes},
                                  {"shift", &A::shift},
                                  {"fill_zero", &A::fill_zero, P::kFlag},
                                  {"source_start", &A::start, P::kUnlessDefault},
                                  {"source_size", &A::size, P::kUnlessDefault}};
constexpr AttrField kReshape[] = {{"new_shape", &A::new_shape}};
constexpr AttrField kPermutation[] = {{"permutation", &A::new_shape}};
constexpr AttrField kDirection[] = {{"direction", &A::dim}};
constexpr AttrField kDimStartSize[] = {{"dim", &A::dim}, {"start", &A::start}, {"size", &A::size}};
constexpr AttrField kDim[] = {{"dim", &A::dim}};
constexpr AttrField kDimSize[] = {{"dim", &A::dim}, {"size", &A::size}};
constexpr AttrField kDimAdd[] = {{"dim", &A::dim}, {"add", &A::inverse, P::kFlag}};
constexpr AttrField kDimIndex[] = {{"dim", &A::dim}, {"index", &A::start}};
constexpr AttrField kDimIndexSize[] = {{"dim", &A::dim}, {"index", &A::start}, {"size", &A::size}};
constexpr AttrField kIndicesAxes[] = {{"indices", &A::new_shape},
                                      {"axes", &A::mesh_axes, P::kUnlessDefault}};
constexpr AttrField kIndicesSizeAxes[] = {
    {"indices", &A::new_shape}, {"size", &A::size}, {"axes", &A::mesh_axes, P::kUnlessDefault}};
constexpr AttrField kShift[] = {{"dim", &A::dim},
                                {"shift", &A::shift},
                                {"source_start", &A::start, P::kUnlessDefault},
                                {"source_size", &A::size, P::kUnlessDefault}};
constexpr AttrField kRepeats[] = {{"repeats", &A::size}};
constexpr AttrField kAxisIndex[] = {{"axes", &A::mesh_axes}, {"size", &A::size}};
constexpr AttrField kMoeRoute[] = {{"k", &A::size},
                                   {"capacity", &A::start},
                                   {"score_func", &A::dim},
                                   {"deepseek_weights", &A::dim2, P::kUnlessDefault},
                                   {"norm_topk_prob", &A::inverse, P::kFlag},
                                   {"routed_scaling_factor", &A::scale, P::kUnlessDefault},
                                   {"lb_scale", &A::eps},
                                   {"bias_grad", &A::raw, P::kFlag}};
constexpr AttrField kMoeTopK[] = {{"k", &A::size},
                                  {"score_func", &A::dim},
                                  {"deepseek_weights", &A::dim2, P::kUnlessDefault},
                                  {"norm_topk_prob", &A::inverse, P::kFlag},
                                  {"routed_scaling_factor", &A::scale, P::kUnlessDefault},
                                  {"lb_scale", &A::eps},
                                  {"bias_grad", &A::raw, P::kFlag}};
constexpr AttrField kMoePermute[] = {{"k", &A::size}, {"inverse", &A::inverse, P::kFlag}};
constexpr AttrField kK[] = {{"k", &A::size}};
constexpr AttrField kMoeEp[] = {{"k", &A::size},
                                {"ragged_buffer_factor", &A::scale},
                                {"exp", &A::logical, P::kLogical}};
constexpr AttrField kMoeEpPlan[] = {{"buffer", &A::size}, {"rows", &A::start}};
constexpr AttrField kRaggedAllToAll[] = {{"buffer", &A::size},
                                         {"axes", &A::mesh_axes, P::kUnlessDefault}};
constexpr AttrField kMask[] = {{"mask", &A::raw, P::kFlag}};
constexpr AttrField kTransB[] = {{"trans_b", &A::trans_b, P::kFlag}};
constexpr AttrField kClip[] = {{"threshold", &A::clip_threshold}};
constexpr AttrField kLearningRate[] = {{"lr", &A::learning_rate},
                                       {"warmup_steps", &A::warmup_steps},
                                       {"cos_steps", &A::cos_steps},
                                       {"final_fraction", &A::final_fraction}};
constexpr AttrField kAdamW[] = {
    {"b1", &A::b1}, {"b2", &A::b2}, {"eps", &A::eps}, {"weight_decay", &A::weight_decay}};

using K = OpKind;
constexpr OpDef kNone{};
constexpr OpDef kCollective(std::span<const AttrField> attrs) { return {attrs, true}; }
constexpr OpDef ints(uint32_t mask, std::span<const AttrField> attrs = {}) {
  return {attrs, false, mask};
}
// Float ops that also run on int32 operands (OpDef::integer).
constexpr OpDef integer(std::span<const AttrField> attrs = {}, bool collective = false) {
  return {attrs, collective, 0, {-1, -1, -1}, true};
}

constexpr OpTable<OpDef> kOpDefs = make_op_table<OpDef>(
    {
        {K::kEmbedLookup, ints(0b110)},  // ids[, offset]
        {K::kOneHot, ints(0b1, kDepth)},
        {K::kMatmul, integer(kMatmul)},  // int32: a wrapping int32 GEMM (kern::matmul_i32)
        {K::kRmsNorm, {kEps}},
        {K::kRope, ints(0b10, kRope)},
        {K::kAttention, ints(0b1000, kAttention)},  // [segment_ids]
        {K::kSwiglu, kNone},
        // in_place here means "may take the input's buffer when it dies at this instruction"
        // (compile.cpp; the kernels are correct in place): add and mul reuse a dying operand's
        // buffer, either one, as XLA's buffer assignment does. integer: int32 operands too.
        {K::kAdd, {{}, false, 0, {0, -1, -1}, true}},
        {K::kMul, {{}, false, 0, {0, -1, -1}, true}},
        {K::kScale, integer(kScale)},
        {K::kConvert, {kConvert}},
        {K::kConstraint, {kConstraint}},
        {K::kSoftmaxCrossEntropy, ints(0b10)},
        {K::kMaskedMeanLoss, ints(0b10, kUnnormalized)},
        {K::kEmbedLookupGrad, ints(0b101, kDepth)},  // ids[, offset]
        {K::kRmsNormGrad, kNone},
        {K::kAttentionGrad, ints(0b1000000, kAttention)},  // [segment_ids]
        {K::kSwigluGrad, kNone},
        {K::kSoftmaxCrossEntropyGrad, ints(0b10010)},  // targets[, offset]
        {K::kMaskedMeanLossGrad, ints(0b1, kScaleUnlessOne)},
        {K::kSumSquares, kNone},
        {K::kGlobalNorm, kNone},
        {K::kClipFactor, {kClip}},
        {K::kLearningRate, ints(0b1, kLearningRate)},
        {K::kAdamW, {kAdamW, false, 1u << 6, {0, 2, 3}}},
        {K::kIncrement, {{}, false, 0b1, {0, -1, -1}}},
        {K::kAllGather, kCollective(kDimAxes)},
        {K::kReduceScatter, integer(kDimAxes, true)},
        {K::kAllReduce, integer(kAllReduce, true)},
        {K::kAllToAll, kCollective(kAllToAll)},
        {K::kCollectivePermute, kCollective(kPermute)},
        {K::kDynamicSlice, kCollective(kDimAxes)},
        {K::kSafeDivide, kNone},
        {K::kReshape, {kReshape}},
        {K::kSlice, {kDimStartSize}},
        {K::kPad, {kDimStartSize}},
        {K::kConcat, {kDim}},
        {K::kShift, {kShift}},
        {K::kAxisIndex, {kAxisIndex}},
        {K::kVocabMax, kNone},
        {K::kVocabStats, ints(0b1100)},  // targets, offset
        {K::kXentFromStats, kNone},
        {K::kRepeatKv, {kRepeats}},
        {K::kRepeatKvGrad, {kRepeats}},
        {K::kIndexInDim, {kDimIndex}},
        {K::kAddIndexInDim, {kDimIndexSize, false, 0, {1, -1, -1}}},  // updates acc (input 1)
        {K::kTranspose, {kPermutation}},
        {K::kCompare, integer(kDirection)},  // int32: exact (jnp.equal(stage, 0))
        {K::kSelect, kNone},
        {K::kIndexPerRow, {kIndicesAxes}},
        {K::kAddIndexPerRow, {kIndicesSizeAxes, false, 0, {1, -1, -1}}},  // updates acc (input 1)
        {K::kMoeRoute, {kMoeRoute}},
        {K::kMoeRouteGrad, {kMoeRoute}},
        {K::kMoeDispatch, {kMask}},
        {K::kMoeCombine, {kMask}},
        {K::kMoeCombineWeightsGrad, kNone},
        {K::kExpertMatmul, {kTransB}},
        {K::kExpertMatmulGrad, kNone},
        {K::kLayerNorm, {kEps}},
        {K::kLayerNormGrad, kNone},
        {K::kBiasAdd, kNone},
        {K::kBiasAddGrad, {kDim}},
        {K::kMoveToHost, kNone},
        {K::kMoveToDevice, kNone},
        {K::kMoeTopK, {kMoeTopK}},
        {K::kMoeTopKGrad, {kMoeTopK}},
        {K::kMoePermute, ints(0b110, kMoePermute)},              // order, rank
        {K::kMoePermuteWeightsGrad, ints(0b1100, kK)},           // order, rank
        {K::kRaggedDot, ints(0b100, kTransB)},                   // group_sizes
        {K::kRaggedDotGrad, ints(0b100)},                        // group_sizes
        // offsets and sizes; a collective (over no axes: every member on one device).
        {K::kRaggedAllToAll, {kRaggedAllToAll, true, 0b1110}},
        {K::kMoeEpDispatch, ints(0b10, kMoeEp)},  // group_sizes
        {K::kMoeEpReturn, ints(0b10, kMoeEp)},
        {K::kMoeEpPlan, ints(0b11, kMoeEpPlan)},  // counts, shard
        {K::kRemainder, integer()},
        {K::kDynamicSliceInDim, ints(0b10, kDimSize)},           // start
        {K::kDynamicUpdateSliceInDim, ints(0b100, kDimAdd)},     // start
    },
    kNone, kNone);

// ---- unary elementwise ops: one row each (op.h's UnaryMath) ----
// jax.nn.gelu(approximate=True): x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
constexpr double kGeluC = 0.7978845608028654, kGeluA = 0.044715;
double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluC * (x + kGeluA * x * x * x))); }
double gelu_grad(double x) {
  const double t = std::tanh(kGeluC * (x + kGeluA * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluC * (1.0 + 3.0 * kGeluA * x * x);
}

double exp_(double x) { return std::exp(x); }
double log_(double x) { return std::log(x); }
double log_grad(double x) { return 1.0 / x; }
double tanh_(double x) { return std::tanh(x); }
double tanh_grad(double x) {
  const double t = std::tanh(x);
  return 1.0 - t * t;
}
double reciprocal(double x) { return 1.0 / x; }
double reciprocal_grad(double x) { return -1.0 / (x * x); }
double sqrt_(double x) { return std::sqrt(x); }
double sqrt_grad(double x) { return 0.5 / std::sqrt(x); }
double abs_(double x) { return std::abs(x); }
double sign(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; }  // sign(+-0) = +-0, NaN stays
double zero(double) { return 0.0; }  // piecewise constant: sign, floor
double sin_(double x) { return std::sin(x); }
double cos_(double x) { return std::cos(x); }
double minus_sin(double x) { return -std::sin(x); }
double floor_(double x) { return std::floor(x); }
double log1p_(double x) { return std::log1p(x); }
double log1p_grad(double x) { return 1.0 / (1.0 + x); }
double expm1_(double x) { return std::expm1(x); }

constexpr auto kUnaryOps = std::to_array<UnaryMath>({
    {OpKind::kGelu, OpKind::kGeluGrad, gelu, gelu_grad, 8, 14},
    {OpKind::kExp, OpKind::kExpGrad, exp_, exp_, 4, 5},
    {OpKind::kLog, OpKind::kLogGrad, log_, log_grad, 4, 2},
    {OpKind::kTanh, OpKind::kTanhGrad, tanh_, tanh_grad, 6, 8},
    {OpKind::kReciprocal, OpKind::kReciprocalGrad, reciprocal, reciprocal_grad, 1, 3},
    {OpKind::kSqrt, OpKind::kSqrtGrad, sqrt_, sqrt_grad, 4, 6},
    {OpKind::kAbs, OpKind::kAbsGrad, abs_, sign, 1, 2},
    {OpKind::kSign, OpKind::kSignGrad, sign, zero, 1, 1},
    {OpKind::kSin, OpKind::kSinGrad, sin_, cos_, 4, 5},
    {OpKind::kCos, OpKind::kCosGrad, cos_, minus_sin, 4, 5},
    {OpKind::kFloor, OpKind::kFloorGrad, floor_, zero, 1, 1},
    {OpKind::kLog1p, OpKind::kLog1pGrad, log1p_, log1p_grad, 4, 3},
    {OpKind::kExpm1, OpKind::kExpm1Grad, expm1_, exp_, 4, 5},
});

// Every kUnary op has exactly one row, every kUnaryGrad op is exactly one row's grad.
consteval bool unary_rows_complete() {
  for (int i = 0; i < kNumOps; ++i) {
    const OpKind k = static_cast<OpKind>(i);
    int as_op = 0, as_grad = 0;
    for (const UnaryMath& u : kUnaryOps) {
      as_op += u.op == k;
      as_grad += u.grad == k;
    }
    const bool want_op = op_class(k) == OpClass::kUnary,
               want_grad = op_class(k) == OpClass::kUnaryGrad;
    if (as_op != (want_op ? 1 : 0) || as_grad != (want_grad ? 1 : 0))
      op_table_detail::an_OpKind_has_no_row_in_this_table();
  }
  return true;
}
static_assert(unary_rows_complete());

// Every stored field, in the serialized order (engine/compile/serialize.cpp).
constexpr AttrField kStored[] = {
    {"a_split", &A::a_split},
    {"b_split", &A::b_split},
    {"trans_a", &A::trans_a},
    {"trans_b", &A::trans_b},
    {"depth", &A::depth},
    {"eps", &A::eps},
    {"scale", &A::scale},
    {"min_timescale", &A::min_timescale},
    {"max_timescale", &A::max_timescale},
    {"inverse", &A::inverse},
    {"dtype", &A::dtype},
    {"logical", &A::logical},
    {"raw", &A::raw},
    {"out_logical", &A::out_logical},
    {"out_like", &A::out_like},
    {"unnormalized", &A::unnormalized},
    {"dim", &A::dim},
    {"dim2", &A::dim2},
    {"mesh_axes", &A::mesh_axes},
    {"group_size", &A::group_size},
    {"shift", &A::shift},
    {"reduce_max", &A::reduce_max},
    {"clip_threshold", &A::clip_threshold},
    {"learning_rate", &A::learning_rate},
    {"warmup_steps", &A::warmup_steps},
    {"cos_steps", &A::cos_steps},
    {"final_fraction", &A::final_fraction},
    {"b1", &A::b1},
    {"b2", &A::b2},
    {"weight_decay", &A::weight_decay},
    {"fill_zero", &A::fill_zero},
    {"start", &A::start},
    {"size", &A::size},
    {"new_shape", &A::new_shape},
    {"vmap", &A::vmap},
    {"rope_interleave", &A::rope_interleave},
    {"rope_use_scale", &A::rope_use_scale},
};

// ---- printing ----
std::string value_text(int64_t v) { return fmt::format("{}", v); }
std::string value_text(double v) { return fmt::format("{:g}", v); }
std::string value_text(DType v) { return std::string(dtype_name(v)); }
std::string value_text(const std::vector<int64_t>& v) {
  return fmt::format("({})", fmt::join(v, ","));
}
std::string value_text(const std::vector<std::string>& v) {
  return fmt::format("({})", fmt::join(v, ","));
}
std::string logical_text(const LogicalAxes& v) {
  std::vector<std::string> names;
  for (const auto& l : v) names.push_back(l.value_or("None"));
  return fmt::format("({})", fmt::join(names, ", "));
}

template <class T>
void print_field(std::vector<std::string>& parts, const AttrField& f, const T& v, const T& dflt) {
  if constexpr (std::is_same_v<T, std::monostate>) {
    parts.emplace_back(f.name);
  } else if constexpr (std::is_same_v<T, bool>) {
    if (f.print == P::kFlag && v) parts.emplace_back(f.name);
  } else {
    if (f.print == P::kUnlessDefault && v == dflt) return;
    if constexpr (std::is_same_v<T, LogicalAxes>) {
      parts.push_back(fmt::format("{}={}", f.name, logical_text(v)));
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      parts.push_back(fmt::format("{}={}", f.name, value_text(v)));
    } else if constexpr (std::is_integral_v<T>) {
      parts.push_back(fmt::format("{}={}", f.name, value_text(static_cast<int64_t>(v))));
    } else {
      parts.push_back(fmt::format("{}={}", f.name, value_text(v)));
    }
  }
}

// ---- hashing ----
uint64_t hash_field(uint64_t h, int v) { return hash_mix(h, static_cast<uint64_t>(v)); }
uint64_t hash_field(uint64_t h, int64_t v) { return hash_mix(h, static_cast<uint64_t>(v)); }
uint64_t hash_field(uint64_t h, bool v) { return hash_mix(h, v ? 1 : 2); }
uint64_t hash_field(uint64_t h, DType v) { return hash_mix(h, static_cast<uint64_t>(v) + 3); }
uint64_t hash_field(uint64_t h, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return hash_mix(h, bits);
}
uint64_t hash_field(uint64_t h, const std::vector<std::string>& v) {
  h = hash_mix(h, v.size());
  for (const auto& s : v) h = hash_mix(h, hash_bytes(s));
  return h;
}
uint64_t hash_field(uint64_t h, const LogicalAxes& v) {  // None hashes apart from ""
  h = hash_mix(h, v.size());
  for (const auto& s : v) h = s ? hash_mix(h, hash_bytes(*s)) : hash_mix(h, 0x4e6f6e65);
  return h;
}
uint64_t hash_field(uint64_t h, const std::vector<int64_t>& v) {
  h = hash_mix(h, v.size());
  for (int64_t d : v) h = hash_mix(h, static_cast<uint64_t>(d));
  return h;
}

}  // namespace

namespace attr_detail {
const AttrField kVmapField{"vmap", &A::vmap, P::kUnlessDefault};
const OpAttrs kDefaultAttrs{};
std::span<const AttrField> stored_attrs() { return kStored; }
}  // namespace attr_detail

namespace op_table_detail {
void an_OpKind_has_no_row_in_this_table() { ENG_CHECK(false, "op table: an op has no row"); }
void an_OpKind_has_two_rows_in_this_table() { ENG_CHECK(false, "op table: an op has two rows"); }
}  // namespace op_table_detail

const OpDef& op_def(OpKind kind) { return kOpDefs[op_index(kind)]; }

DotDims dot_dims(const OpAttrs& at, const Shape& a, const Shape& b) {
  const int ra = a.rank(), rb = b.rank();
  DotDims d;
  // a viewed as (prod a[:a_split], prod a[a_split:]); trans_a contracts the first part.
  d.a_contracting_begin = at.trans_a ? 0 : at.a_split;
  d.a_contracting_end = at.trans_a ? at.a_split : ra;
  d.a_free_begin = at.trans_a ? at.a_split : 0;
  d.a_free_end = at.trans_a ? ra : at.a_split;
  // b viewed as (prod b[:b_split], prod b[b_split:]); trans_b contracts the second part.
  d.b_contracting_begin = at.trans_b ? at.b_split : 0;
  d.b_contracting_end = at.trans_b ? rb : at.b_split;
  d.b_free_begin = at.trans_b ? 0 : at.b_split;
  d.b_free_end = at.trans_b ? at.b_split : rb;
  d.M = a.prod(d.a_free_begin, d.a_free_end);
  d.K = a.prod(d.a_contracting_begin, d.a_contracting_end);
  d.N = b.prod(d.b_free_begin, d.b_free_end);
  d.lda = a.prod(at.a_split, ra);
  d.ldb = b.prod(at.b_split, rb);
  return d;
}

const UnaryMath& unary_math(OpKind kind) {
  for (const UnaryMath& u : kUnaryOps)
    if (u.op == kind || u.grad == kind) return u;
  ENG_CHECK(false, "unary_math: {} is not a unary op", op_name(kind));
  static const UnaryMath kNoRow{};
  return kNoRow;
}

std::string format_attrs(OpKind kind, const OpAttrs& a) {
  std::vector<std::string> parts;
  for_each_attr(kind, a, [&](const AttrField& f, const auto& v, const auto& dflt) {
    print_field(parts, f, v, dflt);
  });
  if (parts.empty()) return "";
  return fmt::format("[{}]", fmt::join(parts, " "));
}

uint64_t hash_attrs(OpKind kind, const OpAttrs& a) {
  uint64_t h = hash_mix(0x6f70617474727321ULL, static_cast<uint64_t>(kind));
  for_each_stored_attr(a, [&](const AttrField&, const auto& v) { h = hash_field(h, v); });
  return h;
}

}  // namespace eng
