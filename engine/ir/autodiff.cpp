// engine/ir/autodiff.cpp: reverse-mode autodiff: per-op VJP rules appended to the Builder.
//
// The walk goes backwards from the loss's producer. A value gets a cotangent only if the
// loss depends on it and it depends on a wrt value (and is floating point). Contributions to
// a value used several times are summed with add in the order they arrive (reverse program
// order, then input order), so the emitted program is deterministic.
//
// The seed: there is no constant op, so d(loss)/d(loss) = 1 is kept symbolic. The cotangent
// of a rank-0 value is a tensor plus a known constant c (either part may be absent); add,
// convert and constraint pass c through, scale multiplies it, mul turns it into a tensor with
// scale, and masked_mean_loss absorbs it as masked_mean_loss_grad's scale attribute with no
// dloss input (op.h). Any other op reached by a constant is a bug in the model code.
#include "engine/ir/autodiff.h"

#include <fmt/format.h>

#include "engine/base/check.h"
#include "engine/ir/op_table.h"

namespace eng {

namespace {

// A cotangent: value + constant, where the constant part (rank-0 primals only) is not
// materialized as a value (see above).
struct Cot {
  ValueId value = kNoValue;   // the tensor part, or kNoValue
  double constant = 0.0;      // the constant part when has_constant
  bool has_constant = false;  // the seed and what linear scalar ops make of it

  bool present() const { return value != kNoValue || has_constant; }
  static Cot of(ValueId v) { return Cot{v, 0.0, false}; }
  static Cot constant_of(double c) { return Cot{kNoValue, c, true}; }
};

bool is_float(DType d) { return d != DType::kI32; }

class Differentiator {
 public:
  // False for the ops whose row is not_differentiable (has_vjp in autodiff.h).
  static bool has_rule(OpKind kind) {
    return kVjps[op_index(kind)] != &Differentiator::not_differentiable;
  }
  Differentiator(Builder& b, const std::vector<ValueId>& wrt, CotangentHook hook = {})
      : b_(b), hook_(std::move(hook)) {
    const Program& p = b.program();
    depends_.assign(p.values().size(), false);
    cot_.assign(p.values().size(), Cot{});
    for (ValueId w : wrt) {
      ENG_CHECK(w >= 0 && w < static_cast<ValueId>(p.values().size()), "autodiff: bad wrt {}", w);
      ENG_CHECK(is_float(p.value(w).dtype), "autodiff: wrt value '{}' {} is not floating point",
                p.value(w).name, p.value(w).type_string());
      depends_[w] = true;
    }
    for (const Instr& in : p.instrs()) {
      bool any = false;
      for (ValueId i : in.inputs) any = any || depends_[i];
      if (!any) continue;
      for (ValueId o : in.outputs) depends_[o] = is_float(p.value(o).dtype);
    }
  }

  std::vector<ValueId> run(ValueId loss, const std::vector<ValueId>& wrt) {
    const ValueInfo& l = b_.info(loss);  // invalidated by the first emit: read it here
    ENG_CHECK(l.shape.rank() == 0 && is_float(l.dtype),
              "autodiff: loss must be a float scalar, got {}", l.type_string());
    const int32_t producer = l.producer;
    std::vector<ValueId> grads(wrt.size(), kNoValue);
    if (!depends_[loss]) return grads;
    cot_[loss] = Cot::constant_of(1.0);
    for (int32_t k = producer; k >= 0; --k) {
      const Instr in = b_.program().instrs()[k];  // a copy: emitting appends to instrs()
      bool any = false;
      for (ValueId o : in.outputs) any = any || cot_[o].present();
      if (!any) continue;
      // The VJP of a vmapped op is the vmapped VJP: its backward ops carry the same vmap.
      const int64_t saved_vmap = b_.vmap();
      const int32_t saved_iteration = b_.pipeline_iteration();
      b_.set_vmap(in.attrs.vmap);
      // ... and the primal's pipeline iteration (program.h), so a profile charges it there.
      b_.set_pipeline_iteration(b_.info(in.outputs[0]).pipeline_iteration);
      current_ = &in;
      vjp(in);
      current_ = nullptr;
      b_.set_vmap(saved_vmap);
      b_.set_pipeline_iteration(saved_iteration);
    }
    for (size_t k = 0; k < wrt.size(); ++k) {
      const Cot& c = cot_[wrt[k]];
      ENG_CHECK(!c.has_constant,
                "autodiff: gradient of '{}' has a constant part (the loss itself?)",
                b_.info(wrt[k]).name);
      grads[k] = c.value;
    }
    return grads;
  }

 private:
  // ---- cotangent bookkeeping -------------------------------------------------------------

  bool needs(ValueId v) const { return depends_[v]; }

  // The cotangent of primal as a tensor; a constant here means the model fed the loss into an
  // op that has no constant-aware rule.
  ValueId tensor(const Instr& in, ValueId primal) const {
    const Cot& c = cot_[primal];
    ENG_CHECK(!c.has_constant,
              "autodiff: {} receives a constant cotangent; the loss must be masked_mean_loss's "
              "output, optionally scaled or added by constants",
              op_name(in.kind));
    return c.value;
  }

  // A value emitted as the cotangent of primal: it takes the primal's logical axes, so a
  // gradient is annotated like its parameter (not like the activations it came from).
  ValueId fresh(ValueId v, ValueId primal) {
    b_.mutable_info(v).logical = b_.info(primal).logical;
    return v;
  }

