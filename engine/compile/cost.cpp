// engine/compile/cost.cpp: the cost model: flops, bytes accessed and collective bytes received
// per instruction.
#include <algorithm>
#include <cmath>

#include "engine/compile/executable.h"
#include "engine/compile/spmd.h"
#include "engine/ir/op_table.h"
#include "engine/sharding/shard_geometry.h"

namespace eng {

namespace {

double numel(const Program& p, ValueId v) { return static_cast<double>(p.value(v).shape.numel()); }

// Causal attention forward: QK^T and PV each cost 2·D flops per (query, key<=query) pair,
// and there are B·H·T(T+1)/2 pairs.
double attention_flops(const Shape& q) {
  const double B = q[0], T = q[1], H = q[2], D = q[3];
  return 2.0 * B * H * D * T * (T + 1);
}

using CostFn = double (*)(const Program&, const Instr&);

double unary_flops(const Program& p, const Instr& in) {
  return unary_math(in.kind).flops * numel(p, in.inputs[0]);
}
double unary_grad_flops(const Program& p, const Instr& in) {
  return unary_math(in.kind).grad_flops * numel(p, in.inputs[0]);
}
double zero_flops(const Program&, const Instr&) { return 0; }  // data movement, lookups
double one_flop(const Program&, const Instr&) { return 1; }    // scalar ops
double per_input_element(const Program& p, const Instr& in) { return numel(p, in.inputs[0]); }

// Bytes ONE device receives for a collective (spmd.h's collective_bytes_received); G members.
double group(const Instr& in) { return static_cast<double>(in.attrs.group_size); }
double in_bytes(const Program& p, const Instr& in) {
  return static_cast<double>(p.value(in.inputs[0]).bytes());
}
double gathered_bytes(const Program& p, const Instr& in) {  // all_gather, all_reduce
  return (group(in) - 1) * in_bytes(p, in);
}
double scattered_bytes(const Program& p, const Instr& in) {  // reduce_scatter
  return (group(in) - 1) * static_cast<double>(p.value(in.outputs[0]).bytes());
}
double all_to_all_bytes(const Program& p, const Instr& in) {
  return (group(in) - 1) / group(in) * in_bytes(p, in);
}
double ragged_all_to_all_bytes(const Program& p, const Instr& in) {
  const double out = static_cast<double>(p.value(in.outputs[0]).bytes());
  return (group(in) - 1) / group(in) * std::min(in_bytes(p, in), out);
}
// What the member of rank r receives: x from a source other than itself (op.h permute_source).
double permute_bytes_to(const Program& p, const Instr& in, int64_t r) {
  const int64_t from = permute_source(in.attrs, in.attrs.group_size, r);
  return from >= 0 && from != r ? in_bytes(p, in) : 0;
}
// The mean over members: a partial permutation (fill_zero, source rows) reaches only some.
double permute_bytes(const Program& p, const Instr& in) {
  double sum = 0;
  for (int64_t r = 0; r < in.attrs.group_size; ++r) sum += permute_bytes_to(p, in, r);
  return sum / group(in);
}

// moe_dispatch / moe_combine: 2 flops per (b, s, e, c, m) (combine (B,S,E,C), other (.., M)).
double moe_einsum_flops(const Program& p, const Instr& in) {
  return 2.0 * numel(p, in.inputs[0]) * p.value(in.inputs[1]).shape.dim(-1);
}

// One op's cost: flops, and the bytes a device receives (collectives; others receive none).
struct Cost {
  CostFn flops = nullptr;
  CostFn bytes_received = zero_flops;
};

// The cost of each op, one row per op (engine/ir/op_table.h).
constexpr OpTable<Cost> kCost = make_op_table<Cost>(
    {
        {OpKind::kMatmul,
         [](const Program& p, const Instr& in) {
           const DotDims d =
               dot_dims(in.attrs, p.value(in.inputs[0]).shape, p.value(in.inputs[1]).shape);
           return 2.0 * static_cast<double>(d.K) * numel(p, in.outputs[0]);  // 2·M·N·K
         }},
        {OpKind::kAttention,
         [](const Program& p, const Instr& in) {
           return attention_flops(p.value(in.inputs[0]).shape);
         }},
        {OpKind::kAttentionGrad,
         [](const Program& p, const Instr& in) {
           return 2.0 * attention_flops(p.value(in.inputs[0]).shape);
         }},
        {OpKind::kEmbedLookup, zero_flops},
        {OpKind::kOneHot, zero_flops},
        {OpKind::kConstraint, zero_flops},
        {OpKind::kEmbedLookupGrad,  // one add per dy element
         [](const Program& p, const Instr& in) { return numel(p, in.inputs[1]); }},
        {OpKind::kRmsNorm,
         [](const Program& p, const Instr& in) { return 4.0 * numel(p, in.inputs[0]); }},
        {OpKind::kRmsNormGrad,
         [](const Program& p, const Instr& in) { return 8.0 * numel(p, in.inputs[0]); }},
        {OpKind::kRope,
         [](const Program& p, const Instr& in) { return 6.0 * numel(p, in.inputs[0]); }},
        {OpKind::kSwiglu,
         [](const Program& p, const Instr& in) { return 5.0 * numel(p, in.inputs[0]); }},
        {OpKind::kSwigluGrad,
         [](const Program& p, const Instr& in) { return 10.0 * numel(p, in.inputs[0]); }},
        {OpKind::kRepeatKv, zero_flops},
        {OpKind::kRepeatKvGrad,  // (R - 1) adds per output element
         [](const Program& p, const Instr& in) {
           return numel(p, in.inputs[0]) - numel(p, in.outputs[0]);
         }},
        {OpKind::kAdd, per_input_element},
        {OpKind::kMul, per_input_element},
        {OpKind::kScale, per_input_element},
        {OpKind::kConvert, per_input_element},
        {OpKind::kSoftmaxCrossEntropy,
         [](const Program& p, const Instr& in) { return 4.0 * numel(p, in.inputs[0]); }},
        {OpKind::kSoftmaxCrossEntropyGrad,
         [](const Program& p, const Instr& in) { return 4.0 * numel(p, in.inputs[0]); }},
        {OpKind::kMaskedMeanLoss,
         [](const Program& p, const Instr& in) { return 3.0 * numel(p, in.inputs[0]); }},
        {OpKind::kMaskedMeanLossGrad,
         [](const Program& p, const Instr& in) { return 2.0 * numel(p, in.inputs[0]); }},
        {OpKind::kSumSquares,
         [](const Program& p, const Instr& in) { return 2.0 * numel(p, in.inputs[0]); }},
        {OpKind::kGlobalNorm,
         [](const Program&, const Instr& in) { return static_cast<double>(in.inputs.size()) + 1; }},
        {OpKind::kClipFactor, one_flop},
        {OpKind::kLearningRate, one_flop},
        {OpKind::kIncrement, one_flop},
        {OpKind::kSafeDivide, one_flop},
        {OpKind::kAxisIndex, one_flop},
        {OpKind::kVocabMax, per_input_element},
        {OpKind::kVocabStats,  // sub, exp, add
         [](const Program& p, const Instr& in) { return 3.0 * numel(p, in.inputs[0]); }},
        {OpKind::kXentFromStats,
         [](const Program& p, const Instr& in) { return 3.0 * numel(p, in.inputs[0]); }},
        {OpKind::kAllReduce, {per_input_element, gathered_bytes}},  // one add per element
        {OpKind::kReduceScatter, {per_input_element, scattered_bytes}},
        {OpKind::kAllGather, {zero_flops, gathered_bytes}},
        {OpKind::kAllToAll, {zero_flops, all_to_all_bytes}},
        // The rows a ragged all-to-all moves depend on the data (the routing): the cost is
        // the balanced estimate, each member's rows spread evenly over the group, (G-1)/G of
        // them from the others; its rows are the smaller of its input and its buffer (a
        // dispatch sends all its rows into a larger buffer, a return sends back only the rows
        // it received). The communicator counts the rows actually moved (docs/sharding.md).
        {OpKind::kRaggedAllToAll, {zero_flops, ragged_all_to_all_bytes}},
        {OpKind::kMoeEpDispatch, zero_flops},  // global identities (the partitioner lowers them)
        {OpKind::kMoeEpReturn, zero_flops},
        {OpKind::kMoeEpPlan, zero_flops},      // index arithmetic
        {OpKind::kCollectivePermute, {zero_flops, permute_bytes}},
        {OpKind::kDynamicSlice, zero_flops},  // no traffic
        {OpKind::kReshape, zero_flops},
        {OpKind::kSlice, zero_flops},
        {OpKind::kPad, zero_flops},
        {OpKind::kConcat, zero_flops},
        {OpKind::kShift, zero_flops},
        {OpKind::kIndexInDim, zero_flops},
        {OpKind::kAddIndexInDim, per_input_element},  // one add per update element
        {OpKind::kTranspose, zero_flops},
        {OpKind::kCompare, per_input_element},
        {OpKind::kSelect, per_input_element},
        {OpKind::kIndexPerRow, zero_flops},
        {OpKind::kAddIndexPerRow, per_input_element},  // one add per update element
        {OpKind::kRemainder, per_input_element},
        {OpKind::kDynamicSliceInDim, zero_flops},
        {OpKind::kDynamicUpdateSliceInDim, zero_flops},  // a copy (add: one add per update element)
        {OpKind::kLayerNorm,
         [](const Program& p, const Instr& in) { return 8.0 * numel(p, in.inputs[0]); }},
        {OpKind::kLayerNormGrad,
         [](const Program& p, const Instr& in) { return 12.0 * numel(p, in.inputs[0]); }},
        {OpKind::kBiasAdd, per_input_element},
        {OpKind::kBiasAddGrad, per_input_element},
        {OpKind::kMoveToHost, zero_flops},  // a copy over the host link
        {OpKind::kMoveToDevice, zero_flops},
        {OpKind::kAdamW,
         [](const Program& p, const Instr& in) { return 12.0 * numel(p, in.inputs[0]); }},
        // Mixture of experts: the routing's few flops per (token, expert); dispatch and
        // combine as MaxText's dense einsums (2 flops per (b, s, e, c, m)), which is what XLA
        // runs; the expert GEMMs 2·R·K·N per expert.
        {OpKind::kMoeRoute,
         [](const Program& p, const Instr& in) { return 10.0 * numel(p, in.inputs[0]); }},
        {OpKind::kMoeRouteGrad,
         [](const Program& p, const Instr& in) { return 20.0 * numel(p, in.inputs[0]); }},
        {OpKind::kMoeDispatch, moe_einsum_flops},
        {OpKind::kMoeCombine, moe_einsum_flops},
        {OpKind::kMoeCombineWeightsGrad,
         [](const Program& p, const Instr& in) {
           return 2.0 * numel(p, in.outputs[0]) * p.value(in.inputs[0]).shape.dim(-1);
         }},
        {OpKind::kExpertMatmul,
         [](const Program& p, const Instr& in) {
           return 2.0 * numel(p, in.outputs[0]) * p.value(in.inputs[0]).shape.dim(-1);
         }},
        {OpKind::kExpertMatmulGrad,
         [](const Program& p, const Instr& in) {
           const Shape& a = p.value(in.inputs[0]).shape;
           return 2.0 * numel(p, in.outputs[0]) * a.prod(1, a.rank() - 1);
         }},
        // The dropless dispatch: routing as moe_route's; a multiply-add per permuted element;
        // the grouped GEMMs 2·N·K·P over every row (each row in one group), as jax's ragged_dot.
        {OpKind::kMoeTopK,
         [](const Program& p, const Instr& in) { return 10.0 * numel(p, in.inputs[0]); }},
        {OpKind::kMoeTopKGrad,
         [](const Program& p, const Instr& in) { return 20.0 * numel(p, in.inputs[0]); }},
        {OpKind::kMoePermute,
         [](const Program& p, const Instr& in) { return 2.0 * numel(p, in.inputs[0]); }},
        {OpKind::kMoePermuteWeightsGrad,
         [](const Program& p, const Instr& in) {
           return 2.0 * numel(p, in.outputs[0]) * p.value(in.inputs[0]).shape.dim(-1);
         }},
        {OpKind::kRaggedDot,
         [](const Program& p, const Instr& in) {
           return 2.0 * numel(p, in.outputs[0]) * p.value(in.inputs[0]).shape.dim(-1);
         }},
        // lhs ([B,]N,K), dout ([B,]N,P) -> (E,K,P): each row is in one group, so 2·B·N·K·P
        // (not E times that: the output's E is not a factor).
        {OpKind::kRaggedDotGrad,
         [](const Program& p, const Instr& in) {
           return 2.0 * numel(p, in.inputs[0]) * p.value(in.inputs[1]).shape.dim(-1);
         }},
    },
    Cost{unary_flops}, Cost{unary_grad_flops});

}  // namespace

double instr_flops(const Program& p, const Instr& in) {
  return kCost[op_index(in.kind)].flops(p, in);
}

double collective_bytes_received(const Program& p, const Instr& in) {
  return kCost[op_index(in.kind)].bytes_received(p, in);
}

double collective_bytes_received(const Program& p, const Instr& in, int64_t rank) {
  if (in.kind == OpKind::kCollectivePermute) return permute_bytes_to(p, in, rank);
  return collective_bytes_received(p, in);
}

std::map<std::string, double> Executable::collective_bytes_received_by(int64_t device) const {
  std::map<std::string, double> out;
  for (const Instr& in : program_.instrs()) {
    if (!is_collective(in.kind)) continue;
    const int64_t rank = AxesGroup(mesh_, in.attrs.mesh_axes).rank(device);
    const double b = collective_bytes_received(program_, in, rank);
    if (b > 0) out[collective_axes_key(in.attrs.mesh_axes)] += b;
  }
  return out;
}

double instr_bytes_accessed(const Program& p, const Instr& in) {
  double bytes = 0;
  for (ValueId v : in.inputs) bytes += static_cast<double>(p.value(v).bytes());
  for (ValueId v : in.outputs) bytes += static_cast<double>(p.value(v).bytes());
  return bytes;
}

CostAnalysis estimate_cost(const Program& p) {
  CostAnalysis c;
  for (const Instr& in : p.instrs()) {
    c.flops += instr_flops(p, in);
    c.bytes_accessed += instr_bytes_accessed(p, in);
    if (is_collective(in.kind)) {
      const double b = collective_bytes_received(p, in);
      if (b > 0) c.collective_bytes[collective_axes_key(in.attrs.mesh_axes)] += b;
    }
  }
  return c;
}

}  // namespace eng
