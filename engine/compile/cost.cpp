// engine/compile/cost.cpp: the cost model: flops and bytes accessed per instruction.
#include "engine/compile/executable.h"

namespace eng {

namespace {

double numel(const Program& p, ValueId v) { return static_cast<double>(p.value(v).shape.numel()); }

// Causal attention forward: QK^T and PV each cost 2·D flops per (query, key<=query) pair,
// and there are B·H·T(T+1)/2 pairs.
double attention_flops(const Shape& q) {
  const double B = q[0], T = q[1], H = q[2], D = q[3];
  return 2.0 * B * H * D * T * (T + 1);
}

}  // namespace

double instr_flops(const Program& p, const Instr& in) {
  const auto& x = in.inputs;
  switch (in.kind) {
    case OpKind::kMatmul: {
      const Shape& a = p.value(x[0]).shape;
      const double rows = static_cast<double>(a.prod(0, in.attrs.a_split));
      const double cols = static_cast<double>(a.prod(in.attrs.a_split, a.rank()));
      const double K = in.attrs.trans_a ? rows : cols;
      return 2.0 * K * numel(p, in.outputs[0]);  // 2·M·N·K
    }
    case OpKind::kAttention: return attention_flops(p.value(x[0]).shape);
    case OpKind::kAttentionGrad: return 2.0 * attention_flops(p.value(x[0]).shape);
    case OpKind::kEmbedLookup:
    case OpKind::kOneHot:
    case OpKind::kConstraint: return 0;
    case OpKind::kEmbedLookupGrad: return numel(p, x[1]);  // one add per dy element
    case OpKind::kRmsNorm: return 4.0 * numel(p, x[0]);
    case OpKind::kRmsNormGrad: return 8.0 * numel(p, x[0]);
    case OpKind::kRope: return 6.0 * numel(p, x[0]);
    case OpKind::kSwiglu: return 5.0 * numel(p, x[0]);
    case OpKind::kSwigluGrad: return 10.0 * numel(p, x[0]);
    case OpKind::kRepeatKv: return 0;  // data movement
    case OpKind::kRepeatKvGrad:        // (R - 1) adds per output element
      return numel(p, x[0]) - numel(p, in.outputs[0]);
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kScale:
    case OpKind::kConvert: return numel(p, x[0]);
    case OpKind::kSoftmaxCrossEntropy:
    case OpKind::kSoftmaxCrossEntropyGrad: return 4.0 * numel(p, x[0]);
    case OpKind::kMaskedMeanLoss: return 3.0 * numel(p, x[0]);
    case OpKind::kMaskedMeanLossGrad: return 2.0 * numel(p, x[0]);
    case OpKind::kSumSquares: return 2.0 * numel(p, x[0]);
    case OpKind::kGlobalNorm: return static_cast<double>(x.size()) + 1;
    case OpKind::kClipFactor:
    case OpKind::kLearningRate:
    case OpKind::kIncrement:
    case OpKind::kSafeDivide:
    case OpKind::kAxisIndex: return 1;
    case OpKind::kVocabMax: return numel(p, x[0]);
    case OpKind::kVocabStats: return 3.0 * numel(p, x[0]);  // sub, exp, add
    case OpKind::kXentFromStats: return 3.0 * numel(p, x[0]);
    case OpKind::kAllReduce:
    case OpKind::kReduceScatter: return numel(p, x[0]);  // one add per element received
    case OpKind::kAllGather:
    case OpKind::kAllToAll:
    case OpKind::kCollectivePermute:
    case OpKind::kDynamicSlice:
    case OpKind::kReshape:
    case OpKind::kSlice:
    case OpKind::kPad:
    case OpKind::kConcat:
    case OpKind::kShift: return 0;
    case OpKind::kAdamW: return 12.0 * numel(p, x[0]);
  }
  return 0;
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