  // a + b for cotangent tensors of primal; either may be kNoValue.
  ValueId sum(ValueId a, ValueId b, ValueId primal) {
    if (a == kNoValue) return b;
    if (b == kNoValue) return a;
    return fresh(b_.add(a, b), primal);
  }

  void accumulate(ValueId primal, Cot c) {
    if (!needs(primal) || !c.present()) return;
    if (hook_ && current_ && c.value != kNoValue) c.value = hook_(b_, *current_, primal, c.value);
    const ValueInfo& p = b_.info(primal);
    ENG_CHECK(c.value == kNoValue || b_.info(c.value).shape == p.shape,
              "autodiff: cotangent {} does not match its primal {}",
              b_.info(c.value).shape.to_string(), p.shape.to_string());
    ENG_CHECK(!c.has_constant || p.shape.rank() == 0,
              "autodiff: a constant cotangent for the non-scalar {}", p.type_string());
    // A cotangent has its primal's dtype (JAX's rule): a VJP that computed it in another
    // dtype (a bf16 weight's gradient from an f32 product, say) is converted here.
    if (c.value != kNoValue && b_.info(c.value).dtype != b_.info(primal).dtype)
      c.value = fresh(b_.convert(c.value, b_.info(primal).dtype), primal);
    Cot& acc = cot_[primal];
    acc.value = sum(acc.value, c.value, primal);
    if (c.has_constant) acc.constant = (acc.has_constant ? acc.constant : 0.0) + c.constant;
    acc.has_constant = acc.has_constant || c.has_constant;
  }
  void accumulate(ValueId primal, ValueId v) { accumulate(primal, Cot::of(v)); }

  // Saved outputs (rstd, lse) are inputs of the backward ops, not differentiable results.
  void check_no_cotangent(const Instr& in, int output, const char* what) const {
    ENG_CHECK(!cot_[in.outputs[output]].present(),
              "autodiff: {}'s saved output {} is used by the loss; it has no VJP rule",
              op_name(in.kind), what);
  }

  // ---- mixture of experts (op.h) ----
  // combine and lb have cotangents; lb's must be a constant (the loss adds it, maybe scaled),
  // which folds into the grad op's lb_scale; load is a metric.
  void vjp_moe_route(const Instr& in) {
    check_no_cotangent(in, 2, "load");
    const Cot& dlb = cot_[in.outputs[1]];
    ENG_CHECK(dlb.value == kNoValue,
              "autodiff: moe_route's load-balance loss must reach the loss through adds and "
              "scales by constants");
    OpAttrs a = in.attrs;
    a.eps = dlb.has_constant ? in.attrs.eps * dlb.constant : 0.0;
    ENG_CHECK(cot_[in.outputs[0]].present(), "autodiff: moe_route's combine has no cotangent");
    const ValueId dcombine = tensor(in, in.outputs[0]);
    std::vector<ValueId> ins = {in.inputs[0], dcombine};
    if (in.inputs.size() > 1) ins.push_back(in.inputs[1]);  // the router bias
    if (needs(in.inputs[0])) {
      ValueId g = b_.emit(OpKind::kMoeRouteGrad, ins, a)[0];
      accumulate(in.inputs[0], fresh(g, in.inputs[0]));
    }
    if (in.inputs.size() > 1 && needs(in.inputs[1])) {  // its load-balance part only
      a.raw = true;
      ValueId g = b_.emit(OpKind::kMoeRouteGrad, ins, a)[0];
      accumulate(in.inputs[1], fresh(g, in.inputs[1]));
    }
  }

  // dispatch (combine, x): dx = combine(combine, dy); with weights, dcombine too.
  // combine (combine, y): dy = dispatch(combine, dout); with weights, dcombine too.
  void vjp_moe_dispatch(const Instr& in) {
    const ValueId dy = tensor(in, in.outputs[0]);
    const bool forward = in.kind == OpKind::kMoeDispatch;
    OpAttrs a;
    a.raw = in.attrs.raw;
    const ValueId c = in.inputs[0], x = in.inputs[1];
    if (needs(x))
      accumulate(x, fresh(b_.emit(forward ? OpKind::kMoeCombine : OpKind::kMoeDispatch, {c, dy},
                                  a)[0],
                          x));
    if (!in.attrs.raw && needs(c)) {
      const ValueId dc = forward ? b_.emit(OpKind::kMoeCombineWeightsGrad, {x, dy})[0]
                                 : b_.emit(OpKind::kMoeCombineWeightsGrad, {dy, x})[0];
      accumulate(c, fresh(dc, c));
    }
  }

  void vjp_expert_matmul(const Instr& in) {
    const ValueId dy = tensor(in, in.outputs[0]);
    const ValueId a = in.inputs[0], w = in.inputs[1];
    if (needs(a)) {
      OpAttrs t;
      t.trans_b = !in.attrs.trans_b;  // dy (G,..,N) . w^T
      accumulate(a, fresh(b_.emit(OpKind::kExpertMatmul, {dy, w}, t)[0], a));
    }
    if (needs(w)) {
      // dw = a^T dy (G,K,N); with trans_b the weight is (G,N,K): dy^T a.
      const ValueId dw = in.attrs.trans_b ? b_.emit(OpKind::kExpertMatmulGrad, {dy, a})[0]
                                          : b_.emit(OpKind::kExpertMatmulGrad, {a, dy})[0];
      accumulate(w, fresh(dw, w));
    }
  }

