// tests/ops/every_op_test.cpp: every OpKind, one test each (ggml's test-backend-ops): random
// shapes and values; the executor (through compile + Runtime on one device) equals the
// reference interpreter; the VJP equals central finite differences in double (differentiable
// ops); every instruction's cost is non-negative; sharded runs on 2 devices (data=2) and 4
// devices (data=2 x tensor=2) equal the interpreter's one-device result.
//
// Per-device ops (collectives, axis_index, safe_divide, the vocab-parallel ops) cannot appear
// in a global program: each is checked through a global program whose partitioned form
// contains it, run sharded against the one-device reference. An op with neither a global case
// nor such a program fails its test, so adding an op without adding its check fails here.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/compile/executable.h"
#include "engine/compile/spmd.h"
#include "engine/runtime/runtime.h"
#include "tests/common/mesh_helpers.h"
#include "tests/ir/grad_check.h"
#include "tests/runtime/runtime_harness.h"

namespace eng {
namespace {

// Dims of one case; every dim a 4-device mesh may shard (B, H, E, F) is even.
struct Sizes {
  int64_t B, T, H, D, E, V, F;
};

// Random sizes for the forward and sharded runs (fixed seed per op).
Sizes random_sizes(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](std::vector<int64_t> v) { return v[rng() % v.size()]; };
  return {pick({2, 4}), pick({3, 4, 5}), pick({2, 4}), pick({2, 4}),
          pick({4, 6}), pick({5, 7}),    pick({4, 8})};
}

// The sizes of tests/ir/grad_check.h, which the finite-difference loss head assumes.
constexpr Sizes kGradSizes{irtest::kB, irtest::kT, irtest::kH, irtest::kD,
                           irtest::kE, irtest::kV, irtest::kF};

using Names = std::vector<std::string>;
const Names kBTE = {"activation_batch", "activation_length", "activation_embed"};
const Names kBTHD = {"activation_batch", "activation_length", "activation_heads", ""};

// The float arguments' dtype: f32, or bf16 for EveryOpBf16 (tests/bf16 covers the rest).
DType g_float = DType::kF32;

// Arguments: kParam with explicit logical names, so a test mesh shards exactly those dims.
ValueId arg(Builder& b, const std::string& name, Shape s, Names logical = {},
            DType dtype = DType::kF32) {
  if (dtype == DType::kF32) dtype = g_float;
  if (logical.empty()) logical.assign(s.rank(), "");
  if (!logical.empty() && logical[0] == "B") logical[0] = "activation_batch";
  return b.argument(name, std::move(s), dtype, std::move(logical), ArgRole::kParam);
}
ValueId act(Builder& b, const std::string& name, Shape s) {  // (B, ...) batch-sharded
  Names l(s.rank(), "");
  l[0] = "activation_batch";
  return arg(b, name, std::move(s), l);
}
ValueId ids(Builder& b, const Sizes& z, const std::string& name = "ids") {
  return arg(b, name, Shape{z.B, z.T}, {"activation_batch", ""}, DType::kI32);
}

// A global case: emits the op from fresh arguments and returns the values to output; float
// arguments to differentiate go onto wrt. Differentiable cases return the op's result first.
using Build = std::function<std::vector<ValueId>(Builder&, const Sizes&, std::vector<ValueId>&)>;
struct Case {
  Build build;
  bool differentiable = false;
};

std::vector<ValueId> wrt_all(std::vector<ValueId>& wrt, std::vector<ValueId> xs) {
  wrt.insert(wrt.end(), xs.begin(), xs.end());
  return xs;
}

using V = std::vector<ValueId>;
using K = OpKind;

// The backward ops (fed arbitrary values: each is checked as a function of its inputs).
void add_backward_cases(std::map<OpKind, Case>& c) {
  c[K::kEmbedLookupGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    OpAttrs a;
    a.depth = z.V;
    return b.emit(K::kEmbedLookupGrad, {ids(b, z), act(b, "dy", Shape{z.B, z.T, z.E})}, a);
  }};
  c[K::kRmsNormGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    return b.emit(K::kRmsNormGrad,
                  {act(b, "x", Shape{z.B, z.T, z.E}), arg(b, "norm_scale", Shape{z.E}),
                   act(b, "norm_rstd", Shape{z.B * z.T}), act(b, "dy", Shape{z.B, z.T, z.E})});
  }};
  c[K::kLayerNormGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    return b.emit(K::kLayerNormGrad,
                  {act(b, "x", Shape{z.B, z.T, z.E}), arg(b, "norm_scale", Shape{z.E}),
                   act(b, "norm_mean", Shape{z.B * z.T}), act(b, "norm_rstd", Shape{z.B * z.T}),
                   act(b, "dy", Shape{z.B, z.T, z.E})});
  }};
  // dy (B, T, H, D) summed to the bias (H, D): partial over data, heads split over tensor.
  c[K::kBiasAddGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    OpAttrs a;
    a.dim = 2;
    return b.emit(K::kBiasAddGrad, {arg(b, "dy", Shape{z.B, z.T, z.H, z.D}, kBTHD)}, a);
  }};
  c[K::kAttentionGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    const Shape s{z.B, z.T, z.H, z.D};
    OpAttrs a;
    a.scale = 0.5;
    // Random segment ids (packed sequences; any ids: the mask need not be contiguous).
    return b.emit(
        K::kAttentionGrad,
        {arg(b, "q", s, kBTHD), arg(b, "k", s, kBTHD), arg(b, "v", s, kBTHD), arg(b, "o", s, kBTHD),
         arg(b, "lse", Shape{z.B, z.H, z.T}, {"B", "activation_heads", ""}),
         arg(b, "do", s, kBTHD), ids(b, z, "segment_ids")},
        a);
  }};
  c[K::kSwigluGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    const Shape s{z.B, z.T, z.F};
    return b.emit(K::kSwigluGrad, {act(b, "g", s), act(b, "u", s), act(b, "dy", s)});
  }};
  c[K::kSoftmaxCrossEntropyGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    return b.emit(K::kSoftmaxCrossEntropyGrad,
                  {act(b, "logits", Shape{z.B, z.T, z.V}), ids(b, z, "targets"),
                   act(b, "lse", Shape{z.B, z.T}), act(b, "dxent", Shape{z.B, z.T})});
  }};
  c[K::kMaskedMeanLossGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    return b.emit(
        K::kMaskedMeanLossGrad,
        {ids(b, z, "segmentation"), arg(b, "norm_weights", Shape{}), arg(b, "dloss", Shape{})});
  }};
  c[K::kRepeatKvGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    OpAttrs a;
    a.size = 2;
    return b.emit(K::kRepeatKvGrad, {arg(b, "dy", Shape{z.B, z.T, 2 * z.H, z.D}, kBTHD)}, a);
  }};
  c[K::kGeluGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    const Shape s{z.B, z.T, z.E};
    return b.emit(K::kGeluGrad, {act(b, "x", s), act(b, "dy", s)});
  }};
  // The front-end's unary ops (docs/frontend.md); log's and 1/x's inputs made positive by exp.
  for (K grad : {K::kExpGrad, K::kLogGrad, K::kTanhGrad, K::kReciprocalGrad, K::kSqrtGrad,
                 K::kAbsGrad, K::kSignGrad, K::kSinGrad, K::kCosGrad, K::kFloorGrad,
                 K::kLog1pGrad, K::kExpm1Grad}) {
    c[grad] = {[grad](Builder& b, const Sizes& z, V&) -> V {
      const Shape s{z.B, z.T, z.E};
      ValueId x = act(b, "x", s);
      if (grad == K::kLogGrad || grad == K::kReciprocalGrad || grad == K::kSqrtGrad)
        x = b.emit(K::kExp, {x})[0];
      return b.emit(grad, {x, act(b, "dy", s)});
    }};
  }
}

