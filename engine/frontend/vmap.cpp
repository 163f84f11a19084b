// engine/frontend/vmap.cpp: replaying a per-example trace into a batched one (vmap.h).
#include "engine/frontend/vmap.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/frontend/numpy.h"
#include "engine/frontend/numpy_jax.h"

namespace eng::frontend {
namespace {

struct Val {
  ValueId v = kNoValue;  // in the outer trace
  bool batched = false;
  bool poisoned = false;  // no per-example meaning (see kMaskedMeanLoss below): unusable
};

bool elementwise(OpKind k) {
  const OpClass c = op_class(k);
  return c == OpClass::kUnary || c == OpClass::kUnaryGrad || k == OpKind::kScale ||
         k == OpKind::kConvert || k == OpKind::kAdd || k == OpKind::kMul ||
         k == OpKind::kRemainder || k == OpKind::kSoftmaxCrossEntropy ||
         k == OpKind::kCompare || k == OpKind::kSelect;  // jnp.where, relu, maximum
}

class Batcher {
 public:
  Batcher(Trace& one, Trace& outer, int64_t batch, std::string_view fn)
      : one_(one),
        outer_(outer),
        batch_(batch),
        fn_(fn),
        map_(one.builder().program().values().size()) {}

  Status bind_args(const std::vector<BatchedInput>& inputs) {
    const Program& p = one_.builder().program();
    for (size_t k = 0; k < p.args().size(); ++k) {
      const Trace::ArgSource src = one_.arg_source(static_cast<int>(k));
      const ValueId v = p.args()[k].value;
      if (src.input >= 0) {
        ENG_CHECK(src.input < static_cast<int>(inputs.size()), "vmap: input {} of {}", src.input,
                  inputs.size());
        map_[v] = {inputs[src.input].value, inputs[src.input].batched};
      } else if (src.captured) {
        map_[v] = {outer_.capture(src.captured), false};
      } else {
        map_[v] = {outer_.scalar(src.scalar.value_or(0.0), p.value(v).dtype), false};
      }
    }
    return ok_status();
  }

  Status replay_all() {
    for (const Instr& in : one_.builder().program().instrs()) ENG_RETURN_IF_ERROR(replay(in));
    return ok_status();
  }

  // v as a batched value of outer: an unbatched one is broadcast along a new leading dim.
  Result<ValueId> batched(ValueId v) {
    if (map_[v].poisoned)
      return invalid_argument(
          "{}: vmap: a result is the mean masked_mean_loss takes over the "
          "whole batch, which is no per-example value",
          fn_);
    return batched(map_[v]);
  }

 private:
  Result<ValueId> batched(const Val& x) {
    if (x.batched) return x.v;
    const Shape s = outer_.info(x.v).shape;
    return np::broadcast_to(outer_, x.v, Shape{batch_}.concat(s));
  }

  // Logical names of several mesh axes ("X,Y") must be known to the outer trace's rules.
  void adopt_names(const LogicalAxes& names) {
    for (const std::optional<std::string>& n : names) {
      if (!n || n->find(',') == std::string::npos) continue;
      PartitionSpec::DimAxes axes;
      size_t start = 0;
      for (size_t c = n->find(',');; c = n->find(',', start)) {
        axes.push_back(n->substr(start, c == std::string::npos ? std::string::npos : c - start));
        if (c == std::string::npos) break;
        start = c + 1;
      }
      outer_.logical_name(axes);
    }
  }

  // The logical name of the mesh axes batched value v's leading dim is sharded over, or
  // nullopt (replicated): a constraint replayed batched must not move the batch dim.
  std::optional<std::string> batch_name(ValueId v) {
    Result<PartitionSpec> spec = outer_.sharding_of(v);
    if (!spec.ok() || spec->dim_or_none(0).empty()) return std::nullopt;
    return outer_.logical_name(spec->dim_or_none(0));
  }