  // ---- the dropless dispatch (op.h) ----
  // weights and lb have cotangents (lb's a constant, as moe_route's); order, rank and
  // group_sizes are integers, load a metric.
  void vjp_moe_top_k(const Instr& in) {
    check_no_cotangent(in, 5, "load");
    const Cot& dlb = cot_[in.outputs[4]];
    ENG_CHECK(dlb.value == kNoValue,
              "autodiff: moe_top_k's load-balance loss must reach the loss through adds and "
              "scales by constants");
    OpAttrs a = in.attrs;
    a.eps = dlb.has_constant ? in.attrs.eps * dlb.constant : 0.0;
    ENG_CHECK(cot_[in.outputs[0]].present(), "autodiff: moe_top_k's weights have no cotangent");
    const ValueId dweights = tensor(in, in.outputs[0]);
    std::vector<ValueId> ins = {in.inputs[0], dweights};
    if (in.inputs.size() > 1) ins.push_back(in.inputs[1]);  // the router bias
    if (needs(in.inputs[0]))
      accumulate(in.inputs[0], fresh(b_.emit(OpKind::kMoeTopKGrad, ins, a)[0], in.inputs[0]));
    if (in.inputs.size() > 1 && needs(in.inputs[1])) {  // its load-balance part only
      a.raw = true;
      accumulate(in.inputs[1], fresh(b_.emit(OpKind::kMoeTopKGrad, ins, a)[0], in.inputs[1]));
    }
  }

  // The permutation's transpose is the other direction with the same indices and weights;
  // the weights' cotangent <x rows, dy rows> pairs each choice's two rows.
  void vjp_moe_permute(const Instr& in) {
    const ValueId dy = tensor(in, in.outputs[0]);
    const ValueId x = in.inputs[0], order = in.inputs[1], rank = in.inputs[2];
    const bool weighted = in.inputs.size() == 4;
    if (needs(x)) {
      OpAttrs t = in.attrs;
      t.inverse = !in.attrs.inverse;
      std::vector<ValueId> ins = {dy, order, rank};
      if (weighted) ins.push_back(in.inputs[3]);
      accumulate(x, fresh(b_.emit(OpKind::kMoePermute, ins, t)[0], x));
    }
    if (weighted && needs(in.inputs[3])) {
      OpAttrs t;
      t.size = in.attrs.size;
      const ValueId dw =
          in.attrs.inverse ? b_.emit(OpKind::kMoePermuteWeightsGrad, {dy, x, order, rank}, t)[0]
                           : b_.emit(OpKind::kMoePermuteWeightsGrad, {x, dy, order, rank}, t)[0];
      accumulate(in.inputs[3], fresh(dw, in.inputs[3]));
    }
  }

  void vjp_ragged_dot(const Instr& in) {
    const ValueId dy = tensor(in, in.outputs[0]);
    const ValueId l = in.inputs[0], r = in.inputs[1], g = in.inputs[2];
    if (needs(l)) {
      OpAttrs t;
      t.trans_b = !in.attrs.trans_b;  // dy (N,P) . rhs[e]^T
      accumulate(l, fresh(b_.emit(OpKind::kRaggedDot, {dy, r, g}, t)[0], l));
    }
    if (needs(r)) {  // (E,K,P) = per group lhs^T dy; with trans_b (E,P,K): dy^T lhs
      const ValueId dr = in.attrs.trans_b ? b_.emit(OpKind::kRaggedDotGrad, {dy, l, g})[0]
                                          : b_.emit(OpKind::kRaggedDotGrad, {l, dy, g})[0];
      accumulate(r, fresh(dr, r));
    }
  }

  // The transpose of a ragged all-to-all is the reverse one (op.h): each receiver sends back
  // the rows it got, from where they landed to where they came from; offsets and sizes seen
  // from the other side (their last two dims swapped: jax's all_to_all of the offsets).
  void vjp_ragged_all_to_all(const Instr& in) {
    const ValueId x = in.inputs[0];
    if (!needs(x)) return;
    ENG_CHECK(in.attrs.mesh_axes.empty(),
              "ragged_all_to_all over {}: differentiate the global program (its members whole)",
              in.attrs.mesh_axes.size());
    const ValueId dy = tensor(in, in.outputs[0]);
    const int r = b_.info(in.inputs[1]).shape.rank();
    std::vector<int64_t> swap(static_cast<size_t>(r));
    for (int k = 0; k < r; ++k) swap[static_cast<size_t>(k)] = k;
    std::swap(swap[static_cast<size_t>(r - 2)], swap[static_cast<size_t>(r - 1)]);
    auto seen_back = [&](ValueId v) { return b_.transpose(v, swap); };
    OpAttrs t = in.attrs;
    t.size = b_.info(x).shape.dim(-2);
    const ValueId dx = b_.emit(OpKind::kRaggedAllToAll,
                               {dy, seen_back(in.inputs[3]), seen_back(in.inputs[2]),
                                seen_back(in.inputs[1])},
                               t)[0];
    accumulate(x, fresh(dx, x));
  }

  // moe_ep_dispatch and moe_ep_return are identities on values, each the other's transpose
  // (the rows sent back where they came from).
  void vjp_moe_ep(const Instr& in) {
    const ValueId x = in.inputs[0];
    if (!needs(x)) return;
    const OpKind back =
        in.kind == OpKind::kMoeEpDispatch ? OpKind::kMoeEpReturn : OpKind::kMoeEpDispatch;
    const ValueId dx = b_.emit(back, {tensor(in, in.outputs[0]), in.inputs[1]}, in.attrs)[0];
    accumulate(x, fresh(dx, x));
  }