// Optimizer and metric ops (scalars replicated).
void add_optimizer_cases(std::map<OpKind, Case>& c) {
  auto norms = [](Builder& b, const Sizes& z) {
    return b.global_norm({b.sum_squares(act(b, "x", Shape{z.B, z.T, z.E})),
                          b.sum_squares(arg(b, "w", Shape{z.E, z.F}, {"embed", "mlp"}))});
  };
  c[K::kSumSquares] = {[](Builder& b, const Sizes& z, V&) -> V {
    return {b.sum_squares(act(b, "x", Shape{z.B, z.T, z.E}))};
  }};
  c[K::kGlobalNorm] = {[norms](Builder& b, const Sizes& z, V&) -> V { return {norms(b, z)}; }};
  c[K::kClipFactor] = {
      [norms](Builder& b, const Sizes& z, V&) -> V { return {b.clip_factor(norms(b, z), 1.0)}; }};
  c[K::kLearningRate] = {[](Builder& b, const Sizes&, V&) -> V {
    ValueId step = b.argument("step", Shape{}, DType::kI32, {}, ArgRole::kStep);
    return {b.learning_rate(step, 1e-3, 3, 10, 0.1)};
  }};
  c[K::kIncrement] = {[](Builder& b, const Sizes&, V&) -> V {
    return {b.increment(b.argument("step", Shape{}, DType::kI32, {}, ArgRole::kStep))};
  }};
  c[K::kAdamW] = {[](Builder& b, const Sizes& z, V&) -> V {
    const Shape s{z.E, z.F};
    const Names l{"embed", "mlp"};
    auto o =
        b.adamw(arg(b, "param", s, l), arg(b, "grad", s, l), arg(b, "mu", s, l),
                arg(b, "nu_norm", s, l), arg(b, "lr", Shape{}), arg(b, "clip", Shape{}),
                b.argument("step", Shape{}, DType::kI32, {}, ArgRole::kStep), 0.9, 0.95, 1e-8, 0.1);
    return {o[0], o[1], o[2]};
  }};
}

// Data movement, repeat_kv and gelu: differentiable, checked through their VJPs.
void add_data_movement_cases(std::map<OpKind, Case>& c) {
  auto one = [](std::function<ValueId(Builder&, const Sizes&, ValueId)> f, bool heads = false) {
    return Case{[f, heads](Builder& b, const Sizes& z, V& w) -> V {
                  ValueId x = heads ? arg(b, "x", Shape{z.B, z.T, z.H, z.D}, kBTHD)
                                    : act(b, "x", Shape{z.B, z.T, z.E});
                  w.push_back(x);
                  return {f(b, z, x)};
                },
                true};
  };
  c[K::kReshape] = one([](Builder& b, const Sizes& z, ValueId x) {
    return b.reshape(x, Shape{z.B, z.T, 2, z.E / 2});
  });
  c[K::kSlice] =
      one([](Builder& b, const Sizes& z, ValueId x) { return b.slice(x, 2, 1, z.E - 2); });
  c[K::kPad] = one([](Builder& b, const Sizes& z, ValueId x) { return b.pad(x, 2, 1, z.E + 3); });
  // A shift of every row, plus one of source row 2 alone (moved to row 1, zeros elsewhere).
  c[K::kShift] = one([](Builder& b, const Sizes&, ValueId x) {
    return b.add(b.shift(x, 1, 1), b.shift(x, 1, -1, 2, 1));
  });
  c[K::kRepeatKv] =
      one([](Builder& b, const Sizes&, ValueId x) { return b.repeat_kv(x, 2); }, true);
  c[K::kGelu] = one([](Builder& b, const Sizes&, ValueId x) { return b.emit(K::kGelu, {x})[0]; });
  // Scanned layers: a stacked (B, T, 3, E) read at index 1 of dim 2, and its transpose: the
  // 1-input form (zeros elsewhere) accumulated into by the 2-input form.
  c[K::kIndexInDim] = {[](Builder& b, const Sizes& z, V& w) -> V {
                         ValueId x = wrt_all(w, {act(b, "x", Shape{z.B, z.T, 3, z.E})})[0];
                         return {b.index_in_dim(x, 2, 1)};
                       },
                       true};
  c[K::kAddIndexInDim] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        auto u = wrt_all(w, {act(b, "u", Shape{z.B, z.T, z.E}), act(b, "v", Shape{z.B, z.T, z.E})});
        ValueId acc = b.add_index_in_dim(u[0], kNoValue, 2, 0, 3);
        return {b.add_index_in_dim(u[1], acc, 2, 2, 3)};
      },
      true};
  // Traced indices (the front-end's x[i], x.at[i], lax.dynamic_slice_in_dim): an i32 start
  // (random in [0, V), so often clamped) along the embed dim, and along the batch dim, which
  // the meshes shard (the rule makes it whole).
  c[K::kDynamicSliceInDim] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        ValueId x = wrt_all(w, {act(b, "x", Shape{z.B, z.T, z.E})})[0];
        ValueId start = arg(b, "start", Shape{}, {}, DType::kI32);
        return {b.dynamic_slice_in_dim(x, start, 2, 2), b.dynamic_slice_in_dim(x, start, 0, 1)};
      },
      true};
  c[K::kDynamicUpdateSliceInDim] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        auto x = wrt_all(w, {act(b, "x", Shape{z.B, z.T, z.E}), act(b, "u", Shape{z.B, 2, z.E})});
        ValueId start = arg(b, "start", Shape{}, {}, DType::kI32);
        return {b.dynamic_update_slice_in_dim(x[0], x[1], start, 1, false),
                b.dynamic_update_slice_in_dim(x[0], x[1], start, 1, true)};
      },
      true};
  // jnp.remainder of a negative dividend in (-0.65, -0.35) by a divisor in (0.7, 1.3) (the
  // "norm" arguments' range): floor(a / b) = -1 everywhere (no jump for the finite
  // differences to cross), so the result is a + b, of the divisor's sign, and db = dy.
  c[K::kRemainder] = {[](Builder& b, const Sizes& z, V& w) -> V {
                        const Shape s{z.B, z.T, z.E};
                        auto x = wrt_all(w, {act(b, "norm_a", s), act(b, "norm_b", s)});
                        return {b.remainder(b.scale(x[0], -0.5), x[1])};
                      },
                      true};
  // The circular pipeline's per-stage repeat selection: rows (B, sharded over data) pick
  // different slots; sharded, each device must find its global rows' indices.
  c[K::kIndexPerRow] = {[](Builder& b, const Sizes& z, V& w) -> V {
                          ValueId x = wrt_all(w, {arg(b, "x", Shape{3, z.B, z.T, z.E},
                                                      {"", "activation_batch", "", ""})})[0];
                          std::vector<int64_t> idx;
                          for (int64_t s = 0; s < z.B; ++s) idx.push_back((2 * s + 1) % 3);
                          return {b.index_per_row(x, idx)};
                        },
                        true};
  c[K::kAddIndexPerRow] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        auto u = wrt_all(w, {act(b, "u", Shape{z.B, z.T, z.E}), act(b, "v", Shape{z.B, z.T, z.E})});
        std::vector<int64_t> i0, i1;
        for (int64_t s = 0; s < z.B; ++s) {
          i0.push_back((2 * s + 1) % 3);
          i1.push_back(s % 3);
        }
        ValueId acc = b.add_index_per_row(u[0], kNoValue, i0, 3);
        // (3, B, T, E) -> (B, T, 3, E): the loss head reads (B, T, ...).
        return {b.transpose(b.add_index_per_row(u[1], acc, i1, 3), {1, 2, 0, 3})};
      },
      true};
  c[K::kExp] = one([](Builder& b, const Sizes&, ValueId x) { return b.emit(K::kExp, {x})[0]; });
  c[K::kTanh] = one([](Builder& b, const Sizes&, ValueId x) { return b.emit(K::kTanh, {x})[0]; });
  // numpy's sqrt, abs, sign, sin, cos, floor, log1p, expm1 (docs/frontend.md). abs, sign and
  // floor are checked away from their kinks and jumps: the inputs are random, the
  // finite-difference steps small.
  for (K k : {K::kAbs, K::kSin, K::kCos, K::kLog1p, K::kExpm1})
    c[k] = one([k](Builder& b, const Sizes&, ValueId x) { return b.emit(k, {x})[0]; });
  // sign and floor have zero gradients: x + f(x), so that the check is not vacuous (a wrong
  // VJP of f would add to x's 1).
  for (K k : {K::kSign, K::kFloor})
    c[k] = one([k](Builder& b, const Sizes&, ValueId x) { return b.add(x, b.emit(k, {x})[0]); });
  for (K k : {K::kLog, K::kReciprocal, K::kSqrt})  // on exp(x): inputs > 0
    c[k] = one([k](Builder& b, const Sizes&, ValueId x) {
      return b.emit(k, {b.emit(K::kExp, {x})[0]})[0];
    });
  // The front-end's transpose, comparisons and select (docs/frontend.md). compare is piecewise
  // constant (no gradient); select's gradient flows to the chosen operand only.
  // (E, B, T) with E sharded -> (B, T, E): the loss head wants (B, T, E).
  c[K::kTranspose] = {[](Builder& b, const Sizes& z, V& w) -> V {
                        ValueId x = wrt_all(w, {act(b, "x", Shape{z.E, z.B, z.T})})[0];
                        return {b.transpose(x, {1, 2, 0})};
                      },
                      true};
  c[K::kCompare] = {[](Builder& b, const Sizes& z, V&) -> V {
    const Shape s{z.B, z.T, z.E};
    ValueId x = act(b, "x", s), y = act(b, "y", s);
    V out;
    for (int d = 0; d <= static_cast<int>(CompareDirection::kGe); ++d)
      out.push_back(b.compare(x, d % 2 ? x : y, static_cast<CompareDirection>(d)));
    return out;
  }};
  c[K::kSelect] = {[](Builder& b, const Sizes& z, V& w) -> V {
                     const Shape s{z.B, z.T, z.E};
                     auto x = wrt_all(w, {act(b, "t", s), act(b, "f", s)});
                     ValueId pred =
                         b.compare(act(b, "p", s), act(b, "q", s), CompareDirection::kGt);
                     return {b.select(pred, x[0], x[1])};
                   },
                   true};
  c[K::kConcat] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        auto x = wrt_all(w, {act(b, "x", Shape{z.B, z.T, z.E}), act(b, "y", Shape{z.B, z.T, 2})});
        return {b.concat(x, 2)};
      },
      true};
}

