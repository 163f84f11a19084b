// engine/ir/interpret.cpp: the reference interpreter: every op in double via eng::ref kernels.
#include "engine/ir/interpret.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/base/check.h"
#include "engine/ir/builder.h"
#include "engine/ir/op_table.h"
#include "engine/ir/moe_attrs.h"
#include "engine/tensor/reference.h"

namespace eng {

namespace {

HostTensor zeros(const ValueInfo& info) {
  HostTensor t;
  t.shape = info.shape;
  t.dtype = info.dtype;
  t.data.assign(static_cast<size_t>(info.shape.numel()), 0.0);
  return t;
}

std::vector<int32_t> as_i32(const HostTensor& t) {
  std::vector<int32_t> out(t.data.size());
  for (size_t i = 0; i < t.data.size(); ++i) out[i] = static_cast<int32_t>(t.data[i]);
  return out;
}

// Evaluates one instruction; `vals` holds every value computed so far (indexed by ValueId).
class Evaluator {
 public:
  Evaluator(const Program& p, std::vector<HostTensor>& vals) : p_(p), vals_(vals) {}

  Status run(const Instr& in) {
    for (ValueId o : in.outputs) vals_[o] = zeros(p_.value(o));
    if (in.attrs.vmap > 0) return vmapped(in);
    const bool vocab_block = ((in.kind == OpKind::kEmbedLookup || in.kind == OpKind::kEmbedLookupGrad) &&
                              in.inputs.size() == 3) ||
                             (in.kind == OpKind::kSoftmaxCrossEntropyGrad && in.inputs.size() == 5);
    if (vocab_block)  // op.h: the vocab-offset forms exist only in per-device programs
      return unimplemented("interpret: the vocab-block form of {} appears only in per-device "
                           "(partitioned) programs; interpret the global program", op_name(in.kind));
    ENG_RETURN_IF_ERROR((this->*kEvals[op_index(in.kind)])(in));
    round_bf16_outputs(in);
    wrap_integer_outputs(in);
    return ok_status();
  }

  // Integer arithmetic (op.h OpDef::integer, and dynamic_update_slice_in_dim's add) wraps to
  // int32 as the kernels do; the double result is exact while |result| < 2^53 (a product of
  // two int32 beyond that is not).
  void wrap_integer_outputs(const Instr& in) {
    const bool adds = in.kind == OpKind::kDynamicUpdateSliceInDim && in.attrs.inverse;
    if (!has_integer_kernel(in.kind) && !adds) return;
    for (ValueId o : in.outputs) {
      if (p_.value(o).dtype != DType::kI32) continue;
      for (double& x : vals_[o].data)
        x = static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(x)));
    }
  }

  // docs/precision.md: every kernel computes in f32 (here: double) from its inputs' values and
  // rounds each bf16 output once, when it stores it. So does the reference, here.
  void round_bf16_outputs(const Instr& in) {
    for (ValueId o : in.outputs) {
      if (p_.value(o).dtype != DType::kBF16) continue;
      for (double& x : vals_[o].data) x = bf16_to_f32(f32_to_bf16(static_cast<float>(x)));
    }
  }

  // ---- one reference evaluation per op (the kEvals table below) ----
  Status reshape(const Instr& i) {
    out(i, 0).data = in(i, 0).data;
    return ok_status();
  }

  Status per_device_only(const Instr& i) {
    return unimplemented(
        "interpret: {} appears only in per-device (partitioned) programs; "
        "interpret the global program",
        op_name(i.kind));
  }

  // Unary ops (op.h's UnaryMath): y = f(x); the grad op (x, dy) -> dy * df(x).
  Status unary(const Instr& i) {
    const UnaryMath& u = unary_math(i.kind);
    const std::vector<double>& x = in(i, 0).data;
    for (size_t k = 0; k < x.size(); ++k) outd(i, 0)[k] = u.f(x[k]);
    return ok_status();
  }
  Status unary_grad(const Instr& i) {
    const UnaryMath& u = unary_math(i.kind);
    const std::vector<double>& x = in(i, 0).data;
    for (size_t k = 0; k < x.size(); ++k) outd(i, 0)[k] = ind(i, 1)[k] * u.df(x[k]);
    return ok_status();
  }

  // op.h's vmap: the per-slice op as a one-instruction program, evaluated slice by slice.
  Status vmapped(const Instr& in) {
    const int64_t S = in.attrs.vmap;
    Builder b("vmap_slice");
    std::vector<ValueId> args;
    for (size_t k = 0; k < in.inputs.size(); ++k) {
      const ValueInfo& v = p_.value(in.inputs[k]);
      args.push_back(b.argument(fmt::format("in{}", k), v.shape.slice(1, v.shape.rank()), v.dtype,
                                {}, ArgRole::kBatch));
    }
    OpAttrs a = in.attrs;
    a.vmap = 0;
    a.out_like = -1;
    a.out_logical.clear();
    b.emit(in.kind, args, a);
    const Program sp = std::move(b).finish();
    const Instr& si = sp.instrs()[0];
    std::vector<HostTensor> vals(sp.values().size());
    for (int64_t s = 0; s < S; ++s) {
      for (size_t k = 0; k < in.inputs.size(); ++k) {
        const HostTensor& full = vals_[in.inputs[k]];
        HostTensor& t = vals[args[k]];
        t.shape = sp.value(args[k]).shape;
        t.dtype = full.dtype;
        const int64_t n = t.shape.numel();
        t.data.assign(full.data.begin() + s * n, full.data.begin() + (s + 1) * n);
      }
      Evaluator e(sp, vals);
      ENG_RETURN_IF_ERROR(e.run(si));
      for (size_t o = 0; o < in.outputs.size(); ++o) {
        const std::vector<double>& part = vals[si.outputs[o]].data;
        std::copy(part.begin(), part.end(),
                  vals_[in.outputs[o]].data.begin() + s * static_cast<int64_t>(part.size()));
      }
    }
    return ok_status();
  }

