// engine/compile/spmd.cpp: the partitioner: one walk over the global program applying the
// op rules of docs/sharding.md, with every layout change going through reshard().
// The Partitioner class is in spmd_partitioner.h, its op rules in spmd_*_rules.cpp and
// spmd_matmul.cpp; here: the rule table, the dispatch and vmap.
#include "engine/compile/spmd_partitioner.h"

namespace eng {
namespace spmd_internal {

namespace {
// An op's rule: a factor map (data), or a hand-written method where the rule is not one.
struct SpmdRule {
  Status (Partitioner::*hand)(const Instr&) = nullptr;
  FactorMap factors = {nullptr, FactorMap::kAgree};
};
using Pt = Partitioner;
constexpr SpmdRule factors(const char* text, FactorMap::Source source = FactorMap::kAgree) {
  return {nullptr, {text, source}};
}
constexpr SpmdRule kAttentionRule = {&Pt::attention};
constexpr SpmdRule kAttentionGradRule = {&Pt::attention};

// The SPMD rule of each op (engine/ir/op_table.h).
constexpr OpTable<SpmdRule> kRules = make_op_table<SpmdRule>(
    {
        {OpKind::kEmbedLookup, {&Pt::embed_lookup}},
        {OpKind::kOneHot, factors("(...)->(...,v!)")},
        {OpKind::kMatmul, {&Pt::matmul}},
        {OpKind::kRmsNorm, {&Pt::rmsnorm}},
        {OpKind::kRmsNormGrad, {&Pt::rmsnorm}},
        {OpKind::kRope, factors("(b,t!,h,d!),(b,t!)->(b,t!,h,d!)", FactorMap::kFirstInput)},
        {OpKind::kAttention, kAttentionRule},
        {OpKind::kAttentionGrad, kAttentionGradRule},
        {OpKind::kAdd, {&Pt::add}},
        {OpKind::kSwiglu, factors("(...),(...)->(...)")},
        {OpKind::kMul, factors("(...),(...)->(...)")},
        {OpKind::kSwigluGrad, factors("(...),(...),(...)->(...),(...)")},
        {OpKind::kScale, {&Pt::linear}},
        {OpKind::kConvert, {&Pt::linear}},
        {OpKind::kConstraint, {&Pt::constraint}},
        {OpKind::kSoftmaxCrossEntropy, {&Pt::xent}},
        {OpKind::kSoftmaxCrossEntropyGrad, {&Pt::xent}},
        {OpKind::kMaskedMeanLoss, {&Pt::masked_mean_loss}},
        {OpKind::kEmbedLookupGrad, {&Pt::embed_lookup_grad}},
        {OpKind::kMaskedMeanLossGrad, {&Pt::masked_mean_loss_grad}},
        {OpKind::kSumSquares, {&Pt::sum_squares}},
        {OpKind::kGlobalNorm, {&Pt::replicated}},
        {OpKind::kClipFactor, {&Pt::replicated}},
        {OpKind::kLearningRate, {&Pt::replicated}},
        {OpKind::kIncrement, {&Pt::replicated}},
        {OpKind::kAdamW, {&Pt::adamw}},
        {OpKind::kReshape, {&Pt::reshape}},
        {OpKind::kSlice, {&Pt::rows}},
        {OpKind::kPad, {&Pt::rows}},
        {OpKind::kConcat, {&Pt::concat}},
        {OpKind::kShift, {&Pt::shift}},
        {OpKind::kRepeatKv, {&Pt::repeat_kv}},
        {OpKind::kRepeatKvGrad, {&Pt::repeat_kv}},
        // Per-device ops: the partitioner emits them; a global program has none.
        {OpKind::kAllGather, {&Pt::not_global}},
        {OpKind::kReduceScatter, {&Pt::not_global}},
        {OpKind::kAllReduce, {&Pt::not_global}},
        {OpKind::kAllToAll, {&Pt::not_global}},
        {OpKind::kCollectivePermute, {&Pt::not_global}},
        {OpKind::kDynamicSlice, {&Pt::not_global}},
        {OpKind::kSafeDivide, {&Pt::not_global}},
        {OpKind::kAxisIndex, {&Pt::not_global}},
        {OpKind::kVocabMax, {&Pt::not_global}},
        {OpKind::kVocabStats, {&Pt::not_global}},
        {OpKind::kXentFromStats, {&Pt::not_global}},
        {OpKind::kIndexInDim, {&Pt::index_in_dim}},
        {OpKind::kAddIndexInDim, {&Pt::add_index_in_dim}},
        {OpKind::kTranspose, {&Pt::transpose}},
        {OpKind::kCompare, factors("(...),(...)->(...)")},
        {OpKind::kSelect, factors("(...),(...),(...)->(...)")},
        {OpKind::kIndexPerRow, {&Pt::index_per_row}},
        {OpKind::kAddIndexPerRow, {&Pt::add_index_per_row}},
        {OpKind::kMoeRoute, {&Pt::moe_route}},
        {OpKind::kMoeRouteGrad, {&Pt::moe_route}},
        {OpKind::kMoeDispatch, {&Pt::moe_dispatch}},
        {OpKind::kMoeCombine, {&Pt::moe_dispatch}},
        {OpKind::kMoeCombineWeightsGrad, {&Pt::moe_combine_weights_grad}},
        {OpKind::kExpertMatmul, {&Pt::expert_matmul}},
        {OpKind::kExpertMatmulGrad, {&Pt::expert_matmul}},
        {OpKind::kLayerNorm, {&Pt::layernorm}},
        {OpKind::kLayerNormGrad, {&Pt::layernorm}},
        {OpKind::kBiasAdd, {&Pt::bias_add}},
        {OpKind::kBiasAddGrad, {&Pt::bias_add}},
        {OpKind::kMoveToHost, {&Pt::linear}},  // the value keeps its sharding (and partials)
        {OpKind::kMoveToDevice, {&Pt::linear}},
        {OpKind::kMoeTopK, {&Pt::moe_top_k}},
        {OpKind::kMoeTopKGrad, {&Pt::moe_top_k}},
        {OpKind::kMoePermute, {&Pt::moe_permute}},
        {OpKind::kMoePermuteWeightsGrad, {&Pt::moe_permute_weights_grad}},
        {OpKind::kRaggedDot, {&Pt::ragged_dot}},
        {OpKind::kRaggedDotGrad, {&Pt::ragged_dot}},
        {OpKind::kRaggedAllToAll, {&Pt::ragged_all_to_all}},
        {OpKind::kMoeEpDispatch, {&Pt::moe_ep}},
        {OpKind::kMoeEpReturn, {&Pt::moe_ep}},
        {OpKind::kMoeEpPlan, {&Pt::not_global}},
        {OpKind::kRemainder, factors("(...),(...)->(...)")},
        {OpKind::kDynamicSliceInDim, {&Pt::dynamic_slice_in_dim}},
        {OpKind::kDynamicUpdateSliceInDim, {&Pt::dynamic_update_slice_in_dim}},
    },
    factors("(...)->(...)"), factors("(...),(...)->(...)"));  // unary: y = f(x); (x, dy) -> dx
}  // namespace

Status Partitioner::instr(const Instr& in) {
  if (in.attrs.vmap > 0) return vmapped(in);
  if (in.kind != OpKind::kMoeEpDispatch && in.kind != OpKind::kMoeEpReturn)
    for (ValueId x : in.inputs)
      if (routed_[x] != kNoValue) return routed(in);
  const SpmdRule& rule = kRules[op_index(in.kind)];
  return rule.hand ? (this->*rule.hand)(in) : by_factors(in, rule.factors);
}

// jax.vmap with spmd_axis_name="stage": the leading dim goes on `stage` (one slice per
// stage group), each device squeezes its slice, the per-slice rule runs with the stage axis
// taken, and the outputs get the dim back.
Status Partitioner::vmapped(const Instr& in) {
  const int64_t S = in.attrs.vmap;
  const std::string& stage = o_.axes.vmap;
  if (!mesh_.has_axis(stage) || mesh_.axis_size(stage) != S)
    return invalid_argument("partition: {} is vmapped over {} stages but the mesh's {} axis has "
                            "size {}", op_name(in.kind), S, stage,
                            mesh_.has_axis(stage) ? mesh_.axis_size(stage) : 1);
  const Axes vm = {stage};
  struct Saved {
    ValueId g, local;
    PartitionSpec spec;
  };
  std::vector<Saved> saved;
  for (ValueId x : in.inputs) {
    if (swapped_[x]) continue;
    const Shape& gs = gv(x).shape;
    PartitionSpec cur = without_axes(spec_[x], vm);
    Dims d = cur.dims();
    d[0] = vm;
    const PartitionSpec full = normalize(PartitionSpec(d, cur.partial()), gs.rank(), mesh_);
    ENG_ASSIGN_OR_RETURN(ValueId lv, reshard(local_[x], gs, spec_[x], full));
    const Shape inner = local_shape(gs, full).slice(1, gs.rank());
    saved.push_back({x, local_[x], spec_[x]});
    local_[x] = local_reshape(lv, inner);
    spec_[x] = PartitionSpec(Dims(d.begin() + 1, d.end()), cur.partial());
    swapped_[x] = true;
  }
  vm_ = vm;
  Instr inner = in;
  inner.attrs.vmap = 0;
  Status st = instr(inner);
  vm_.clear();
  for (const Saved& sv : saved) {
    local_[sv.g] = sv.local;
    spec_[sv.g] = sv.spec;
    swapped_[sv.g] = false;
  }
  ENG_RETURN_IF_ERROR(st);
  for (ValueId o : in.outputs) {
    const PartitionSpec is = spec_[o];
    Dims d = is.dims();
    d.insert(d.begin(), vm);
    const PartitionSpec full(d, is.partial());
    const ValueId lv = local_reshape(local_[o], local_shape(gv(o).shape, full));
    b_.mutable_info(lv).recomputed = gv(o).recomputed;
    b_.mutable_info(lv).checkpoint_name = gv(o).checkpoint_name;
    set(o, lv, normalize(full, gv(o).shape.rank(), mesh_));
  }
  return ok_status();
}


}  // namespace spmd_internal

Result<Partitioned> partition(const Program& global, const Mesh& mesh, const SpmdOptions& options) {
  spmd_internal::Partitioner p(global, mesh, options);
  return p.run();
}

}  // namespace eng