// Mixture of experts (op.h): routing with capacity, dispatch/combine, the expert GEMMs.
ValueId f32(Builder& b, ValueId x) {
  return b.info(x).dtype == DType::kF32 ? x : b.convert(x, DType::kF32);
}
OpAttrs route_attrs(bool deepseek) {
  OpAttrs a;
  a.size = 2;   // k of 4 experts
  a.start = 3;  // capacity: tokens over it are dropped (T is 3..5)
  a.dim = deepseek ? 2 : 0;
  a.dim2 = deepseek ? 1 : 0;
  a.scale = deepseek ? 2.5 : 1.0;
  a.inverse = !deepseek;
  a.eps = 0.3;
  return a;
}
const Names kExpertMajor = {"", "activation_batch", "", ""};

void add_moe_cases(std::map<OpKind, Case>& c) {
  // Two routings (mixtral's softmax over the top-k with norm_topk_prob; deepseek's sigmoid
  // scores scaled), their combine weights projected to (B, T) and both load-balance losses in
  // the loss: the VJP covers combine and lb.
  // A third routing with the router bias (routed_bias: the choice reads logits + bias, the
  // weights not): the VJP reaches the bias through the load-balance loss.
  c[K::kMoeRoute] = {[](Builder& b, const Sizes& z, V& w) -> V {
                       auto xs = wrt_all(w, {act(b, "logits", Shape{z.B, z.T, 4}),
                                             arg(b, "bias", Shape{4}, {""})});
                       // The logits in the arguments' dtype (bf16: the bf16 kernel), the bias f32.
                       ValueId x = xs[0], bias = f32(b, xs[1]);
                       auto r0 = b.emit(K::kMoeRoute, {x}, route_attrs(false));
                       auto r1 = b.emit(K::kMoeRoute, {x}, route_attrs(true));
                       auto r2 = b.emit(K::kMoeRoute, {x, bias}, route_attrs(true));
                       ValueId wt = arg(b, "w", Shape{4, 3, 1});
                       ValueId seg = ids(b, z, "segmentation");
                       auto project = [&](ValueId c) {  // (B, T, E, C) -> (B, T)
                         return b.reshape(b.matmul(c, wt, 2, 2), Shape{z.B, z.T});
                       };
                       ValueId l0 = b.masked_mean_loss(project(r0[0]), seg).first;
                       ValueId l1 = b.masked_mean_loss(project(r1[0]), seg).first;
                       ValueId l2 = b.masked_mean_loss(project(r2[0]), seg).first;
                       ValueId loss = b.add(b.add(b.add(l0, r0[1]), b.add(l1, r1[1])),
                                            b.add(l2, r2[1]));
                       return {loss, r0[0], r0[2], r1[0], r1[2], r2[0], r2[2]};
                     },
                     true};
  // Dispatch with weights (differentiable in both) and with the mask; E = T so the result
  // (E, B, C, M) transposes to the loss head's (B, T, ...).
  c[K::kMoeDispatch] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        auto xs = wrt_all(w, {act(b, "combine", Shape{z.B, z.T, z.T, 2}),
                              act(b, "x", Shape{z.B, z.T, z.E})});
        OpAttrs mask;
        mask.raw = true;
        ValueId y = b.emit(K::kMoeDispatch, {xs[0], xs[1]})[0];
        ValueId ym = b.emit(K::kMoeDispatch, {xs[0], xs[1]}, mask)[0];
        return {b.transpose(y, {1, 0, 2, 3}), ym};
      },
      true};
  c[K::kMoeCombine] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        auto xs = wrt_all(w, {act(b, "combine", Shape{z.B, z.T, 3, 2}),
                              arg(b, "y", Shape{3, z.B, 2, z.E}, kExpertMajor)});
        OpAttrs mask;
        mask.raw = true;
        return {b.emit(K::kMoeCombine, {xs[0], xs[1]})[0],
                b.emit(K::kMoeCombine, {xs[0], xs[1]}, mask)[0]};
      },
      true};
  // The expert GEMMs, plain and with the weight transposed; G = T for the loss head.
  c[K::kExpertMatmul] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        auto xs = wrt_all(w, {arg(b, "a", Shape{z.T, z.B, 2, z.E}, kExpertMajor),
                              arg(b, "w", Shape{z.T, z.E, z.F}, {"", "", "mlp"}),
                              arg(b, "wt", Shape{z.T, z.F, z.E}, {"", "mlp", ""})});
        OpAttrs t;
        t.trans_b = true;
        ValueId y = b.emit(K::kExpertMatmul, {xs[0], xs[1]})[0];
        ValueId yt = b.emit(K::kExpertMatmul, {xs[0], xs[2]}, t)[0];
        return {b.transpose(b.add(y, yt), {1, 0, 2, 3})};
      },
      true};
  c[K::kMoeRouteGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    OpAttrs a = route_attrs(true);
    a.inverse = true;
    ValueId logits = act(b, "logits", Shape{z.B, z.T, 4});
    ValueId dcombine = act(b, "dcombine", Shape{z.B, z.T, 4, 3});
    ValueId bias = f32(b, arg(b, "bias", Shape{4}, {""}));
    ValueId dx = b.emit(K::kMoeRouteGrad, {logits, dcombine}, a)[0];
    ValueId dxb = b.emit(K::kMoeRouteGrad, {logits, dcombine, bias}, a)[0];
    a.raw = true;  // the bias's gradient (E), a sum over the rows
    ValueId db = b.emit(K::kMoeRouteGrad, {logits, dcombine, bias}, a)[0];
    return {dx, dxb, db};
  }};
  c[K::kMoeCombineWeightsGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    return b.emit(K::kMoeCombineWeightsGrad,
                  {act(b, "dout", Shape{z.B, z.T, z.E}), arg(b, "y", Shape{3, z.B, 2, z.E},
                                                             kExpertMajor)});
  }};
  c[K::kExpertMatmulGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    return b.emit(K::kExpertMatmulGrad, {arg(b, "a", Shape{z.T, z.B, 2, z.E}, kExpertMajor),
                                         arg(b, "dy", Shape{z.T, z.B, 2, z.F}, kExpertMajor)});
  }};
}