  Status data_movement(const Instr& i) {
    const OpAttrs& at = i.attrs;
    const Shape& ys = p_.value(i.outputs[0]).shape;
    const int64_t outer = ys.prod(0, at.dim), inner = ys.prod(at.dim + 1, ys.rank());
    const int64_t n_out = ys[at.dim];
    double* y = outd(i, 0);
    if (i.kind == OpKind::kConcat) {
      int64_t row = 0;
      for (size_t k = 0; k < i.inputs.size(); ++k) {
        const int64_t n = p_.value(i.inputs[k]).shape[at.dim];
        for (int64_t o = 0; o < outer; ++o)
          std::copy_n(ind(i, static_cast<int>(k)) + o * n * inner, n * inner,
                      y + (o * n_out + row) * inner);
        row += n;
      }
      return ok_status();
    }
    const int64_t n_in = p_.value(i.inputs[0]).shape[at.dim];
    const double* x = ind(i, 0);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = 0; r < n_out; ++r) {
        int64_t src = -1;
        if (i.kind == OpKind::kSlice) src = at.start + r;
        else if (i.kind == OpKind::kPad) src = r - at.start;
        else src = r - at.shift;
        if (src < 0 || src >= n_in) continue;
        if (i.kind == OpKind::kShift) {
          const ShiftRows rows = shift_source_rows(at, n_in);
          if (src < rows.lo || src >= rows.hi) continue;
        }
        std::copy_n(x + (o * n_in + src) * inner, inner, y + (o * n_out + r) * inner);
      }
    return ok_status();
  }

  // transpose: y[i] = x[perm applied to i's multi-index], walked in y's row-major order.
  Status transpose(const Instr& i) {
    const Shape& xs = p_.value(i.inputs[0]).shape;
    const Shape& ys = p_.value(i.outputs[0]).shape;
    const int r = xs.rank();
    std::vector<int64_t> xstride(r, 1), idx(r, 0);
    for (int d = r - 2; d >= 0; --d) xstride[d] = xstride[d + 1] * xs[d + 1];
    const double* x = ind(i, 0);
    double* y = outd(i, 0);
    for (int64_t k = 0; k < ys.numel(); ++k) {
      int64_t src = 0;
      for (int d = 0; d < r; ++d) src += idx[d] * xstride[i.attrs.new_shape[d]];
      y[k] = x[src];
      for (int d = r - 1; d >= 0 && ++idx[d] == ys[d]; --d) idx[d] = 0;
    }
    return ok_status();
  }
  Status compare(const Instr& i) {
    return map(i, [&](int64_t k) {
      const double a = ind(i, 0)[k], b = ind(i, 1)[k];
      switch (static_cast<CompareDirection>(i.attrs.dim)) {
        case CompareDirection::kEq: return a == b ? 1.0 : 0.0;
        case CompareDirection::kNe: return a != b ? 1.0 : 0.0;
        case CompareDirection::kLt: return a < b ? 1.0 : 0.0;
        case CompareDirection::kLe: return a <= b ? 1.0 : 0.0;
        case CompareDirection::kGt: return a > b ? 1.0 : 0.0;
        case CompareDirection::kGe: return a >= b ? 1.0 : 0.0;
      }
      return 0.0;
    });
  }
  Status select(const Instr& i) {
    return map(i, [&](int64_t k) { return ind(i, 0)[k] != 0 ? ind(i, 1)[k] : ind(i, 2)[k]; });
  }

  // index_in_dim / add_index_in_dim: slot `start` of the stacked (outer, L, inner) view.
  Status index_in_dim(const Instr& i) {
    const bool add = i.kind == OpKind::kAddIndexInDim;
    const Shape& stacked = p_.value(add ? i.outputs[0] : i.inputs[0]).shape;
    const int64_t outer = stacked.prod(0, i.attrs.dim), L = stacked[i.attrs.dim];
    const int64_t inner = stacked.prod(i.attrs.dim + 1, stacked.rank());
    if (add && i.inputs.size() > 1) out(i, 0).data = in(i, 1).data;
    double* y = outd(i, 0);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < inner; ++k) {
        const int64_t at = (o * L + i.attrs.start) * inner + k, slot = o * inner + k;
        if (add) y[at] += ind(i, 0)[slot];
        else y[slot] = ind(i, 0)[at];
      }
    return ok_status();
  }

  // index_per_row / add_index_per_row: row s of the stacked (N, S, inner) view at slot
  // indices[s] (global programs: every row is here).
  Status index_per_row(const Instr& i) {
    const bool add = i.kind == OpKind::kAddIndexPerRow;
    const Shape& stacked = p_.value(add ? i.outputs[0] : i.inputs[0]).shape;
    const int64_t S = stacked[1], inner = stacked.prod(2, stacked.rank());
    if (add && i.inputs.size() > 1) out(i, 0).data = in(i, 1).data;
    double* y = outd(i, 0);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < inner; ++k) {
        const int64_t at = (i.attrs.new_shape[s] * S + s) * inner + k, row = s * inner + k;
        if (add) y[at] += ind(i, 0)[row];
        else y[row] = ind(i, 0)[at];
      }
    return ok_status();
  }

  // Mixture of experts (op.h; the loops of engine/tensor/moe.h in double).
  Status moe_route(const Instr& i) {
    const Shape& x = in(i, 0).shape;
    if (i.kind == OpKind::kMoeRoute)
      moe::route(ind(i, 0), i.inputs.size() > 1 ? ind(i, 1) : nullptr, x[0], x[1], x[2],
                 route_params(i.attrs), outd(i, 0), outd(i, 1), outd(i, 2));
    else
      moe::route_grad(ind(i, 0), ind(i, 1), i.inputs.size() > 2 ? ind(i, 2) : nullptr, x[0], x[1],
                      x[2], route_params(i.attrs), i.attrs.raw ? nullptr : outd(i, 0),
                      i.attrs.raw ? outd(i, 0) : nullptr);
    return ok_status();
  }

  Status moe_dispatch(const Instr& i) {
    const Shape& c = in(i, 0).shape;
    const Shape& x = in(i, 1).shape;
    const int64_t M = x[x.rank() - 1];
    if (i.kind == OpKind::kMoeDispatch)
      moe::dispatch<double>(ind(i, 0), ind(i, 1), c[0], c[1], c[2], c[3], M, i.attrs.raw, outd(i, 0));
    else
      moe::combine<double>(ind(i, 0), ind(i, 1), c[0], c[1], c[2], c[3], M, i.attrs.raw, outd(i, 0));
    return ok_status();
  }

  Status moe_combine_weights_grad(const Instr& i) {
    const Shape& d = in(i, 0).shape;
    const Shape& y = in(i, 1).shape;
    moe::combine_weights_grad(ind(i, 0), ind(i, 1), d[0], d[1], y[0], y[2], d[2], outd(i, 0));
    return ok_status();
  }

  Status expert_matmul(const Instr& i) {
    const Shape& a = in(i, 0).shape;
    const Shape& w = in(i, 1).shape;
    const int r = a.rank();
    const int64_t G = a[0], R = a.prod(1, r - 1), K = a[r - 1];
    if (i.kind == OpKind::kExpertMatmulGrad) {
      moe::expert_matmul_grad(ind(i, 0), ind(i, 1), G, R, K, w[r - 1], outd(i, 0));
    } else {
      const int64_t N = w[i.attrs.trans_b ? 1 : 2];
      moe::expert_matmul(ind(i, 0), ind(i, 1), G, R, K, N, i.attrs.trans_b, outd(i, 0));
    }
    return ok_status();
  }

  // The dropless dispatch: index arrays read and written as doubles (I = double).
  Status moe_top_k(const Instr& i) {
    const Shape& x = in(i, 0).shape;
    const double* bias = i.inputs.size() > (i.kind == OpKind::kMoeTopK ? 1u : 2u)
                             ? ind(i, static_cast<int>(i.inputs.size()) - 1)
                             : nullptr;
    if (i.kind == OpKind::kMoeTopK)
      moe::top_k(ind(i, 0), bias, x[0], x[1], x[2], route_params(i.attrs), outd(i, 0), outd(i, 1),
                 outd(i, 2), outd(i, 3), outd(i, 4), outd(i, 5));
    else
      moe::top_k_grad(ind(i, 0), ind(i, 1), bias, x[0], x[1], x[2], route_params(i.attrs),
                      i.attrs.raw ? nullptr : outd(i, 0), i.attrs.raw ? outd(i, 0) : nullptr);
    return ok_status();
  }

  Status moe_permute(const Instr& i) {
    const Shape& o = in(i, 1).shape;
    const Shape& x = in(i, 0).shape;
    const int64_t k = i.attrs.size;
    moe::permute<double>(ind(i, 0), ind(i, 1), ind(i, 2), i.inputs.size() == 4 ? ind(i, 3) : nullptr,
                         o[0], o[1] / k, k, x[2], i.attrs.inverse, outd(i, 0));
    return ok_status();
  }

  Status moe_permute_weights_grad(const Instr& i) {
    const Shape& a = in(i, 0).shape;
    moe::permute_weights_grad<double>(ind(i, 0), ind(i, 1), ind(i, 3), a[0], a[1], i.attrs.size,
                                      a[2], outd(i, 0));
    return ok_status();
  }

  Status ragged_dot(const Instr& i) {
    const Shape& l = in(i, 0).shape;
    const Shape& r = in(i, 1).shape;
    const int lr = l.rank();
    const int64_t B = lr == 3 ? l[0] : 1, N = l[lr - 2], K = l[lr - 1];
    const int64_t E = in(i, 2).shape.dim(-1);
    if (i.kind == OpKind::kRaggedDotGrad)
      moe::ragged_dot_grad(ind(i, 0), ind(i, 1), ind(i, 2), B, N, K, r[lr - 1], E, outd(i, 0));
    else
      moe::ragged_dot(ind(i, 0), ind(i, 1), ind(i, 2), B, N, K, r[i.attrs.trans_b ? 1 : 2], E,
                      i.attrs.trans_b, outd(i, 0));
    return ok_status();
  }

  // The global form (op.h): member s's rows go to member r's buffer, summed in sender order.
  Status ragged_all_to_all(const Instr& i) {
    if (!i.attrs.mesh_axes.empty()) return per_device_only(i);
    const Shape& x = in(i, 0).shape;
    const int r = x.rank();
    const int64_t L = x.prod(0, r - 3), G = x[r - 3], N = x[r - 2], F = x[r - 1];
    const int64_t R = i.attrs.size;
    const double *io = ind(i, 1), *ss = ind(i, 2), *oo = ind(i, 3), *xs = ind(i, 0);
    double* y = outd(i, 0);
    for (int64_t l = 0; l < L; ++l)
      for (int64_t dst = 0; dst < G; ++dst)
        for (int64_t src = 0; src < G; ++src) {
          const int64_t at = (l * G + src) * G + dst;
          const auto from = static_cast<int64_t>(io[at]), to = static_cast<int64_t>(oo[at]);
          for (int64_t k = 0; k < static_cast<int64_t>(ss[at]); ++k) {
            if (from + k < 0 || from + k >= N || to + k < 0 || to + k >= R) continue;
            const double* a = xs + ((l * G + src) * N + from + k) * F;
            double* o = y + ((l * G + dst) * R + to + k) * F;
            for (int64_t f = 0; f < F; ++f) o[f] += a[f];
          }
        }
    return ok_status();
  }

  const HostTensor& in(const Instr& i, int k) const { return vals_[i.inputs[k]]; }
  HostTensor& out(const Instr& i, int k) { return vals_[i.outputs[k]]; }
  const double* ind(const Instr& i, int k) const { return in(i, k).data.data(); }
  double* outd(const Instr& i, int k) { return out(i, k).data.data(); }

  // ids must index [0, limit): the reference kernels would read out of bounds otherwise.
  Status check_ids(const Instr& i, const std::vector<int32_t>& ids, int64_t limit,
                   const char* what) const {
    for (int32_t id : ids)
      if (id < 0 || id >= limit)
        return invalid_argument("{}: {} {} out of range [0, {})", op_name(i.kind), what, id, limit);
    return ok_status();
  }

  Status embed_lookup(const Instr& i) {
    const Shape& t = in(i, 0).shape;
    std::vector<int32_t> ids = as_i32(in(i, 1));
    ref::embed_lookup(ind(i, 0), ids.data(), outd(i, 0), static_cast<int64_t>(ids.size()), t[0],
                      t[1]);
    return ok_status();
  }

  Status one_hot(const Instr& i) {
    std::vector<int32_t> ids = as_i32(in(i, 0));
    ref::one_hot(ids.data(), outd(i, 0), static_cast<int64_t>(ids.size()), i.attrs.depth);
    return ok_status();
  }

  // The 2D views of op.h (DotDims): A2 = a as (prod a[:a_split], prod a[a_split:]), likewise B2.
  Status matmul(const Instr& i) {
    const OpAttrs& at = i.attrs;
    const DotDims d = dot_dims(at, in(i, 0).shape, in(i, 1).shape);
    ref::matmul<double>(at.trans_a, at.trans_b, d.M, d.N, d.K, 1.0, ind(i, 0), d.lda, ind(i, 1),
                        d.ldb, 0.0, outd(i, 0), d.N);
    return ok_status();
  }

  // kernels.h's bf16 section: these ops round where MaxText does (program.h uses_bf16_kernel);
  // ref::*_bf16 are their float64 oracles.
  bool bf16(const Instr& i) const { return uses_bf16_kernel(p_, i); }

  Status rmsnorm(const Instr& i) {
    const Shape& x = in(i, 0).shape;
    const int64_t E = x.dim(-1), N = x.prod(0, x.rank() - 1);
    if (bf16(i)) {
      ref::rmsnorm_forward_bf16(ind(i, 0), ind(i, 1), outd(i, 0), outd(i, 1), N, E, i.attrs.eps);
      return ok_status();
    }
    ref::rmsnorm_forward(ind(i, 0), ind(i, 1), outd(i, 0), outd(i, 1), N, E, i.attrs.eps);
    return ok_status();
  }

  Status rope(const Instr& i) {
    const Shape& x = in(i, 0).shape;
    std::vector<int32_t> pos = as_i32(in(i, 1));
    if (bf16(i)) {
      ref::rope_bf16(ind(i, 0), pos.data(), outd(i, 0), x[0], x[1], x[2], x[3],
                     i.attrs.min_timescale, i.attrs.max_timescale, i.attrs.inverse,
                     {i.attrs.rope_interleave, i.attrs.rope_use_scale});
      return ok_status();
    }
    ref::rope(ind(i, 0), pos.data(), outd(i, 0), x[0], x[1], x[2], x[3], i.attrs.min_timescale,
              i.attrs.max_timescale, i.attrs.inverse,
              {i.attrs.rope_interleave, i.attrs.rope_use_scale});
    return ok_status();
  }

  // x (B,T,Hkv,D) <-> (B,T,Hkv*R,D) (op.h).
  Status repeat_kv(const Instr& i) {
    const Shape& x = in(i, 0).shape;
    const int64_t R = i.attrs.size;
    if (i.kind == OpKind::kRepeatKv)
      ref::repeat_kv(ind(i, 0), outd(i, 0), x[0] * x[1], x[2], x[3], R);
    else
      ref::repeat_kv_grad(ind(i, 0), outd(i, 0), x[0] * x[1], x[2] / R, x[3], R);
    return ok_status();
  }

  Status attention(const Instr& i) {
    const Shape& q = in(i, 0).shape;
    const std::vector<int32_t> seg =
        i.inputs.size() == 4 ? as_i32(in(i, 3)) : std::vector<int32_t>{};
    if (bf16(i)) {
      ref::attention_forward_bf16(ind(i, 0), ind(i, 1), ind(i, 2), seg.empty() ? nullptr : seg.data(),
                                  outd(i, 0), outd(i, 1), q[0], q[1], q[2], q[3], i.attrs.scale);
      return ok_status();
    }
    ref::attention_forward(ind(i, 0), ind(i, 1), ind(i, 2), outd(i, 0), outd(i, 1), q[0], q[1],
                           q[2], q[3], i.attrs.scale, seg.empty() ? nullptr : seg.data());
    return ok_status();
  }

  // swiglu, add, mul, scale, constraint: one output element per input element.
  template <class F>
  Status map(const Instr& i, F f) {
    double* y = outd(i, 0);
    const int64_t n = static_cast<int64_t>(out(i, 0).data.size());
    for (int64_t k = 0; k < n; ++k) y[k] = f(k);
    return ok_status();
  }
  Status swiglu(const Instr& i) {
    if (bf16(i)) {
      ref::swiglu_forward_bf16(ind(i, 0), ind(i, 1), outd(i, 0),
                               static_cast<int64_t>(out(i, 0).data.size()));
      return ok_status();
    }
    ref::swiglu_forward(ind(i, 0), ind(i, 1), outd(i, 0),
                        static_cast<int64_t>(out(i, 0).data.size()));
    return ok_status();
  }
  Status add(const Instr& i) {
    return map(i, [&](int64_t k) { return ind(i, 0)[k] + ind(i, 1)[k]; });
  }
  Status mul(const Instr& i) {
    return map(i, [&](int64_t k) { return ind(i, 0)[k] * ind(i, 1)[k]; });
  }
  Status scale(const Instr& i) {
    return map(i, [&](int64_t k) { return i.attrs.scale * ind(i, 0)[k]; });
  }
  Status remainder(const Instr& i) {
    const bool integer = p_.value(i.outputs[0]).dtype == DType::kI32;
    return map(i, [&](int64_t k) {
      const double a = ind(i, 0)[k], b = ind(i, 1)[k];
      return integer ? remainder_i32(static_cast<int32_t>(a), static_cast<int32_t>(b))
                     : remainder_float(a, b);
    });
  }

  // dynamic_slice_in_dim / dynamic_update_slice_in_dim: rows [s, s + size) of the (outer, n,
  // inner) view of x, s from the start input (op.h's dynamic_slice_start).
  Status dynamic_slice(const Instr& i) {
    const bool update = i.kind == OpKind::kDynamicUpdateSliceInDim;
    const Shape& x = p_.value(i.inputs[0]).shape;
    const int dim = i.attrs.dim;
    const int64_t outer = x.prod(0, dim), n = x[dim], inner = x.prod(dim + 1, x.rank());
    const int64_t size = update ? p_.value(i.inputs[1]).shape[dim] : i.attrs.size;
    const int64_t start = static_cast<int64_t>(in(i, update ? 2 : 1).data[0]);
    const int64_t s = dynamic_slice_start(start, n, size);
    if (update) out(i, 0).data = in(i, 0).data;
    double* y = outd(i, 0);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = 0; r < size; ++r)
        for (int64_t k = 0; k < inner; ++k) {
          const int64_t at = (o * n + s + r) * inner + k, slot = (o * size + r) * inner + k;
          if (!update) y[slot] = ind(i, 0)[at];
          else if (i.attrs.inverse) y[at] += ind(i, 1)[slot];
          else y[at] = ind(i, 1)[slot];
        }
    return ok_status();
  }
  Status identity(const Instr& i) {
    return map(i, [&](int64_t k) { return ind(i, 0)[k]; });
  }

  // f32 is an identity (the interpreter's f32 is double); bf16 rounds through the real format.
  Status convert(const Instr& i) {
    const std::vector<double>& x = in(i, 0).data;
    std::vector<double>& y = out(i, 0).data;
    for (size_t k = 0; k < x.size(); ++k) {
      switch (i.attrs.dtype) {
        case DType::kF32: y[k] = x[k]; break;
        case DType::kBF16: y[k] = bf16_to_f32(f32_to_bf16(static_cast<float>(x[k]))); break;
        case DType::kI32: y[k] = std::trunc(x[k]); break;
      }
    }
    return ok_status();
  }

  Status softmax_cross_entropy(const Instr& i) {
    const Shape& l = in(i, 0).shape;
    const int64_t V = l.dim(-1), N = l.prod(0, l.rank() - 1);
    std::vector<int32_t> targets = as_i32(in(i, 1));
    ENG_RETURN_IF_ERROR(check_ids(i, targets, V, "target"));
    ref::softmax_cross_entropy_forward(ind(i, 0), targets.data(), outd(i, 0), outd(i, 1), N, V);
    return ok_status();
  }

  // MaxText: loss = sum(xent * (seg != 0)) / (total_weights + 1e-8).
  Status masked_mean_loss(const Instr& i) {
    const std::vector<double>& xent = in(i, 0).data;
    const std::vector<double>& seg = in(i, 1).data;
    double sum = 0, weights = 0;
    for (size_t k = 0; k < xent.size(); ++k)
      if (seg[k] != 0) {
        sum += xent[k];
        weights += 1;
      }
    outd(i, 0)[0] = sum / (weights + 1e-8);
    outd(i, 1)[0] = weights;
    return ok_status();
  }

  Status embed_lookup_grad(const Instr& i) {
    std::vector<int32_t> ids = as_i32(in(i, 0));
    const int64_t E = in(i, 1).shape.dim(-1);
    ref::embed_lookup_grad(ids.data(), ind(i, 1), outd(i, 0), static_cast<int64_t>(ids.size()),
                           i.attrs.depth, E);
    return ok_status();
  }

  Status rmsnorm_grad(const Instr& i) {
    const Shape& x = in(i, 0).shape;
    const int64_t E = x.dim(-1), N = x.prod(0, x.rank() - 1);
    if (bf16(i)) {
      ref::rmsnorm_backward_bf16(ind(i, 0), ind(i, 1), ind(i, 2), ind(i, 3), outd(i, 0),
                                 outd(i, 1), N, E);
      return ok_status();
    }
    ref::rmsnorm_backward(ind(i, 0), ind(i, 1), ind(i, 2), ind(i, 3), outd(i, 0), outd(i, 1), N, E);
    return ok_status();
  }

  // layernorm, bias_add: float64 math (bf16 operands round only at the outputs, as the f32
  // kernels run them widened).
  Status layernorm(const Instr& i) {
    const Shape& x = in(i, 0).shape;
    const int64_t E = x.dim(-1), N = x.prod(0, x.rank() - 1);
    ref::layernorm_forward(ind(i, 0), ind(i, 1), ind(i, 2), outd(i, 0), outd(i, 1), outd(i, 2), N,
                           E, i.attrs.eps);
    return ok_status();
  }
  Status layernorm_grad(const Instr& i) {
    const Shape& x = in(i, 0).shape;
    const int64_t E = x.dim(-1), N = x.prod(0, x.rank() - 1);
    ref::layernorm_backward(ind(i, 0), ind(i, 1), ind(i, 2), ind(i, 3), ind(i, 4), outd(i, 0),
                            outd(i, 1), outd(i, 2), N, E);
    return ok_status();
  }
  Status bias_add(const Instr& i) {
    const int64_t F = in(i, 1).shape.numel();
    return map(i, [&](int64_t k) { return ind(i, 0)[k] + ind(i, 1)[k % F]; });
  }
  Status bias_add_grad(const Instr& i) {
    const int64_t F = out(i, 0).shape.numel();
    ref::bias_add_grad(ind(i, 0), outd(i, 0), in(i, 0).shape.numel() / F, F);
    return ok_status();
  }

  Status attention_grad(const Instr& i) {
    const Shape& q = in(i, 0).shape;
    const std::vector<int32_t> seg =
        i.inputs.size() == 7 ? as_i32(in(i, 6)) : std::vector<int32_t>{};
    if (bf16(i)) {
      ref::attention_backward_bf16(ind(i, 0), ind(i, 1), ind(i, 2), ind(i, 3), ind(i, 4),
                                   seg.empty() ? nullptr : seg.data(), ind(i, 5), outd(i, 0),
                                   outd(i, 1), outd(i, 2), q[0], q[1], q[2], q[3], i.attrs.scale);
      return ok_status();
    }
    ref::attention_backward(ind(i, 0), ind(i, 1), ind(i, 2), ind(i, 3), ind(i, 4), ind(i, 5),
                            outd(i, 0), outd(i, 1), outd(i, 2), q[0], q[1], q[2], q[3],
                            i.attrs.scale, seg.empty() ? nullptr : seg.data());
    return ok_status();
  }

  Status swiglu_grad(const Instr& i) {
    const int64_t n = static_cast<int64_t>(in(i, 0).data.size());
    if (bf16(i)) {
      ref::swiglu_backward_bf16(ind(i, 0), ind(i, 1), ind(i, 2), outd(i, 0), outd(i, 1), n);
      return ok_status();
    }
    ref::swiglu_backward(ind(i, 0), ind(i, 1), ind(i, 2), outd(i, 0), outd(i, 1), n);
    return ok_status();
  }

  Status softmax_cross_entropy_grad(const Instr& i) {
    const Shape& l = in(i, 0).shape;
    const int64_t V = l.dim(-1), N = l.prod(0, l.rank() - 1);
    std::vector<int32_t> targets = as_i32(in(i, 1));
    ENG_RETURN_IF_ERROR(check_ids(i, targets, V, "target"));
    ref::softmax_cross_entropy_backward(ind(i, 0), targets.data(), ind(i, 2), ind(i, 3), outd(i, 0),
                                        N, V);
    return ok_status();
  }

  // dxent = scale * dloss * (seg != 0) / (total_weights + 1e-8); dloss = 1 when absent (seed).
  Status masked_mean_loss_grad(const Instr& i) {
    const std::vector<double>& seg = in(i, 0).data;
    const double weights = ind(i, 1)[0];
    const double dloss = i.inputs.size() > 2 ? ind(i, 2)[0] : 1.0;
    const double c = i.attrs.scale * dloss / (weights + 1e-8);
    double* dxent = outd(i, 0);
    for (size_t k = 0; k < seg.size(); ++k) dxent[k] = seg[k] != 0 ? c : 0.0;
    return ok_status();
  }

  Status sum_squares(const Instr& i) {
    double& y = outd(i, 0)[0];
    for (double x : in(i, 0).data) y += x * x;
    return ok_status();
  }
  Status global_norm(const Instr& i) {
    double y = 0;
    for (size_t k = 0; k < i.inputs.size(); ++k) y += ind(i, static_cast<int>(k))[0];
    outd(i, 0)[0] = std::sqrt(y);
    return ok_status();
  }
  Status clip_factor(const Instr& i) {
    outd(i, 0)[0] = ref::clip_factor(ind(i, 0)[0], i.attrs.clip_threshold);
    return ok_status();
  }
  Status learning_rate(const Instr& i) {
    const OpAttrs& at = i.attrs;
    outd(i, 0)[0] = ref::learning_rate_at(static_cast<int64_t>(ind(i, 0)[0]), at.learning_rate,
                                          at.warmup_steps, at.cos_steps, at.final_fraction);
    return ok_status();
  }
  Status increment(const Instr& i) {
    outd(i, 0)[0] = ind(i, 0)[0] + 1;
    return ok_status();
  }

  // optax adamw: the count used for bias correction is the incremented step.
  Status adamw(const Instr& i) {
    out(i, 0).data = in(i, 0).data;
    out(i, 1).data = in(i, 2).data;
    out(i, 2).data = in(i, 3).data;
    const OpAttrs& at = i.attrs;
    const int64_t count = static_cast<int64_t>(ind(i, 6)[0]) + 1;
    ref::adamw_update(outd(i, 0), ind(i, 1), outd(i, 1), outd(i, 2),
                      static_cast<int64_t>(in(i, 0).data.size()), ind(i, 4)[0], ind(i, 5)[0], at.b1,
                      at.b2, at.eps, at.weight_decay, count);
    return ok_status();
  }

  const Program& p_;
  std::vector<HostTensor>& vals_;
  using EvalFn = Status (Evaluator::*)(const Instr&);
  static const OpTable<EvalFn> kEvals;
};