  // ---- VJP rules: one per op (the kVjps table below) -----------------------------------------

  void vjp(const Instr& in) { (this->*kVjps[op_index(in.kind)])(in); }

  // ids get none
  void vjp_embed_lookup(const Instr& in) {
    const ValueId y = in.outputs[0];
    OpAttrs a;
    a.depth = b_.info(in.inputs[0]).shape[0];
    ValueId dy = tensor(in, y);
    accumulate(in.inputs[0],
               fresh(b_.emit(OpKind::kEmbedLookupGrad, {in.inputs[1], dy}, a)[0], in.inputs[0]));
  }

  void vjp_one_hot(const Instr&) {}  // a function of integer ids only

  void vjp_rms_norm(const Instr& in) {
    const ValueId y = in.outputs[0];
    check_no_cotangent(in, 1, "rstd");
    if (!cot_[y].present()) return;
    auto g =
        b_.emit(OpKind::kRmsNormGrad, {in.inputs[0], in.inputs[1], in.outputs[1], tensor(in, y)});
    accumulate(in.inputs[0], fresh(g[0], in.inputs[0]));
    accumulate(in.inputs[1], fresh(g[1], in.inputs[1]));
  }

  void vjp_layernorm(const Instr& in) {
    const ValueId y = in.outputs[0];
    check_no_cotangent(in, 1, "mean");
    check_no_cotangent(in, 2, "rstd");
    if (!cot_[y].present()) return;
    auto g = b_.emit(OpKind::kLayerNormGrad, {in.inputs[0], in.inputs[1], in.outputs[1],
                                              in.outputs[2], tensor(in, y)});
    for (int k = 0; k < 3; ++k) accumulate(in.inputs[k], fresh(g[k], in.inputs[k]));
  }

  // x's cotangent is y's; the bias's is y's summed over the broadcast (leading) dims.
  void vjp_bias_add(const Instr& in) {
    const ValueId y = in.outputs[0];
    if (!cot_[y].present()) return;
    accumulate(in.inputs[0], cot_[y]);
    OpAttrs a;
    a.dim = b_.info(in.inputs[1]).shape.rank();
    accumulate(in.inputs[1],
               fresh(b_.emit(OpKind::kBiasAddGrad, {tensor(in, y)}, a)[0], in.inputs[1]));
  }

  // a rotation: its transpose is the inverse rotation
  void vjp_rope(const Instr& in) {
    const ValueId y = in.outputs[0];
    const OpAttrs& a = in.attrs;
    ValueId dx = b_.rope(tensor(in, y), in.inputs[1], a.min_timescale, a.max_timescale, !a.inverse,
                         {a.rope_interleave, a.rope_use_scale});
    accumulate(in.inputs[0], fresh(dx, in.inputs[0]));
  }

  void vjp_attention(const Instr& in) {
    const ValueId y = in.outputs[0];
    check_no_cotangent(in, 1, "lse");
    if (!cot_[y].present()) return;
    OpAttrs a;
    a.scale = in.attrs.scale;
    std::vector<ValueId> ins = {in.inputs[0],  in.inputs[1],  in.inputs[2],
                                in.outputs[0], in.outputs[1], tensor(in, y)};
    if (in.inputs.size() == 4) ins.push_back(in.inputs[3]);  // segment ids: a mask, no cotangent
    auto g = b_.emit(OpKind::kAttentionGrad, ins, a);
    for (int k = 0; k < 3; ++k) accumulate(in.inputs[k], fresh(g[k], in.inputs[k]));
  }

  void vjp_swiglu(const Instr& in) {
    const ValueId y = in.outputs[0];
    auto g = b_.emit(OpKind::kSwigluGrad, {in.inputs[0], in.inputs[1], tensor(in, y)});
    accumulate(in.inputs[0], fresh(g[0], in.inputs[0]));
    accumulate(in.inputs[1], fresh(g[1], in.inputs[1]));
  }

  // the transpose sums each group of R query heads (op.h)
  void vjp_repeat_kv(const Instr& in) {
    const ValueId y = in.outputs[0];
    OpAttrs a;
    a.size = in.attrs.size;
    ValueId dx = b_.emit(OpKind::kRepeatKvGrad, {tensor(in, y)}, a)[0];
    accumulate(in.inputs[0], fresh(dx, in.inputs[0]));
  }

  void vjp_add(const Instr& in) {
    const ValueId y = in.outputs[0];
    accumulate(in.inputs[0], cot_[y]);
    accumulate(in.inputs[1], cot_[y]);
  }

  void vjp_scale(const Instr& in) {
    const ValueId y = in.outputs[0];
    Cot c = cot_[y];
    c.constant *= in.attrs.scale;
    if (c.value != kNoValue) c.value = fresh(b_.scale(c.value, in.attrs.scale), in.inputs[0]);
    accumulate(in.inputs[0], c);
  }

  void vjp_convert(const Instr& in) {
    const ValueId y = in.outputs[0];
    Cot c = cot_[y];
    const DType x_dtype = b_.info(in.inputs[0]).dtype;
    if (c.value != kNoValue && b_.info(c.value).dtype != x_dtype)
      c.value = fresh(b_.convert(c.value, x_dtype), in.inputs[0]);
    accumulate(in.inputs[0], c);
  }