// The dropless dispatch: the permutation and the groups come from a routing of random logits
// (kMoeTopK: order and rank inverse permutations, group sizes summing to the rows), so every
// case feeds its op the indices the model does; the logits are not differentiated.
struct Routed {
  ValueId weights, order, rank, group_sizes;
};
Routed route_top_k(Builder& b, const Sizes& z) {
  auto r = b.emit(K::kMoeTopK, {act(b, "logits", Shape{z.B, z.T, 4})}, route_attrs(false));
  return {r[0], r[1], r[2], r[3]};
}
const Names kRowsMlp = {"activation_batch", "", "activation_mlp"};

void add_dropless_cases(std::map<OpKind, Case>& c) {
  // Top-2 of 4 without and with the router bias (deepseek's weights): the weights projected to
  // (B, T) and both load-balance losses in the loss; order, rank, groups and load compared.
  c[K::kMoeTopK] = {[](Builder& b, const Sizes& z, V& w) -> V {
                      auto xs = wrt_all(w, {act(b, "logits", Shape{z.B, z.T, 4}),
                                            arg(b, "bias", Shape{4}, {""})});
                      auto r0 = b.emit(K::kMoeTopK, {xs[0]}, route_attrs(false));
                      auto r1 = b.emit(K::kMoeTopK, {xs[0], f32(b, xs[1])}, route_attrs(true));
                      ValueId wt = arg(b, "w", Shape{2, 1});
                      ValueId seg = ids(b, z, "segmentation");
                      auto project = [&](ValueId v) {  // (B, T, k) -> (B, T)
                        return b.reshape(b.matmul(v, wt, 2, 1), Shape{z.B, z.T});
                      };
                      ValueId l0 = b.masked_mean_loss(project(r0[0]), seg).first;
                      ValueId l1 = b.masked_mean_loss(project(r1[0]), seg).first;
                      ValueId loss = b.add(b.add(l0, r0[4]), b.add(l1, r1[4]));
                      return {loss, r0[0], r0[1], r0[2], r0[3], r0[5], r1[0], r1[1], r1[3]};
                    },
                    true};
  c[K::kMoeTopKGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    OpAttrs a = route_attrs(true);
    a.inverse = true;
    ValueId logits = act(b, "logits", Shape{z.B, z.T, 4});
    ValueId dweights = act(b, "dweights", Shape{z.B, z.T, 2});
    ValueId bias = f32(b, arg(b, "bias", Shape{4}, {""}));
    ValueId dx = b.emit(K::kMoeTopKGrad, {logits, dweights}, a)[0];
    ValueId dxb = b.emit(K::kMoeTopKGrad, {logits, dweights, bias}, a)[0];
    a.raw = true;  // the bias's gradient (E), a sum over the rows
    ValueId db = b.emit(K::kMoeTopKGrad, {logits, dweights, bias}, a)[0];
    return {dx, dxb, db};
  }};
  // Permute plain and weighted, sorted rows y added, unpermuted with the weights: x, weights
  // and y all reach the loss (B, T, E); the model dim on tensor.
  c[K::kMoePermute] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        const Routed r = route_top_k(b, z);
        auto xs = wrt_all(w, {arg(b, "x", Shape{z.B, z.T, z.E}, kBTE),
                              act(b, "weights", Shape{z.B, z.T, 2}),
                              arg(b, "y", Shape{z.B, 2 * z.T, z.E}, kBTE)});
        OpAttrs fwd, inv;
        fwd.size = inv.size = 2;
        inv.inverse = true;
        ValueId p = b.emit(K::kMoePermute, {xs[0], r.order, r.rank}, fwd)[0];
        ValueId pw = b.emit(K::kMoePermute, {xs[0], r.order, r.rank, xs[1]}, fwd)[0];
        ValueId u = b.emit(K::kMoePermute, {b.add(b.add(p, pw), xs[2]), r.order, r.rank, xs[1]},
                           inv)[0];
        // Unweighted unpermute of the plain permute: each token's k copies summed, k x = 2x.
        ValueId uu = b.emit(K::kMoePermute, {p, r.order, r.rank}, inv)[0];
        return {u, p, uu};
      },
      true};
  c[K::kMoePermuteWeightsGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    const Routed r = route_top_k(b, z);
    OpAttrs a;
    a.size = 2;
    return b.emit(K::kMoePermuteWeightsGrad,
                  {arg(b, "a", Shape{z.B, z.T, z.E}, kBTE), arg(b, "y", Shape{z.B, 2 * z.T, z.E}, kBTE),
                   r.order, r.rank},
                  a);
  }};
  // wi-like (K = E, gathered), then wo-like (K = F on tensor in both: a partial sum), plain and
  // with the weight transposed; one (N, K) ragged_dot with random group sizes (forward only).
  c[K::kRaggedDot] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        const Routed r = route_top_k(b, z);
        auto xs = wrt_all(w, {arg(b, "lhs", Shape{z.B, 2 * z.T, z.E}, kBTE),
                              arg(b, "w1", Shape{4, z.E, z.F}, {"", "embed", "mlp"}),
                              arg(b, "w3t", Shape{4, z.F, z.E}, {"", "mlp", "embed"}),
                              arg(b, "w2", Shape{4, z.F, z.E}, {"", "mlp", "embed"})});
        OpAttrs t;
        t.trans_b = true;
        ValueId h = b.emit(K::kRaggedDot, {xs[0], xs[1], r.group_sizes})[0];
        ValueId ht = b.emit(K::kRaggedDot, {xs[0], xs[2], r.group_sizes}, t)[0];
        ValueId o = b.emit(K::kRaggedDot, {b.add(h, ht), xs[3], r.group_sizes})[0];
        ValueId flat = b.emit(K::kRaggedDot, {arg(b, "lhs2", Shape{z.T, z.E}), xs[1],
                                              arg(b, "sizes", Shape{4}, {""}, DType::kI32)})[0];
        return {b.reshape(o, Shape{z.B, z.T, 2 * z.E}), h, flat};
      },
      true};
  c[K::kRaggedDotGrad] = {[](Builder& b, const Sizes& z, V&) -> V {
    const Routed r = route_top_k(b, z);
    return {b.emit(K::kRaggedDotGrad, {arg(b, "lhs", Shape{z.B, 2 * z.T, z.E}, kBTE),
                                       arg(b, "dout", Shape{z.B, 2 * z.T, z.F}, kRowsMlp),
                                       r.group_sizes})[0],
            b.emit(K::kRaggedDotGrad, {arg(b, "lhs2", Shape{z.T, z.E}),
                                       arg(b, "dout2", Shape{z.T, z.F}, {"", "activation_mlp"}),
                                       arg(b, "sizes", Shape{4}, {""}, DType::kI32)})[0]};
  }};
}