using E = Evaluator;
// The reference evaluation of each op, in double (engine/ir/op_table.h).
constexpr OpTable<E::EvalFn> E::kEvals = make_op_table<E::EvalFn>(
    {
        {OpKind::kReshape, &E::reshape},
        {OpKind::kSlice, &E::data_movement},
        {OpKind::kPad, &E::data_movement},
        {OpKind::kShift, &E::data_movement},
        {OpKind::kConcat, &E::data_movement},
        {OpKind::kEmbedLookup, &E::embed_lookup},
        {OpKind::kOneHot, &E::one_hot},
        {OpKind::kMatmul, &E::matmul},
        {OpKind::kRmsNorm, &E::rmsnorm},
        {OpKind::kRope, &E::rope},
        {OpKind::kAttention, &E::attention},
        {OpKind::kSwiglu, &E::swiglu},
        {OpKind::kRepeatKv, &E::repeat_kv},
        {OpKind::kRepeatKvGrad, &E::repeat_kv},
        {OpKind::kAdd, &E::add},
        {OpKind::kMul, &E::mul},
        {OpKind::kScale, &E::scale},
        {OpKind::kConvert, &E::convert},
        {OpKind::kConstraint, &E::identity},  // an identity on one device
        {OpKind::kSoftmaxCrossEntropy, &E::softmax_cross_entropy},
        {OpKind::kMaskedMeanLoss, &E::masked_mean_loss},
        {OpKind::kEmbedLookupGrad, &E::embed_lookup_grad},
        {OpKind::kRmsNormGrad, &E::rmsnorm_grad},
        {OpKind::kAttentionGrad, &E::attention_grad},
        {OpKind::kSwigluGrad, &E::swiglu_grad},
        {OpKind::kSoftmaxCrossEntropyGrad, &E::softmax_cross_entropy_grad},
        {OpKind::kMaskedMeanLossGrad, &E::masked_mean_loss_grad},
        {OpKind::kSumSquares, &E::sum_squares},
        {OpKind::kGlobalNorm, &E::global_norm},
        {OpKind::kClipFactor, &E::clip_factor},
        {OpKind::kLearningRate, &E::learning_rate},
        {OpKind::kIncrement, &E::increment},
        {OpKind::kAdamW, &E::adamw},
        // Per-device programs only (op.h): collectives, axis_index, the vocab-parallel ops.
        {OpKind::kAllGather, &E::per_device_only},
        {OpKind::kReduceScatter, &E::per_device_only},
        {OpKind::kAllReduce, &E::per_device_only},
        {OpKind::kAllToAll, &E::per_device_only},
        {OpKind::kCollectivePermute, &E::per_device_only},
        {OpKind::kDynamicSlice, &E::per_device_only},
        {OpKind::kSafeDivide, &E::per_device_only},
        {OpKind::kAxisIndex, &E::per_device_only},
        {OpKind::kVocabMax, &E::per_device_only},
        {OpKind::kVocabStats, &E::per_device_only},
        {OpKind::kXentFromStats, &E::per_device_only},
        {OpKind::kIndexInDim, &E::index_in_dim},
        {OpKind::kAddIndexInDim, &E::index_in_dim},
        {OpKind::kTranspose, &E::transpose},
        {OpKind::kCompare, &E::compare},
        {OpKind::kSelect, &E::select},
        {OpKind::kIndexPerRow, &E::index_per_row},
        {OpKind::kAddIndexPerRow, &E::index_per_row},
        {OpKind::kMoeRoute, &E::moe_route},
        {OpKind::kMoeRouteGrad, &E::moe_route},
        {OpKind::kMoeDispatch, &E::moe_dispatch},
        {OpKind::kMoeCombine, &E::moe_dispatch},
        {OpKind::kMoeCombineWeightsGrad, &E::moe_combine_weights_grad},
        {OpKind::kExpertMatmul, &E::expert_matmul},
        {OpKind::kExpertMatmulGrad, &E::expert_matmul},
        {OpKind::kLayerNorm, &E::layernorm},
        {OpKind::kLayerNormGrad, &E::layernorm_grad},
        {OpKind::kBiasAdd, &E::bias_add},
        {OpKind::kBiasAddGrad, &E::bias_add_grad},
        {OpKind::kMoveToHost, &E::identity},  // the value, in another memory
        {OpKind::kMoveToDevice, &E::identity},
        {OpKind::kRemainder, &E::remainder},
        {OpKind::kDynamicSliceInDim, &E::dynamic_slice},
        {OpKind::kDynamicUpdateSliceInDim, &E::dynamic_slice},
        {OpKind::kMoeTopK, &E::moe_top_k},
        {OpKind::kMoeTopKGrad, &E::moe_top_k},
        {OpKind::kMoePermute, &E::moe_permute},
        {OpKind::kMoePermuteWeightsGrad, &E::moe_permute_weights_grad},
        {OpKind::kRaggedDot, &E::ragged_dot},
        {OpKind::kRaggedDotGrad, &E::ragged_dot},
        {OpKind::kRaggedAllToAll, &E::ragged_all_to_all},
        {OpKind::kMoeEpDispatch, &E::reshape},  // the identity on values
        {OpKind::kMoeEpReturn, &E::reshape},
        {OpKind::kMoeEpPlan, &E::per_device_only},
    },
    &E::unary, &E::unary_grad);

