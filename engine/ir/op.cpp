// engine/ir/op.cpp: op names and attribute printing/hashing.
#include "engine/ir/op.h"

#include <cstring>

#include <fmt/format.h>

#include "engine/base/hash.h"

namespace eng {

std::string_view op_name(OpKind kind) {
  switch (kind) {
    case OpKind::kEmbedLookup: return "embed_lookup";
    case OpKind::kOneHot: return "one_hot";
    case OpKind::kMatmul: return "matmul";
    case OpKind::kRmsNorm: return "rmsnorm";
    case OpKind::kRope: return "rope";
    case OpKind::kAttention: return "attention";
    case OpKind::kSwiglu: return "swiglu";
    case OpKind::kAdd: return "add";
    case OpKind::kMul: return "mul";
    case OpKind::kScale: return "scale";
    case OpKind::kConvert: return "convert";
    case OpKind::kConstraint: return "sharding_constraint";
    case OpKind::kSoftmaxCrossEntropy: return "softmax_cross_entropy";
    case OpKind::kMaskedMeanLoss: return "masked_mean_loss";
    case OpKind::kEmbedLookupGrad: return "embed_lookup_grad";
    case OpKind::kRmsNormGrad: return "rmsnorm_grad";
    case OpKind::kAttentionGrad: return "attention_grad";
    case OpKind::kSwigluGrad: return "swiglu_grad";
    case OpKind::kSoftmaxCrossEntropyGrad: return "softmax_cross_entropy_grad";
    case OpKind::kMaskedMeanLossGrad: return "masked_mean_loss_grad";
    case OpKind::kSumSquares: return "sum_squares";
    case OpKind::kGlobalNorm: return "global_norm";
    case OpKind::kClipFactor: return "clip_factor";
    case OpKind::kLearningRate: return "learning_rate";
    case OpKind::kAdamW: return "adamw";
    case OpKind::kIncrement: return "increment";
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kAllToAll: return "all_to_all";
    case OpKind::kCollectivePermute: return "collective_permute";
    case OpKind::kDynamicSlice: return "dynamic_slice";
    case OpKind::kReshape: return "reshape";
    case OpKind::kSlice: return "slice";
    case OpKind::kPad: return "pad";
    case OpKind::kConcat: return "concatenate";
    case OpKind::kShift: return "shift";
    case OpKind::kSafeDivide: return "safe_divide";
    case OpKind::kAxisIndex: return "axis_index";
    case OpKind::kVocabMax: return "vocab_max";
    case OpKind::kVocabStats: return "vocab_stats";
    case OpKind::kXentFromStats: return "xent_from_stats";
    case OpKind::kRepeatKv: return "repeat_kv";
    case OpKind::kRepeatKvGrad: return "repeat_kv_grad";
  }
  return "?";
}

namespace {
std::string format_own_attrs(OpKind kind, const OpAttrs& a) {
  switch (kind) {
    case OpKind::kOneHot:
    case OpKind::kEmbedLookupGrad: return fmt::format("[depth={}]", a.depth);
    case OpKind::kMatmul:
      return fmt::format("[a_split={} b_split={}{}{}]", a.a_split, a.b_split,
                         a.trans_a ? " trans_a" : "", a.trans_b ? " trans_b" : "");
    case OpKind::kRmsNorm: return fmt::format("[eps={:g}]", a.eps);
    case OpKind::kRope:
      return fmt::format("[min_timescale={:g} max_timescale={:g}{}]", a.min_timescale,
                         a.max_timescale, a.inverse ? " inverse" : "");
    case OpKind::kAttention:
    case OpKind::kAttentionGrad: return fmt::format("[scale={:g} causal]", a.scale);
    case OpKind::kScale: return fmt::format("[scale={:g}]", a.scale);
    case OpKind::kMaskedMeanLossGrad:
      return a.scale == 1.0 ? "" : fmt::format("[scale={:g}]", a.scale);
    case OpKind::kConvert: return fmt::format("[dtype={}]", dtype_name(a.dtype));
    case OpKind::kConstraint: {
      std::vector<std::string> names;
      for (const auto& l : a.logical) names.push_back(l.value_or("None"));
      return fmt::format("[logical=({}){}]", fmt::join(names, ", "), a.raw ? " raw" : "");
    }
    case OpKind::kMaskedMeanLoss: return a.unnormalized ? "[unnormalized]" : "";
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kDynamicSlice:
      return fmt::format("[dim={} axes=({})]", a.dim, fmt::join(a.mesh_axes, ","));
    case OpKind::kAllReduce:
      return fmt::format("[axes=({}){}]", fmt::join(a.mesh_axes, ","), a.reduce_max ? " max" : "");
    case OpKind::kAllToAll:
      return fmt::format("[split_dim={} concat_dim={} axes=({})]", a.dim, a.dim2,
                         fmt::join(a.mesh_axes, ","));
    case OpKind::kCollectivePermute:
      return fmt::format("[axes=({}) shift={}{}]", fmt::join(a.mesh_axes, ","), a.shift,
                         a.fill_zero ? " fill_zero" : "");
    case OpKind::kReshape: return fmt::format("[new_shape=({})]", fmt::join(a.new_shape, ","));
    case OpKind::kSlice:
    case OpKind::kPad: return fmt::format("[dim={} start={} size={}]", a.dim, a.start, a.size);
    case OpKind::kConcat: return fmt::format("[dim={}]", a.dim);
    case OpKind::kShift: return fmt::format("[dim={} shift={}]", a.dim, a.shift);
    case OpKind::kRepeatKv:
    case OpKind::kRepeatKvGrad: return fmt::format("[repeats={}]", a.size);
    case OpKind::kAxisIndex:
      return fmt::format("[axes=({}) size={}]", fmt::join(a.mesh_axes, ","), a.size);
    case OpKind::kClipFactor: return fmt::format("[threshold={:g}]", a.clip_threshold);
    case OpKind::kLearningRate:
      return fmt::format("[lr={:g} warmup_steps={} cos_steps={} final_fraction={:g}]",
                         a.learning_rate, a.warmup_steps, a.cos_steps, a.final_fraction);
    case OpKind::kAdamW:
      return fmt::format("[b1={:g} b2={:g} eps={:g} weight_decay={:g}]", a.b1, a.b2, a.eps,
                         a.weight_decay);
    default: return "";
  }
}
}  // namespace

std::string format_attrs(OpKind kind, const OpAttrs& a) {
  std::string own = format_own_attrs(kind, a);
  if (a.vmap == 0) return own;
  // "[vmap=2 eps=1e-05]": the vmapped dim first, then the per-slice op's attributes.
  if (own.empty()) return fmt::format("[vmap={}]", a.vmap);
  return fmt::format("[vmap={} {}", a.vmap, own.substr(1));
}

bool is_collective(OpKind kind) {
  switch (kind) {
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllReduce:
    case OpKind::kAllToAll:
    case OpKind::kCollectivePermute:
    case OpKind::kDynamicSlice: return true;
    default: return false;
  }
}

uint64_t hash_attrs(OpKind kind, const OpAttrs& a) {
  // The printed form names every attribute the op reads, exactly: hash that.
  return hash_bytes(format_attrs(kind, a), static_cast<uint64_t>(kind));
}

}  // namespace eng