// ragged_all_to_all over G = B members (dim 1, on data: the partitioned form runs the
// collective over data; F on tensor), T independent groups (dim 0), N = 5 rows, a 6-row buffer;
// random offsets and sizes in [0, 7): rows cut at the source's or the buffer's end, senders
// overlapping in a receiver's buffer (summed). Also the form without leading dims; the VJP
// check runs the reverse exchange (the op's transpose).
void add_ragged_all_to_all_cases(std::map<OpKind, Case>& c) {
  c[K::kRaggedAllToAll] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        const int64_t N = 5, R = 6;
        const Names members = {"", "activation_batch", "", "activation_embed"};
        auto idx = [&](const std::string& name, Shape s, Names l) {
          return arg(b, name, std::move(s), std::move(l), DType::kI32);
        };
        auto xs = wrt_all(w, {arg(b, "x", Shape{z.T, z.B, N, z.E}, members),
                              arg(b, "x2", Shape{z.B, N, z.E}, {"activation_batch", "", ""})});
        const Names il = {"", "activation_batch", ""};
        OpAttrs a;
        a.size = R;
        ValueId y = b.emit(K::kRaggedAllToAll,
                           {xs[0], idx("in_off", Shape{z.T, z.B, z.B}, il),
                            idx("send", Shape{z.T, z.B, z.B}, il),
                            idx("out_off", Shape{z.T, z.B, z.B}, il)},
                           a)[0];
        ValueId y2 = b.emit(K::kRaggedAllToAll,
                            {xs[1], idx("in_off2", Shape{z.B, z.B}, {"activation_batch", ""}),
                             idx("send2", Shape{z.B, z.B}, {"activation_batch", ""}),
                             idx("out_off2", Shape{z.B, z.B}, {"activation_batch", ""})},
                            a)[0];
        // (T, B, R, E) -> (B, T, R * E) for the loss head, plus y2 broadcast over T.
        ValueId bt = b.reshape(b.transpose(y, {1, 0, 2, 3}), Shape{z.B, z.T, R * z.E});
        ValueId y2t = b.reshape(y2, Shape{z.B, 1, R * z.E});
        std::vector<ValueId> rep(static_cast<size_t>(z.T), y2t);
        return {b.add(bt, b.concat(rep, 1)), y, y2};
      },
      true};
}

// MaxText's expert-parallel dropless block on rows already sorted per row b (x (B, 2T, E) with
// moe_top_k's group sizes): dispatch, the wi ragged_dots (K = E on tensor in x, the weight's
// E dim whole), swiglu, the wo ragged_dot, return. The experts' axes are `exp`'s (none on the
// test meshes: the identities), or, with `on_data`, activation_batch's: data, so the
// partitioned form is the expert-parallel lowering over data (moe_ep_plan, ragged all-to-alls,
// each device's own 2 of the 4 experts; the weights' gradients partial over the rows' other
// axes). A buffer factor of 2 is the worst case here (min(2, 4 / 2)); 1.5 may drop rows, which
// the interpreter's identity does not, so only the worst case is compared.
std::vector<ValueId> ep_block(Builder& b, const Sizes& z, V& w, bool on_data) {
  const Routed r = route_top_k(b, z);
  auto xs = wrt_all(w, {arg(b, "x", Shape{z.B, 2 * z.T, z.E}, kBTE),
                        arg(b, "wi", Shape{4, z.E, z.F}, {"", "", "mlp"}),
                        arg(b, "wg", Shape{4, z.E, z.F}, {"", "", "mlp"}),
                        arg(b, "wo", Shape{4, z.F, z.E}, {"", "mlp", ""})});
  OpAttrs ep;
  ep.size = 2;
  ep.scale = -1.0;
  ep.logical = {std::optional<std::string>(on_data ? "activation_batch" : "exp")};
  ValueId d = b.emit(K::kMoeEpDispatch, {xs[0], r.group_sizes}, ep)[0];
  ValueId h = b.swiglu(b.emit(K::kRaggedDot, {d, xs[1], r.group_sizes})[0],
                       b.emit(K::kRaggedDot, {d, xs[2], r.group_sizes})[0]);
  ValueId y = b.emit(K::kMoeEpReturn,
                     {b.add(b.emit(K::kRaggedDot, {h, xs[3], r.group_sizes})[0], d), r.group_sizes},
                     ep)[0];
  return {b.reshape(y, Shape{z.B, z.T, 2 * z.E}), d};
}