  Status unbatchable(const Instr& in, const std::vector<Val>& ins) const {
    std::string how;
    for (size_t i = 0; i < ins.size(); ++i)
      how += fmt::format("{}operand {} {}", i ? ", " : "", i, ins[i].batched ? "batched" : "not");
    return invalid_argument(
        "{}: vmap: batching rule for '{}' not implemented for these operands ({}); the op set "
        "has no batch dims for it",
        fn_, op_name(in.kind), how);
  }

  Status replay(const Instr& in) {
    std::vector<Val> ins;
    bool any = false;
    for (ValueId x : in.inputs) {
      ins.push_back(map_[x]);
      any = any || map_[x].batched;
    }
    for (const Val& v : ins)
      if (v.poisoned)
        return invalid_argument(
            "{}: vmap: '{}' reads the mean masked_mean_loss takes over the whole batch, which "
            "is no per-example value (only sl.grad's seed may use masked_mean_loss)",
            fn_, op_name(in.kind));
    if (in.kind == OpKind::kMaskedMeanLoss && ins[0].batched && !ins[1].batched)
      return grad_seed(in, ins);
    if (in.kind == OpKind::kMatmul && ins[0].batched && ins[1].batched) return outer(in, ins);
    OpAttrs at = in.attrs;
    at.out_like = -1;  // names a value of the per-example program; it only breaks ties
    adopt_names(at.logical);
    adopt_names(at.out_logical);
    std::vector<ValueId> xs;
    for (const Val& v : ins) xs.push_back(v.v);
    if (any) ENG_RETURN_IF_ERROR(batch_rule(in, ins, at, xs));
    const std::vector<ValueId> outs = outer_.builder().emit(in.kind, xs, at);
    for (size_t o = 0; o < outs.size(); ++o) map_[in.outputs[o]] = {outs[o], any};
    return ok_status();
  }

  // sl.grad's seed (shell/lua_jit.cpp): masked_mean_loss(loss as (1, 1), ones). Only its
  // total_weights output is read (by masked_mean_loss_grad, making the cotangent 1), and that
  // depends on the unbatched segmentation alone, so the op is emitted on one example; its mean
  // over the batch has no per-example meaning and is poisoned. This makes vmap(grad(f)) give
  // per-example gradients.
  Status grad_seed(const Instr& in, const std::vector<Val>& ins) {
    const Shape one = one_.info(in.inputs[0]).shape;
    Builder& b = outer_.builder();
    const ValueId first = b.reshape(b.slice(ins[0].v, 0, 0, 1), one);
    const std::vector<ValueId> outs = b.emit(in.kind, {first, ins[1].v}, in.attrs);
    map_[in.outputs[0]] = {outs[0], false, true};
    for (size_t o = 1; o < outs.size(); ++o) map_[in.outputs[o]] = {outs[o], false};
    return ok_status();
  }

