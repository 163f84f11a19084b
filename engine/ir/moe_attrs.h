// engine/ir/moe_attrs.h: kMoeRoute's attributes (op.h) as the routing loops' parameters.
#pragma once

#include "engine/ir/op.h"
#include "engine/tensor/moe.h"

namespace eng {

inline moe::RouteParams route_params(const OpAttrs& a) {
  moe::RouteParams p;
  p.k = a.size;
  p.capacity = a.start;
  p.score_func = a.dim;
  p.deepseek_weights = a.dim2 != 0;
  p.norm_topk_prob = a.inverse;
  p.routed_scaling_factor = a.scale;
  p.lb_scale = a.eps;
  return p;
}

}  // namespace eng