void add_moe_ep_cases(std::map<OpKind, Case>& c) {
  for (OpKind k : {K::kMoeEpDispatch, K::kMoeEpReturn})
    c[k] = {[](Builder& b, const Sizes& z, V& w) -> V { return ep_block(b, z, w, false); }, true};
}

std::map<OpKind, Case> forward_cases() {
  using K = OpKind;
  using V = std::vector<ValueId>;
  std::map<OpKind, Case> c;
  c[K::kEmbedLookup] = {[](Builder& b, const Sizes& z, V& w) -> V {
                          ValueId t = wrt_all(w, {arg(b, "table", Shape{z.V, z.E})})[0];
                          return {b.embed_lookup(t, ids(b, z))};
                        },
                        true};
  c[K::kOneHot] = {[](Builder& b, const Sizes& z, V&) -> V { return {b.one_hot(ids(b, z), z.V)}; }};
  c[K::kMatmul] = {[](Builder& b, const Sizes& z, V& w) -> V {
                     auto x = wrt_all(w, {act(b, "x", Shape{z.B, z.T, z.E}),
                                          arg(b, "w", Shape{z.E, z.F}, {"embed", "mlp"})});
                     return {b.matmul(x[0], x[1], 2, 1)};
                   },
                   true};
  c[K::kRmsNorm] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        auto x = wrt_all(w, {act(b, "x", Shape{z.B, z.T, z.E}), arg(b, "norm_scale", Shape{z.E})});
        auto [y, rstd] = b.rmsnorm(x[0], x[1], 1e-5);
        return {y, rstd};
      },
      true};
  // MaxText's RotaryEmbedding and LLaMARotaryEmbedding (adjacent pairs, Llama 3.1's scaled
  // timescales: with max 500000 and D = 4, pair 1's wavelength 4443 is in the interpolated
  // band), their sum first so the VJP check covers both.
  // MaxText's Gpt3LayerNorm: y, mean, rstd.
  c[K::kLayerNorm] = {[](Builder& b, const Sizes& z, V& w) -> V {
                        auto x = wrt_all(w, {act(b, "x", Shape{z.B, z.T, z.E}),
                                             arg(b, "norm_scale", Shape{z.E}),
                                             arg(b, "norm_bias", Shape{z.E})});
                        return b.emit(K::kLayerNorm, {x[0], x[1], x[2]}, [] {
                          OpAttrs a;
                          a.eps = 1e-5;
                          return a;
                        }());
                      },
                      true};
  // A (H, D) bias over (B, T, H, D), split over tensor with the heads.
  c[K::kBiasAdd] = {[](Builder& b, const Sizes& z, V& w) -> V {
                      auto x = wrt_all(w, {arg(b, "x", Shape{z.B, z.T, z.H, z.D}, kBTHD),
                                           arg(b, "bias", Shape{z.H, z.D}, {"activation_heads", ""})});
                      return {b.bias_add(x[0], x[1])};
                    },
                    true};
  c[K::kRope] = {[](Builder& b, const Sizes& z, V& w) -> V {
                   ValueId x = wrt_all(w, {arg(b, "x", Shape{z.B, z.T, z.H, z.D}, kBTHD)})[0];
                   ValueId pos = ids(b, z, "positions");
                   ValueId plain = b.rope(x, pos, 1.0, 10000.0);
                   ValueId llama31 = b.rope(x, pos, 1.0, 500000.0, false, {true, true});
                   return {b.add(plain, llama31), plain, llama31};
                 },
                 true};
  c[K::kAttention] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        const Shape s{z.B, z.T, z.H, z.D};
        auto x = wrt_all(w, {arg(b, "q", s, kBTHD), arg(b, "k", s, kBTHD), arg(b, "v", s, kBTHD)});
        // With random segment ids: the masked (packed) form, a superset of plain causal.
        auto [o, lse] = b.attention(x[0], x[1], x[2], 0.5, ids(b, z, "segment_ids"));
        return {o, lse};
      },
      true};
  auto binary = [](ValueId (Builder::*op)(ValueId, ValueId)) {
    return Case{[op](Builder& b, const Sizes& z, V& w) -> V {
                  auto x = wrt_all(
                      w, {act(b, "a", Shape{z.B, z.T, z.F}), act(b, "b", Shape{z.B, z.T, z.F})});
                  return {(b.*op)(x[0], x[1])};
                },
                true};
  };
  c[K::kSwiglu] = binary(&Builder::swiglu);
  c[K::kAdd] = binary(&Builder::add);
  c[K::kMul] = binary(&Builder::mul);
  c[K::kScale] = {[](Builder& b, const Sizes& z, V& w) -> V {
                    return {b.scale(wrt_all(w, {act(b, "x", Shape{z.B, z.T, z.E})})[0], -1.5)};
                  },
                  true};
  c[K::kConvert] = {[](Builder& b, const Sizes& z, V& w) -> V {  // f32 -> f32 (the VJP), -> bf16
                      ValueId x = wrt_all(w, {act(b, "x", Shape{z.B, z.T, z.E})})[0];
                      return {b.convert(x, DType::kF32), b.convert(x, DType::kBF16)};
                    },
                    true};
  c[K::kConstraint] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        return {b.constraint(wrt_all(w, {act(b, "x", Shape{z.B, z.T, z.E})})[0], kBTE)};
      },
      true};
  // Host offload's moves (a remat policy's offloaded names): identities on the value, the
  // second one reading a value compile() plans in the host arena.
  c[K::kMoveToHost] = {[](Builder& b, const Sizes& z, V& w) -> V {
                         ValueId x = wrt_all(w, {act(b, "x", Shape{z.B, z.T, z.E})})[0];
                         return {b.emit(K::kMoveToHost, {x})[0]};
                       },
                       true};
  c[K::kMoveToDevice] = {[](Builder& b, const Sizes& z, V& w) -> V {
                           ValueId x = wrt_all(w, {act(b, "x", Shape{z.B, z.T, z.E})})[0];
                           ValueId h = b.emit(K::kMoveToHost, {b.scale(x, 2.0)})[0];
                           return {b.emit(K::kMoveToDevice, {h})[0]};
                         },
                         true};
  c[K::kSoftmaxCrossEntropy] = {
      [](Builder& b, const Sizes& z, V& w) -> V {
        ValueId l = wrt_all(w, {act(b, "logits", Shape{z.B, z.T, z.V})})[0];
        auto [xent, lse] = b.softmax_cross_entropy(l, ids(b, z, "targets"));
        return {xent, lse};
      },
      true};
  c[K::kMaskedMeanLoss] = {[](Builder& b, const Sizes& z, V& w) -> V {
                             ValueId x = wrt_all(w, {act(b, "xent", Shape{z.B, z.T})})[0];
                             auto [loss, weights] =
                                 b.masked_mean_loss(x, ids(b, z, "segmentation"));
                             return {loss, weights};
                           },
                           true};
  add_backward_cases(c);
  add_optimizer_cases(c);
  add_data_movement_cases(c);
  add_moe_cases(c);
  add_dropless_cases(c);
  add_ragged_all_to_all_cases(c);
  add_moe_ep_cases(c);
  return c;
}