  // the backward follows the forward's constraint (MaxText)
  void vjp_constraint(const Instr& in) {
    const ValueId y = in.outputs[0];
    Cot c = cot_[y];
    if (c.value != kNoValue) {
      // The same constraint without `drop`: a forward that gathers those axes transposes to
      // the cotangent reduce-scattered back onto them (pipeline_fsdp_ag_once's gradient).
      OpAttrs a;
      a.logical = in.attrs.logical;
      a.raw = in.attrs.raw;
      c.value = b_.emit(OpKind::kConstraint, {c.value}, a)[0];
    }
    accumulate(in.inputs[0], c);
  }

  void vjp_softmax_cross_entropy(const Instr& in) {
    const ValueId y = in.outputs[0];
    check_no_cotangent(in, 1, "lse");
    if (!cot_[y].present()) return;
    ValueId dlogits = b_.emit(OpKind::kSoftmaxCrossEntropyGrad,
                              {in.inputs[0], in.inputs[1], in.outputs[1], tensor(in, y)})[0];
    accumulate(in.inputs[0], fresh(dlogits, in.inputs[0]));
  }

  // Host offload: the cotangent moves back to the memory the value came from (jax's
  // device_put transposes to a device_put to the source memory kind).
  void vjp_move(const Instr& in) {
    const ValueId y = in.outputs[0];
    const OpKind back = in.kind == OpKind::kMoveToHost ? OpKind::kMoveToDevice
                                                       : OpKind::kMoveToHost;
    Cot c = cot_[y];
    if (c.value != kNoValue) c.value = fresh(b_.emit(back, {c.value})[0], in.inputs[0]);
    accumulate(in.inputs[0], c);
  }

  // Pipeline data movement: each transpose is another data movement (op.h).
  void vjp_reshape(const Instr& in) {
    const ValueId y = in.outputs[0];
    accumulate(in.inputs[0],
               fresh(b_.reshape(tensor(in, y), b_.info(in.inputs[0]).shape), in.inputs[0]));
  }

  void vjp_slice(const Instr& in) {
    const ValueId y = in.outputs[0];
    accumulate(in.inputs[0], fresh(b_.pad(tensor(in, y), in.attrs.dim, in.attrs.start,
                                          b_.info(in.inputs[0]).shape[in.attrs.dim]),
                                   in.inputs[0]));
  }

  void vjp_pad(const Instr& in) {
    const ValueId y = in.outputs[0];
    accumulate(in.inputs[0], fresh(b_.slice(tensor(in, y), in.attrs.dim, in.attrs.start,
                                            b_.info(in.inputs[0]).shape[in.attrs.dim]),
                                   in.inputs[0]));
  }

  void vjp_concat(const Instr& in) {
    const ValueId y = in.outputs[0];
    const ValueId dy = tensor(in, y);
    int64_t at = 0;
    for (ValueId x : in.inputs) {
      const int64_t n = b_.info(x).shape[in.attrs.dim];
      if (needs(x)) accumulate(x, fresh(b_.slice(dy, in.attrs.dim, at, n), x));
      at += n;
    }
  }

  void vjp_shift(const Instr& in) {
    const ValueId y = in.outputs[0];
    const OpAttrs& a = in.attrs;  // the sources' landing rows move back
    accumulate(in.inputs[0], fresh(b_.shift(tensor(in, y), a.dim, -a.shift, a.start + a.shift,
                                            a.size),
                                   in.inputs[0]));
  }

  void vjp_transpose(const Instr& in) {  // the inverse permutation
    const std::vector<int64_t>& perm = in.attrs.new_shape;
    std::vector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
    accumulate(in.inputs[0], fresh(b_.transpose(tensor(in, in.outputs[0]), inverse), in.inputs[0]));
  }

  // compare: piecewise constant, no cotangent for either operand (lax.eq and friends).
  void vjp_compare(const Instr&) {}

  // select: dy goes to the chosen operand, exact zeros elsewhere (JAX's select transpose
  // selects against full_like(dy, 0)); pred gets none. 0 * dy is not zeros where dy is inf or
  // NaN. With no constant op, compare(dy, dy, lt) is the zeros: x < x is false for every float,
  // inf and NaN included, and the mask has dy's shape, dtype and sharding.
  void vjp_select(const Instr& in) {
    const ValueId pred = in.inputs[0], dy = tensor(in, in.outputs[0]);
    const ValueId zero = b_.compare(dy, dy, CompareDirection::kLt);
    if (needs(in.inputs[1]))
      accumulate(in.inputs[1], fresh(b_.select(pred, dy, zero), in.inputs[1]));
    if (needs(in.inputs[2]))
      accumulate(in.inputs[2], fresh(b_.select(pred, zero, dy), in.inputs[2]));
  }

  // Scanned layers: layer l's slice of a stacked weight. Its transpose adds dy into slot l
  // of the stacked cotangent in place (add_index_in_dim), so the stacked gradient is one
  // buffer that every layer's backward writes its slice into; the first contribution
  // creates it (zeros elsewhere). No stacked-size temporary per layer.
  void vjp_index_in_dim(const Instr& in) {
    const ValueId x = in.inputs[0];
    if (!needs(x)) return;
    const ValueId dy = tensor(in, in.outputs[0]);
    const int64_t size = b_.info(x).shape[in.attrs.dim];
    const ValueId acc = cot_[x].value;
    cot_[x].value = fresh(b_.add_index_in_dim(dy, acc, in.attrs.dim, in.attrs.start, size), x);
  }