  // A matmul of two batched operands: the op has no batch dims, so each example's product is
  // a broadcast multiply of (B, M, 1, K) by (B, 1, N, K) summed over the trailing K (one matmul
  // with ones; for K = 1, x^T dy of one example's vectors, the outer product itself). It holds
  // B*M*K*N elements: fine for the per-example products vmap is used for here (and the
  // shard_map tutorial's pipeline stages), not a batched GEMM.
  Status outer(const Instr& in, const std::vector<Val>& ins) {
    const Shape a = one_.info(in.inputs[0]).shape, bs = one_.info(in.inputs[1]).shape;
    const DotDims d = dot_dims(in.attrs, a, bs);
    if (d.M * d.K * d.N > (int64_t{1} << 24) / std::max<int64_t>(batch_, 1))
      return unbatchable(in, ins);
    Builder& b = outer_.builder();
    ValueId x = b.reshape(ins[0].v, in.attrs.trans_a ? Shape{batch_, d.K, d.M}
                                                     : Shape{batch_, d.M, d.K});
    ValueId y = b.reshape(ins[1].v, in.attrs.trans_b ? Shape{batch_, d.N, d.K}
                                                     : Shape{batch_, d.K, d.N});
    if (in.attrs.trans_a) {  // x as (B, M, K)
      ENG_ASSIGN_OR_RETURN(x, np::swapaxes(outer_, x, 1, 2));
    }
    if (!in.attrs.trans_b) {  // y as (B, N, K)
      ENG_ASSIGN_OR_RETURN(y, np::swapaxes(outer_, y, 1, 2));
    }
    const Shape full{batch_, d.M, d.N, d.K};
    ENG_ASSIGN_OR_RETURN(x, np::broadcast_to(outer_, b.reshape(x, Shape{batch_, d.M, 1, d.K}), full));
    ENG_ASSIGN_OR_RETURN(y, np::broadcast_to(outer_, b.reshape(y, Shape{batch_, 1, d.N, d.K}), full));
    ValueId prod = b.emit(OpKind::kMul, {x, y})[0];
    ENG_ASSIGN_OR_RETURN(prod, np::sum(outer_, prod, 3));
    const Shape out = Shape{batch_}.concat(one_.info(in.outputs[0]).shape);
    map_[in.outputs[0]] = {b.reshape(prod, out), true};
    return ok_status();
  }

  // Rewrites the attributes and operands of an op with batched operands (batch dim 0).
  Status batch_rule(const Instr& in, const std::vector<Val>& ins, OpAttrs& at,
                    std::vector<ValueId>& xs) {
    const OpKind k = in.kind;
    if (elementwise(k) || k == OpKind::kConcat) {
      for (size_t i = 0; i < ins.size(); ++i) {
        ENG_ASSIGN_OR_RETURN(xs[i], batched(ins[i]));
      }
      if (k == OpKind::kConcat) at.dim += 1;
      return ok_status();
    }
    switch (k) {
      case OpKind::kReshape:
        at.new_shape.insert(at.new_shape.begin(), batch_);
        return ok_status();
      case OpKind::kSlice:
      case OpKind::kPad:
        at.dim += 1;
        return ok_status();
      case OpKind::kTranspose:  // the batch dim stays first; the example's dims shift by one
        for (int64_t& d : at.new_shape) d += 1;
        at.new_shape.insert(at.new_shape.begin(), 0);
        return ok_status();
      case OpKind::kConstraint:  // the batch dim keeps the sharding it has
        at.logical.insert(at.logical.begin(), batch_name(xs[0]));
        return ok_status();
      case OpKind::kMatmul:
        // Only a batched left operand: its free dims gain the batch dim in front.
        if (!ins[0].batched || ins[1].batched || at.trans_a) return unbatchable(in, ins);
        at.a_split += 1;
        if (!at.out_logical.empty())
          at.out_logical.insert(at.out_logical.begin(), batch_name(xs[0]));
        return ok_status();
      case OpKind::kRmsNorm:  // over the last axis: any leading dims; the scale is per-feature
        if (!ins[0].batched || ins[1].batched) return unbatchable(in, ins);
        return ok_status();
      default:
        return unbatchable(in, ins);
    }
  }

  Trace& one_;
  Trace& outer_;
  int64_t batch_;
  std::string_view fn_;
  std::vector<Val> map_;  // per value of one_
};

}  // namespace

Result<std::vector<ValueId>> replay_batched(Trace& one, const std::vector<ValueId>& results,
                                            Trace& outer, const std::vector<BatchedInput>& inputs,
                                            int64_t batch, std::string_view fn) {
  Batcher b(one, outer, batch, fn);
  ENG_RETURN_IF_ERROR(b.bind_args(inputs));
  ENG_RETURN_IF_ERROR(b.replay_all());
  std::vector<ValueId> out;
  for (ValueId r : results) {
    ENG_ASSIGN_OR_RETURN(ValueId v, b.batched(r));
    out.push_back(v);
  }
  return out;
}

}  // namespace eng::frontend