Status check_args(const Program& p, const std::vector<HostTensor>& args) {
  if (args.size() != p.args().size())
    return invalid_argument("interpret {}: expected {} arguments, got {}", p.name(),
                            p.args().size(), args.size());
  for (size_t k = 0; k < args.size(); ++k) {
    const ValueInfo& want = p.value(p.args()[k].value);
    const HostTensor& got = args[k];
    if (got.shape != want.shape || got.dtype != want.dtype)
      return invalid_argument("interpret {}: argument {} '{}' expects {}, got {}[{}]", p.name(), k,
                              want.name, want.type_string(), dtype_name(got.dtype),
                              got.shape.to_list());
    if (static_cast<int64_t>(got.data.size()) != got.shape.numel())
      return invalid_argument("interpret {}: argument {} '{}' has {} elements for shape {}",
                              p.name(), k, want.name, got.data.size(), got.shape.to_string());
  }
  return ok_status();
}

}  // namespace

Result<std::vector<HostTensor>> interpret_all(const Program& p,
                                              const std::vector<HostTensor>& args) {
  ENG_RETURN_IF_ERROR(check_args(p, args));
  std::vector<HostTensor> vals(p.values().size());
  for (size_t k = 0; k < args.size(); ++k) vals[p.args()[k].value] = args[k];
  Evaluator eval(p, vals);
  for (const Instr& in : p.instrs()) ENG_RETURN_IF_ERROR(eval.run(in));
  return vals;
}

Result<std::vector<HostTensor>> interpret(const Program& p, const std::vector<HostTensor>& args) {
  ENG_ASSIGN_OR_RETURN(std::vector<HostTensor> vals, interpret_all(p, args));
  std::vector<HostTensor> outs;
  outs.reserve(p.outputs().size());
  for (const ProgramOutput& o : p.outputs()) outs.push_back(vals[o.value]);
  return outs;
}

}  // namespace eng