  // The circular pipeline's per-stage repeat selection: the cotangent lands in each row's
  // selected slot only, added in place into the stacked cotangent as index_in_dim's does.
  void vjp_index_per_row(const Instr& in) {
    const ValueId x = in.inputs[0];
    if (!needs(x)) return;
    const ValueId dy = tensor(in, in.outputs[0]);
    const int64_t size = b_.info(x).shape[0];
    const ValueId acc = cot_[x].value;
    cot_[x].value = fresh(b_.add_index_per_row(dy, acc, in.attrs.new_shape, size), x);
  }

  void vjp_add_index_per_row(const Instr& in) {  // d update = dy[indices[s], s]; d acc = dy
    const ValueId dy = tensor(in, in.outputs[0]);
    if (needs(in.inputs[0]))
      accumulate(in.inputs[0], fresh(b_.index_per_row(dy, in.attrs.new_shape), in.inputs[0]));
    if (in.inputs.size() > 1) accumulate(in.inputs[1], cot_[in.outputs[0]]);
  }

  void vjp_add_index_in_dim(const Instr& in) {  // d update = dy[slot]; d acc = dy
    const ValueId dy = tensor(in, in.outputs[0]);
    if (needs(in.inputs[0]))
      accumulate(in.inputs[0],
                 fresh(b_.index_in_dim(dy, in.attrs.dim, in.attrs.start), in.inputs[0]));
    if (in.inputs.size() > 1) accumulate(in.inputs[1], cot_[in.outputs[0]]);
  }

  // remainder: a - floor(a / b) b, so da = dy and db = -dy floor(a / b) (JAX's rule; the
  // quotient through reciprocal, as the front-end's division).
  void vjp_remainder(const Instr& in) {
    const ValueId a = in.inputs[0], b = in.inputs[1];
    accumulate(a, cot_[in.outputs[0]]);
    if (!needs(b) || !cot_[in.outputs[0]].present()) return;
    const ValueId dy = tensor(in, in.outputs[0]);
    const ValueId q = b_.emit(OpKind::kFloor,
                              {b_.mul(a, b_.emit(OpKind::kReciprocal, {b})[0])})[0];
    accumulate(b, fresh(b_.scale(b_.mul(dy, q), -1.0), b));
  }

  // dynamic_slice_in_dim: dy written into zeros of x's shape at the same (clamped) start,
  // the transpose XLA's DynamicSlice has. compare(x, x, lt) is the zeros (see vjp_select).
  void vjp_dynamic_slice(const Instr& in) {
    const ValueId x = in.inputs[0];
    if (!needs(x) || !cot_[in.outputs[0]].present()) return;
    const ValueId zero = b_.compare(x, x, CompareDirection::kLt);
    accumulate(x, fresh(b_.dynamic_update_slice_in_dim(zero, tensor(in, in.outputs[0]),
                                                       in.inputs[1], in.attrs.dim, false),
                        x));
  }

  // dynamic_update_slice_in_dim: the update's cotangent is dy's window; x's is dy with the
  // window zeroed (set) or dy itself (add).
  void vjp_dynamic_update_slice(const Instr& in) {
    const ValueId x = in.inputs[0], u = in.inputs[1], start = in.inputs[2];
    if (!cot_[in.outputs[0]].present()) return;
    const ValueId dy = tensor(in, in.outputs[0]);
    const int dim = in.attrs.dim;
    if (needs(u))
      accumulate(u, fresh(b_.dynamic_slice_in_dim(dy, start, dim, b_.info(u).shape[dim]), u));
    if (in.attrs.inverse) {
      accumulate(x, cot_[in.outputs[0]]);
    } else if (needs(x)) {
      const ValueId zero = b_.compare(u, u, CompareDirection::kLt);
      accumulate(x, fresh(b_.dynamic_update_slice_in_dim(dy, zero, start, dim, false), x));
    }
  }

  void vjp_unary(const Instr& in) {  // dx = dy * f'(x): the op's kUnaryGrad partner (op.h)
    const ValueId dx =
        b_.emit(unary_math(in.kind).grad, {in.inputs[0], tensor(in, in.outputs[0])})[0];
    accumulate(in.inputs[0], fresh(dx, in.inputs[0]));
  }

  // ---- per-device collectives (shard_map bodies; engine/frontend/vma.h) ----
  // The transposes of JAX's varying-manual-axes rules: psum's result is invariant over its
  // axes, so its cotangent is the same on every member and passes through (psum_invariant's
  // transpose, pvary, is the identity per device); all_gather <-> psum_scatter; a permute
  // goes back by the inverse shift; all_to_all exchanges back. An operand invariant where the
  // op varies gets its contribution summed by the caller's CotangentHook.
  void vjp_all_reduce(const Instr& in) {
    ENG_CHECK(!in.attrs.reduce_max, "autodiff: all_reduce with max (pmax) is not differentiable");
    accumulate(in.inputs[0], cot_[in.outputs[0]]);
  }
  void vjp_collective(const Instr& in) {
    const ValueId dy = tensor(in, in.outputs[0]);
    OpAttrs a = in.attrs;
    OpKind back = in.kind;
    if (in.kind == OpKind::kAllGather) back = OpKind::kReduceScatter;
    if (in.kind == OpKind::kReduceScatter) back = OpKind::kAllGather;
    if (in.kind == OpKind::kAllToAll) std::swap(a.dim, a.dim2);
    if (in.kind == OpKind::kCollectivePermute) {
      a.shift = -in.attrs.shift;  // the receivers of the forward send back
      if (in.attrs.fill_zero && in.attrs.size > 0) a.start = in.attrs.start + in.attrs.shift;
    }
    accumulate(in.inputs[0], fresh(b_.emit(back, {dy}, a)[0], in.inputs[0]));
  }
  void vjp_none(const Instr&) {}  // axis_index: no float inputs

