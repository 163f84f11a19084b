// engine/ir/builder_ops.cpp: the Builder's one-op helpers (layernorm ... increment, index_in_dim
// ... shift, reshape ... matmul): each emits one instruction of the op table with its
// attributes; shape inference is builder.cpp's.
#include <string>
#include <utility>
#include <vector>

#include "engine/base/check.h"
#include "engine/ir/builder.h"

namespace eng {

ValueId Builder::layernorm(ValueId x, ValueId scale, ValueId bias, double eps) {
  OpAttrs a;
  a.eps = eps;
  return emit(OpKind::kLayerNorm, {x, scale, bias}, a)[0];
}

ValueId Builder::bias_add(ValueId x, ValueId bias) {
  return emit(OpKind::kBiasAdd, {x, bias}, OpAttrs{})[0];
}

std::pair<ValueId, ValueId> Builder::rmsnorm(ValueId x, ValueId scale, double eps) {
  OpAttrs a;
  a.eps = eps;
  auto o = emit(OpKind::kRmsNorm, {x, scale}, a);
  return {o[0], o[1]};
}

ValueId Builder::rope(ValueId x, ValueId positions, double min_ts, double max_ts, bool inverse,
                      kern::RopeForm form) {
  OpAttrs a;
  a.min_timescale = min_ts;
  a.max_timescale = max_ts;
  a.inverse = inverse;
  a.rope_interleave = form.interleave;
  a.rope_use_scale = form.use_scale;
  return emit(OpKind::kRope, {x, positions}, a)[0];
}

std::pair<ValueId, ValueId> Builder::attention(ValueId q, ValueId k, ValueId v, double scale,
                                               ValueId segment_ids) {
  OpAttrs a;
  a.scale = scale;
  std::vector<ValueId> in = {q, k, v};
  if (segment_ids != kNoValue) in.push_back(segment_ids);
  auto o = emit(OpKind::kAttention, in, a);
  return {o[0], o[1]};
}

ValueId Builder::swiglu(ValueId g, ValueId u) { return emit(OpKind::kSwiglu, {g, u})[0]; }
ValueId Builder::repeat_kv(ValueId x, int64_t repeats, std::string heads_logical) {
  OpAttrs a;
  a.size = repeats;
  const ValueId out = emit(OpKind::kRepeatKv, {x}, a)[0];
  std::vector<std::string>& l = program_.values_[out].logical;
  if (!l.empty() && !heads_logical.empty()) l[l.size() - 2] = std::move(heads_logical);
  return out;
}
ValueId Builder::add(ValueId a, ValueId b) { return emit(OpKind::kAdd, {a, b})[0]; }
ValueId Builder::mul(ValueId a, ValueId b) { return emit(OpKind::kMul, {a, b})[0]; }

ValueId Builder::scale(ValueId x, double c) {
  OpAttrs a;
  a.scale = c;
  return emit(OpKind::kScale, {x}, a)[0];
}

ValueId Builder::convert(ValueId x, DType dtype) {
  OpAttrs a;
  a.dtype = dtype;
  return emit(OpKind::kConvert, {x}, a)[0];
}

ValueId Builder::constraint(ValueId x, std::vector<std::string> logical) {
  OpAttrs a;
  a.logical = to_logical_axes(logical);
  return emit(OpKind::kConstraint, {x}, a)[0];
}

ValueId Builder::raw_constraint(ValueId x, std::vector<std::string> logical) {
  OpAttrs a;
  a.logical = to_logical_axes(logical);
  a.raw = true;
  return emit(OpKind::kConstraint, {x}, a)[0];
}

std::pair<ValueId, ValueId> Builder::softmax_cross_entropy(ValueId logits, ValueId targets) {
  auto o = emit(OpKind::kSoftmaxCrossEntropy, {logits, targets});
  return {o[0], o[1]};
}

std::pair<ValueId, ValueId> Builder::masked_mean_loss(ValueId xent, ValueId segmentation) {
  auto o = emit(OpKind::kMaskedMeanLoss, {xent, segmentation});
  return {o[0], o[1]};
}

ValueId Builder::sum_squares(ValueId x) { return emit(OpKind::kSumSquares, {x})[0]; }

ValueId Builder::global_norm(std::vector<ValueId> sums) {
  return emit(OpKind::kGlobalNorm, std::move(sums))[0];
}

ValueId Builder::clip_factor(ValueId norm, double threshold) {
  OpAttrs a;
  a.clip_threshold = threshold;
  return emit(OpKind::kClipFactor, {norm}, a)[0];
}

ValueId Builder::learning_rate(ValueId step, double lr, int64_t warmup_steps, int64_t cos_steps,
                               double final_fraction) {
  OpAttrs a;
  a.learning_rate = lr;
  a.warmup_steps = warmup_steps;
  a.cos_steps = cos_steps;
  a.final_fraction = final_fraction;
  return emit(OpKind::kLearningRate, {step}, a)[0];
}

std::array<ValueId, 3> Builder::adamw(ValueId param, ValueId grad, ValueId mu, ValueId nu,
                                      ValueId lr, ValueId clip, ValueId step, double b1, double b2,
                                      double eps, double weight_decay) {
  OpAttrs a;
  a.b1 = b1;
  a.b2 = b2;
  a.eps = eps;
  a.weight_decay = weight_decay;
  auto o = emit(OpKind::kAdamW, {param, grad, mu, nu, lr, clip, step}, a);
  return {o[0], o[1], o[2]};
}

ValueId Builder::increment(ValueId step) { return emit(OpKind::kIncrement, {step})[0]; }

// ---- data movement, traced indices, transpose, compare, select (op.h) ----

ValueId Builder::index_in_dim(ValueId x, int dim, int64_t index) {
  OpAttrs a;
  a.dim = dim;
  a.start = index;
  return emit(OpKind::kIndexInDim, {x}, a)[0];
}

ValueId Builder::remainder(ValueId a, ValueId b) {
  return emit(OpKind::kRemainder, {a, b}, OpAttrs{})[0];
}

ValueId Builder::dynamic_slice_in_dim(ValueId x, ValueId start, int dim, int64_t size) {
  OpAttrs a;
  a.dim = dim;
  a.size = size;
  return emit(OpKind::kDynamicSliceInDim, {x, start}, a)[0];
}

ValueId Builder::dynamic_update_slice_in_dim(ValueId x, ValueId update, ValueId start, int dim,
                                             bool add) {
  OpAttrs a;
  a.dim = dim;
  a.inverse = add;
  return emit(OpKind::kDynamicUpdateSliceInDim, {x, update, start}, a)[0];
}

ValueId Builder::index_per_row(ValueId x, const std::vector<int64_t>& indices) {
  OpAttrs a;
  a.new_shape = indices;
  return emit(OpKind::kIndexPerRow, {x}, a)[0];
}

ValueId Builder::add_index_per_row(ValueId update, ValueId acc,
                                   const std::vector<int64_t>& indices, int64_t size) {
  OpAttrs a;
  a.new_shape = indices;
  a.size = size;
  if (acc == kNoValue) return emit(OpKind::kAddIndexPerRow, {update}, a)[0];
  return emit(OpKind::kAddIndexPerRow, {update, acc}, a)[0];
}

ValueId Builder::add_index_in_dim(ValueId update, ValueId acc, int dim, int64_t index,
                                  int64_t size) {
  OpAttrs a;
  a.dim = dim;
  a.start = index;
  a.size = size;
  if (acc == kNoValue) return emit(OpKind::kAddIndexInDim, {update}, a)[0];
  return emit(OpKind::kAddIndexInDim, {update, acc}, a)[0];
}

ValueId Builder::transpose(ValueId x, const std::vector<int64_t>& permutation) {
  OpAttrs a;
  a.new_shape = permutation;
  return emit(OpKind::kTranspose, {x}, a)[0];
}

ValueId Builder::compare(ValueId a, ValueId b, CompareDirection direction) {
  OpAttrs at;
  at.dim = static_cast<int>(direction);
  return emit(OpKind::kCompare, {a, b}, at)[0];
}

ValueId Builder::select(ValueId pred, ValueId on_true, ValueId on_false) {
  return emit(OpKind::kSelect, {pred, on_true, on_false})[0];
}

ValueId Builder::concat(std::vector<ValueId> xs, int dim) {
  OpAttrs a;
  a.dim = dim;
  return emit(OpKind::kConcat, std::move(xs), a)[0];
}

ValueId Builder::shift(ValueId x, int dim, int64_t shift, int64_t source_start,
                       int64_t source_size) {
  OpAttrs a;
  a.dim = dim;
  a.shift = shift;
  if (source_size > 0) {
    a.start = source_start;
    a.size = source_size;
  }
  return emit(OpKind::kShift, {x}, a)[0];
}

ValueId Builder::reshape(ValueId x, const Shape& shape) {
  OpAttrs a;
  a.new_shape.assign(shape.dims().begin(), shape.dims().end());
  return emit(OpKind::kReshape, {x}, a)[0];
}

ValueId Builder::slice(ValueId x, int dim, int64_t start, int64_t size) {
  OpAttrs a;
  a.dim = dim;
  a.start = start;
  a.size = size;
  return emit(OpKind::kSlice, {x}, a)[0];
}

ValueId Builder::pad(ValueId x, int dim, int64_t start, int64_t size,
                     const std::vector<std::string>& out_sharding) {
  OpAttrs a;
  a.dim = dim;
  a.start = start;
  a.size = size;
  a.out_logical = to_logical_axes(out_sharding);
  return emit(OpKind::kPad, {x}, a)[0];
}

ValueId Builder::embed_lookup(ValueId table, ValueId ids) {
  return emit(OpKind::kEmbedLookup, {table, ids})[0];
}

ValueId Builder::one_hot(ValueId ids, int64_t depth, std::string depth_logical) {
  OpAttrs a;
  a.depth = depth;
  const ValueId out = emit(OpKind::kOneHot, {ids}, a)[0];
  program_.values_[out].logical.back() = std::move(depth_logical);
  return out;
}

ValueId Builder::matmul(ValueId a, ValueId b, int a_split, int b_split, bool trans_a,
                        bool trans_b, std::vector<std::string> out_sharding, ValueId out_like) {
  OpAttrs at;
  at.out_logical = to_logical_axes(out_sharding);
  at.out_like = out_like;
  at.a_split = a_split;
  at.b_split = b_split;
  at.trans_a = trans_a;
  at.trans_b = trans_b;
  const size_t n_out = at.out_logical.size();
  ValueId out = emit(OpKind::kMatmul, {a, b}, at)[0];
  ENG_CHECK(n_out == 0 || static_cast<int>(n_out) == info(out).shape.rank() - (vmap_ > 0 ? 1 : 0),
            "matmul: out_sharding has {} names for result {}", n_out,
            info(out).shape.to_string());
  return out;
}

}  // namespace eng