// ---- per-device ops: global programs whose partitioned forms contain them ----------------

// Each builds a global program (outputs included); the 4-device mesh partitions it.
std::vector<std::function<void(Builder&, const Sizes&)>> per_device_programs() {
  return {
      // matmuls contracting over the tensor-sharded mlp dim: partial sums, all_reduce;
      // the constraint puts the partial sum on tensor along E: reduce_scatter.
      [](Builder& b, const Sizes& z) {
        ValueId x = act(b, "x", Shape{z.B, z.T, z.E});
        ValueId h = b.matmul(x, arg(b, "w1", Shape{z.E, z.F}, {"embed", "mlp"}), 2, 1);
        ValueId y = b.matmul(h, arg(b, "w2", Shape{z.F, z.E}, {"mlp", "embed"}), 2, 1);
        b.output(b.swiglu(y, y), "full");
        b.output(
            b.constraint(b.matmul(h, arg(b, "w3", Shape{z.F, z.E}, {"mlp", "embed"}), 2, 1), kBTE),
            "scattered");
      },
      // vocab-parallel cross-entropy (logits split over tensor along V): axis_index,
      // vocab_max, vocab_stats, xent_from_stats; the masked mean over a split batch: safe_divide.
      [](Builder& b, const Sizes& z) {
        ValueId x = act(b, "x", Shape{z.B, z.T, z.E});
        ValueId head = arg(b, "head", Shape{z.E, 2 * z.F}, {"embed", "vocab"});
        ValueId logits = b.matmul(x, head, 2, 1, false, false,
                                  {"activation_batch", "activation_length", "activation_vocab"});
        auto [xent, lse] = b.softmax_cross_entropy(logits, ids(b, z, "targets"));
        b.output(b.masked_mean_loss(xent, ids(b, z, "segmentation")).first, "loss");
        b.output(lse, "lse");
      },
      // layout changes: E split over data (dynamic_slice from replicated), batch -> E over
      // data (all_to_all), back to replicated (all_gather); a shift along the split batch
      // (collective_permute); the first and the last batch row alone (one member's rows,
      // sent to the others by one-source collective_permutes); a row padded into one
      // member's block of a split dim (pad with an out_sharding).
      [](Builder& b, const Sizes& z) {
        ValueId x = act(b, "x", Shape{z.B, z.T, z.E});
        ValueId r = arg(b, "r", Shape{z.B, z.T, z.E});
        b.output(b.constraint(r, {"", "", "activation_batch"}), "sliced");
        ValueId moved = b.constraint(x, {"", "", "activation_batch"});
        b.output(b.constraint(b.scale(moved, 2.0), {"", "", ""}), "gathered");
        b.output(b.shift(x, 0, 1), "shifted");
        b.output(b.slice(x, 0, 0, 1), "row0");
        b.output(b.slice(x, 0, z.B - 1, 1), "last_row");  // the last member's block
        // One row of r (whole on dim 0) padded into the second half of 2B rows split over
        // data, one row into its block (a local pad, then the zero-traffic permute).
        b.output(b.pad(b.slice(r, 0, 0, 1), 0, z.B + 1, 2 * z.B, {"activation_batch", "", ""}),
                 "placed");
      },
      // last (the ops above keep their own programs): the dropless block with its experts on
      // data: moe_ep_plan and ragged_all_to_all.
      [](Builder& b, const Sizes& z) {
        V w;
        b.output(ep_block(b, z, w, true)[0], "y");
      },
  };
}

// ---- the checks ----------------------------------------------------------------------------

Mesh mesh2() { return testing::make_mesh({"data"}, {2}); }
Mesh mesh4() { return testing::make_mesh({"data", "tensor"}, {2, 2}); }

bool contains_op(const Program& p, OpKind kind) {
  for (const Instr& in : p.instrs())
    if (in.kind == kind) return true;
  return false;
}

// Runs p on `mesh` (arguments placed as compiled) and returns every output on the host;
// *exe_out stays valid for the test's life.
std::vector<std::vector<double>> run_on(const Program& p, const std::vector<HostTensor>& args,
                                        const Mesh& mesh, const Executable** exe_out = nullptr) {
  static std::vector<std::shared_ptr<const Executable>> keep;
  std::shared_ptr<const Executable> exe;
  std::vector<std::vector<double>> host = testing::run_on_runtime(p, args, mesh, &exe);
  if (exe) keep.push_back(exe);
  if (exe_out) *exe_out = exe.get();
  return host;
}

// Cost of every instruction of the global and per-device programs is finite and >= 0.
void expect_costs_valid(const Program& p) {
  for (const Instr& in : p.instrs()) {
    const double f = instr_flops(p, in), b = instr_bytes_accessed(p, in);
    EXPECT_TRUE(f >= 0 && std::isfinite(f)) << op_name(in.kind) << " flops " << f;
    EXPECT_TRUE(b >= 0 && std::isfinite(b)) << op_name(in.kind) << " bytes " << b;
    if (is_collective(in.kind)) {
      EXPECT_GE(collective_bytes_received(p, in), 0) << op_name(in.kind);
    }
  }
}

// One device (the executor), 2 and 4 devices: each equals the interpreter.
void expect_runs_match(const Program& p, const std::vector<HostTensor>& args, OpKind kind,
                       bool want_in_local, double rtol = 1e-4, double atol = 1e-5) {
  auto want = interpret(p, args);
  ASSERT_TRUE(want.ok()) << want.status().message();
  expect_costs_valid(p);
  bool seen = false;
  for (const Mesh& mesh : {Mesh(), mesh2(), mesh4()}) {
    const Executable* exe = nullptr;
    auto got = run_on(p, args, mesh, &exe);
    ASSERT_EQ(got.size(), p.outputs().size()) << mesh.to_string();
    for (size_t j = 0; j < got.size(); ++j)
      testing::expect_close(got[j], (*want)[j].data, rtol, atol,
                            fmt::format("{} on {}: output {} '{}'", op_name(kind), mesh.to_string(),
                                        j, p.outputs()[j].name));
    expect_costs_valid(exe->program());
    seen = seen || contains_op(exe->program(), kind);
  }
  if (want_in_local) {
    EXPECT_TRUE(seen) << op_name(kind) << ": no partitioned program has it";
  }
}

// The loss the VJP check differentiates: y itself (a scalar), a masked mean (B, T), or the
// cross-entropy head of tests/ir/grad_check.h (B, T, ...).
ValueId loss_of(Builder& b, ValueId y) {
  const int r = b.info(y).shape.rank();
  if (r == 0) return y;
  if (r == 2) {
    ValueId seg =
        b.argument("segmentation", Shape{irtest::kB, irtest::kT}, DType::kI32, {}, ArgRole::kBatch);
    return b.masked_mean_loss(y, seg).first;
  }
  return irtest::cross_entropy_head(b, y);
}