  void not_differentiable(const Instr& in) {
    ENG_CHECK(false, "autodiff: {} is not differentiable (backward, optimizer or metric op)",
              op_name(in.kind));
  }

  // out = A.B on the 2D views of op.h; dA = dOut.B^T, dB = A^T.dOut, each emitted as one
  // matmul directly in a's (b's) own layout, so a transposed operand needs no transpose op:
  //   dA2 = trans_a ? B.dOut^T : dOut.B^T      dB2 = trans_b ? dOut^T.A : A^T.dOut
  // dOut's split is the rank of out's row dims. The result has a's (b's) shape only if a's
  // and b's contracted dims agree as shapes, not just in product (there is no reshape op).
  void matmul(const Instr& in) {
    const ValueId a = in.inputs[0], b = in.inputs[1];
    const OpAttrs& at = in.attrs;
    Shape sa = b_.info(a).shape, sb = b_.info(b).shape;
    if (at.vmap > 0) {  // the splits describe the per-slice matmul
      sa = sa.slice(1, sa.rank());
      sb = sb.slice(1, sb.rank());
    }
    const Shape ka = at.trans_a ? sa.slice(0, at.a_split) : sa.slice(at.a_split, sa.rank());
    const Shape kb = at.trans_b ? sb.slice(at.b_split, sb.rank()) : sb.slice(0, at.b_split);
    ENG_CHECK(ka == kb, "autodiff: matmul contracted dims must agree as shapes: {} vs {}",
              ka.to_string(), kb.to_string());
    const ValueId dout = tensor(in, in.outputs[0]);
    const int os = at.trans_a ? sa.rank() - at.a_split : at.a_split;
    if (needs(a)) {
      ValueId da = at.trans_a ? b_.matmul(b, dout, at.b_split, os, at.trans_b, true, {}, a)
                              : b_.matmul(dout, b, os, at.b_split, false, !at.trans_b, {}, a);
      accumulate(a, fresh(da, a));
    }
    if (needs(b)) {
      ValueId db = at.trans_b ? b_.matmul(dout, a, os, at.a_split, true, at.trans_a, {}, b)
                              : b_.matmul(a, dout, at.a_split, os, !at.trans_a, false, {}, b);
      accumulate(b, fresh(db, b));
    }
  }

  void mul(const Instr& in) {
    const Cot c = cot_[in.outputs[0]];
    for (int k = 0; k < 2; ++k) {
      const ValueId x = in.inputs[k], other = in.inputs[1 - k];
      if (!needs(x)) continue;
      ValueId dx = c.value != kNoValue ? fresh(b_.mul(c.value, other), x) : kNoValue;
      if (c.has_constant) dx = sum(dx, fresh(b_.scale(other, c.constant), x), x);
      accumulate(x, dx);
    }
  }

  // total_weights counts nonzero segmentation: piecewise constant, so its cotangent is 0.
  void masked_mean_loss(const Instr& in) {
    const Cot c = cot_[in.outputs[0]];
    if (!c.present() || !needs(in.inputs[0])) return;
    const ValueId xent = in.inputs[0], seg = in.inputs[1], weights = in.outputs[1];
    ValueId dxent = kNoValue;
    if (c.value != kNoValue)
      dxent = fresh(b_.emit(OpKind::kMaskedMeanLossGrad, {seg, weights, c.value})[0], xent);
    if (c.has_constant) {  // the seed: no dloss input means dloss = 1, times scale
      OpAttrs a;
      a.scale = c.constant;
      dxent =
          sum(dxent, fresh(b_.emit(OpKind::kMaskedMeanLossGrad, {seg, weights}, a)[0], xent), xent);
    }
    accumulate(xent, dxent);
  }

  Builder& b_;
  CotangentHook hook_;             // see append_gradients
  const Instr* current_ = nullptr;  // the instr whose VJP runs
  std::vector<bool> depends_;  // indexed by ValueId: depends on a wrt value and is float
  std::vector<Cot> cot_;       // indexed by ValueId (forward values only)
  using VjpFn = void (Differentiator::*)(const Instr&);
  static const OpTable<VjpFn> kVjps;
};

using D = Differentiator;
// The VJP rule of each op (engine/ir/op_table.h); backward, optimizer, metric and
// per-device ops have none.
constexpr OpTable<D::VjpFn> D::kVjps = make_op_table<D::VjpFn>(
    {
        {OpKind::kEmbedLookup, &D::vjp_embed_lookup},
        {OpKind::kOneHot, &D::vjp_one_hot},
        {OpKind::kMatmul, &D::matmul},
        {OpKind::kRmsNorm, &D::vjp_rms_norm},
        {OpKind::kRope, &D::vjp_rope},
        {OpKind::kAttention, &D::vjp_attention},
        {OpKind::kSwiglu, &D::vjp_swiglu},
        {OpKind::kRepeatKv, &D::vjp_repeat_kv},
        {OpKind::kAdd, &D::vjp_add},
        {OpKind::kMul, &D::mul},
        {OpKind::kScale, &D::vjp_scale},
        {OpKind::kConvert, &D::vjp_convert},
        {OpKind::kConstraint, &D::vjp_constraint},
        {OpKind::kSoftmaxCrossEntropy, &D::vjp_softmax_cross_entropy},
        {OpKind::kMaskedMeanLoss, &D::masked_mean_loss},
        {OpKind::kReshape, &D::vjp_reshape},
        {OpKind::kSlice, &D::vjp_slice},
        {OpKind::kPad, &D::vjp_pad},
        {OpKind::kConcat, &D::vjp_concat},
        {OpKind::kShift, &D::vjp_shift},
        {OpKind::kEmbedLookupGrad, &D::not_differentiable},
        {OpKind::kRmsNormGrad, &D::not_differentiable},
        {OpKind::kAttentionGrad, &D::not_differentiable},
        {OpKind::kSwigluGrad, &D::not_differentiable},
        {OpKind::kSoftmaxCrossEntropyGrad, &D::not_differentiable},
        {OpKind::kMaskedMeanLossGrad, &D::not_differentiable},
        {OpKind::kSumSquares, &D::not_differentiable},
        {OpKind::kGlobalNorm, &D::not_differentiable},
        {OpKind::kClipFactor, &D::not_differentiable},
        {OpKind::kLearningRate, &D::not_differentiable},
        {OpKind::kAdamW, &D::not_differentiable},
        {OpKind::kIncrement, &D::not_differentiable},
        {OpKind::kAllGather, &D::vjp_collective},
        {OpKind::kReduceScatter, &D::vjp_collective},
        {OpKind::kAllReduce, &D::vjp_all_reduce},
        {OpKind::kAllToAll, &D::vjp_collective},
        {OpKind::kCollectivePermute, &D::vjp_collective},
        {OpKind::kDynamicSlice, &D::not_differentiable},
        {OpKind::kSafeDivide, &D::not_differentiable},
        {OpKind::kAxisIndex, &D::vjp_none},
        {OpKind::kVocabMax, &D::not_differentiable},
        {OpKind::kVocabStats, &D::not_differentiable},
        {OpKind::kXentFromStats, &D::not_differentiable},
        {OpKind::kRepeatKvGrad, &D::not_differentiable},
        {OpKind::kIndexInDim, &D::vjp_index_in_dim},
        {OpKind::kAddIndexInDim, &D::vjp_add_index_in_dim},
        {OpKind::kRemainder, &D::vjp_remainder},
        {OpKind::kDynamicSliceInDim, &D::vjp_dynamic_slice},
        {OpKind::kDynamicUpdateSliceInDim, &D::vjp_dynamic_update_slice},
        {OpKind::kTranspose, &D::vjp_transpose},
        {OpKind::kCompare, &D::vjp_compare},
        {OpKind::kSelect, &D::vjp_select},
        {OpKind::kIndexPerRow, &D::vjp_index_per_row},
        {OpKind::kAddIndexPerRow, &D::vjp_add_index_per_row},
        {OpKind::kMoeRoute, &D::vjp_moe_route},
        {OpKind::kMoeRouteGrad, &D::not_differentiable},
        {OpKind::kMoeDispatch, &D::vjp_moe_dispatch},
        {OpKind::kMoeCombine, &D::vjp_moe_dispatch},
        {OpKind::kMoeCombineWeightsGrad, &D::not_differentiable},
        {OpKind::kExpertMatmul, &D::vjp_expert_matmul},
        {OpKind::kExpertMatmulGrad, &D::not_differentiable},
        {OpKind::kLayerNorm, &D::vjp_layernorm},
        {OpKind::kLayerNormGrad, &D::not_differentiable},
        {OpKind::kBiasAdd, &D::vjp_bias_add},
        {OpKind::kBiasAddGrad, &D::not_differentiable},
        {OpKind::kMoveToHost, &D::vjp_move},
        {OpKind::kMoveToDevice, &D::vjp_move},
        {OpKind::kMoeTopK, &D::vjp_moe_top_k},
        {OpKind::kMoeTopKGrad, &D::not_differentiable},
        {OpKind::kMoePermute, &D::vjp_moe_permute},
        {OpKind::kMoePermuteWeightsGrad, &D::not_differentiable},
        {OpKind::kRaggedDot, &D::vjp_ragged_dot},
        {OpKind::kRaggedDotGrad, &D::not_differentiable},
        {OpKind::kRaggedAllToAll, &D::vjp_ragged_all_to_all},
        {OpKind::kMoeEpDispatch, &D::vjp_moe_ep},
        {OpKind::kMoeEpReturn, &D::vjp_moe_ep},
        {OpKind::kMoeEpPlan, &D::not_differentiable},
    },
    &D::vjp_unary, &D::not_differentiable);

}  // namespace

bool has_vjp(OpKind kind) { return D::has_rule(kind); }

std::vector<ValueId> append_gradients(Builder& b, ValueId loss, const std::vector<ValueId>& wrt,
                                      CotangentHook hook) {
  ENG_CHECK(loss >= 0 && loss < static_cast<ValueId>(b.program().values().size()),
            "autodiff: bad loss value {}", loss);
  Differentiator d(b, wrt, std::move(hook));
  return d.run(loss, wrt);
}

}  // namespace eng