// The expert-parallel lowering over data on 1, 2 and 4 devices (data=2, data=2 x tensor=2)
// equals the interpreter's identities; its gradients (the reverse exchanges) equal the
// one-device ones through the VJP check of the forward case above.
TEST(MoeEp, LoweredOverDataEqualsTheIdentities) {
  Builder b("moe_ep");
  V w;
  const std::vector<ValueId> outs = ep_block(b, Sizes{4, 4, 2, 4, 4, 5, 4}, w, true);
  b.output(outs[0], "y");
  const Program p = std::move(b).finish();
  expect_runs_match(p, irtest::make_args(p, 5), K::kMoeEpPlan, true);
}

class EveryOp : public ::testing::TestWithParam<int> {};

TEST_P(EveryOp, MatchesReferenceGradientsCostAndShardedRuns) {
  const OpKind kind = static_cast<OpKind>(GetParam());
  static const std::map<OpKind, Case> cases = forward_cases();
  const auto it = cases.find(kind);
  if (it == cases.end()) {  // a per-device op: find a global program that partitions into it
    for (const auto& build : per_device_programs()) {
      Builder b("per_device");
      build(b, Sizes{2, 4, 2, 4, 4, 5, 4});
      const Program p = std::move(b).finish();
      auto exe = compile(p, mesh4(), CompileOptions{});
      ASSERT_TRUE(exe.ok()) << exe.status().message();
      if (!contains_op((*exe)->program(), kind)) continue;
      // Per-device ops have no VJP rule, but for the collectives of shard_map bodies (their
      // transposes under varying manual axes, engine/frontend/vma.h; checked against whole-array
      // gradients by tests/frontend/shard_map_grad_test.lua) and axis_index (no float input).
      const bool manual = kind == OpKind::kAllGather || kind == OpKind::kReduceScatter ||
                          kind == OpKind::kAllReduce || kind == OpKind::kAllToAll ||
                          kind == OpKind::kCollectivePermute || kind == OpKind::kAxisIndex;
      EXPECT_EQ(has_vjp(kind), manual) << op_name(kind) << ": has_vjp of a per-device op";
      expect_runs_match(p, irtest::make_args(p, 7), kind, true);
      return;
    }
    FAIL() << op_name(kind) << " has no check: add a case to forward_cases() (a global op) or "
           << "a program to per_device_programs() whose partitioned form contains it";
  }
  const Case& c = it->second;
  // has_vjp (what sl.grad checks a user's program against) is the VJP table's: true exactly for
  // the ops whose gradient this test checks against finite differences, and for the two whose
  // rule gives no gradient: compare (piecewise constant, as lax.eq's) and one_hot (int ids).
  EXPECT_EQ(has_vjp(kind),
            c.differentiable || kind == OpKind::kCompare || kind == OpKind::kOneHot)
      << op_name(kind) << ": has_vjp disagrees with this op's case";
  const Sizes z = random_sizes(1000 + GetParam());
  Builder b(std::string(op_name(kind)));
  std::vector<ValueId> wrt;
  const std::vector<ValueId> outs = c.build(b, z, wrt);
  for (size_t j = 0; j < outs.size(); ++j) b.output(outs[j], fmt::format("out{}", j));
  const Program p = std::move(b).finish();
  ASSERT_TRUE(contains_op(p, kind)) << op_name(kind) << "'s case does not emit it";
  expect_runs_match(p, irtest::make_args(p, 11), kind, false);
  if (!c.differentiable) return;
  irtest::expect_gradients_match(
      [&](Builder& gb, std::vector<ValueId>& gw) {
        std::vector<ValueId> xs = c.build(gb, kGradSizes, gw);
        return loss_of(gb, xs[0]);
      },
      0, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(AllOps, EveryOp, ::testing::Range(0, kNumOps),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(op_name(static_cast<OpKind>(info.param)));
                         });

// Every op with bf16 float arguments (docs/precision.md): shape and dtype inference accept
// it, the executor runs it (its bf16 kernel, or widened through f32) on 1, 2 and 4 devices,
// and each run equals the interpreter, which rounds at the same points. Tolerance 2^-5 of the
// output's largest magnitude: the sharded runs round partial sums to bf16 (2^-9 each) before
// reducing them, a handful of such roundings; a wrong partition or kernel is off by O(1).
class EveryOpBf16 : public ::testing::TestWithParam<int> {};

std::vector<HostTensor> bf16_args(const Program& p, uint64_t seed) {
  std::vector<HostTensor> args = irtest::make_args(p, seed);
  for (HostTensor& t : args)
    if (t.dtype == DType::kBF16)
      for (double& x : t.data) x = bf16_to_f32(f32_to_bf16(static_cast<float>(x)));
  return args;
}

void expect_bf16_runs_match(const Program& p, OpKind kind, bool want_in_local) {
  const std::vector<HostTensor> args = bf16_args(p, 11);
  auto want = interpret(p, args);
  ASSERT_TRUE(want.ok()) << want.status().message();
  double scale = 1;
  for (const HostTensor& t : *want)
    for (double x : t.data) scale = std::isfinite(x) ? std::max(scale, std::abs(x)) : scale;
  expect_runs_match(p, args, kind, want_in_local, 0, scale / 32);
}

TEST_P(EveryOpBf16, MatchesTheInterpreterWithBf16Rounding) {
  const OpKind kind = static_cast<OpKind>(GetParam());
  struct Bf16Args {  // restores f32 however the test ends
    Bf16Args() { g_float = DType::kBF16; }
    ~Bf16Args() { g_float = DType::kF32; }
  } bf16_args_while_here;
  static const std::map<OpKind, Case> cases = forward_cases();
  const auto it = cases.find(kind);
  if (it == cases.end()) {
    for (const auto& build : per_device_programs()) {
      Builder b("per_device");
      build(b, Sizes{2, 4, 2, 4, 4, 5, 4});
      const Program p = std::move(b).finish();
      auto exe = compile(p, mesh4(), CompileOptions{});
      ASSERT_TRUE(exe.ok()) << exe.status().message();
      if (!contains_op((*exe)->program(), kind)) continue;
      expect_bf16_runs_match(p, kind, true);
      return;
    }
  } else {
    Builder b(std::string(op_name(kind)));
    std::vector<ValueId> wrt;
    const std::vector<ValueId> outs = it->second.build(b, random_sizes(1000 + GetParam()), wrt);
    for (size_t j = 0; j < outs.size(); ++j) b.output(outs[j], fmt::format("out{}", j));
    const Program p = std::move(b).finish();
    // The MoE ops' cases feed their bf16 kernels (program.h kBf16Kernels): none of them runs
    // widened through f32 copies of its operands.
    static const std::set<OpKind> kMoeBf16 = {
        K::kMoeRoute, K::kMoeRouteGrad, K::kMoeDispatch, K::kMoeCombine,
        K::kMoeCombineWeightsGrad, K::kExpertMatmul, K::kExpertMatmulGrad};
    for (const Instr& in : p.instrs()) {
      if (kMoeBf16.count(kind) && in.kind == kind) {
        EXPECT_TRUE(uses_bf16_kernel(p, in)) << op_name(kind);
      }
    }
    expect_bf16_runs_match(p, kind, false);
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, EveryOpBf16, ::testing::Range(0, kNumOps),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(op_name(static_cast<OpKind>(info.param)));
                         });

}  // namespace
}  // namespace eng
