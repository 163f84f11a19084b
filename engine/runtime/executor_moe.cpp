// engine/runtime/executor_moe.cpp: the executor's kernels for the mixture-of-experts ops (op.h's
// kMoeRoute ... kMoeEpPlan): engine/tensor/moe.h's loops in float on f32 or bf16 storage, an
// sgemm or the instruction's bf16 plan per expert, kern::ragged_dot for the grouped matmul.
#include <algorithm>
#include <cstring>

#include "engine/ir/moe_attrs.h"
#include "engine/runtime/executor_args.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/moe.h"

namespace eng::executor_detail {

namespace {
// ---- mixture of experts (op.h; engine/tensor/moe.h's loops in float, sgemm per expert) ----
const float* route_bias(const Args& a) {  // routed_bias: kMoeRoute's input 1, the grad's input 2
  const size_t i = a.in.kind == OpKind::kMoeRoute ? 1 : 2;
  return a.in.inputs.size() > i ? a.f(i) : nullptr;
}

}  // namespace

void run_moe_route(const Args& a) {
  const Shape& x = a.shape(0);
  const bool dbias = a.in.attrs.raw;
  if (a.in.kind == OpKind::kMoeRoute)
    moe::route(a.f(0), route_bias(a), x[0], x[1], x[2], route_params(a.in.attrs), a.out(0),
               a.out(1), a.out(2));
  else
    moe::route_grad(a.f(0), a.f(1), route_bias(a), x[0], x[1], x[2], route_params(a.in.attrs),
                    dbias ? nullptr : a.out(0), dbias ? a.out(0) : nullptr);
}

void run_moe_dispatch(const Args& a) {
  const Shape& c = a.shape(0);
  const int64_t M = a.last_dim(1);
  if (a.in.kind == OpKind::kMoeDispatch)
    moe::dispatch<float>(a.f(0), a.f(1), c[0], c[1], c[2], c[3], M, a.in.attrs.raw, a.out(0));
  else
    moe::combine<float>(a.f(0), a.f(1), c[0], c[1], c[2], c[3], M, a.in.attrs.raw, a.out(0));
}

// out[b, :, e, :] (S, C; rows E*C apart) = dout[b] (S, M) . y[e, b]^T (C, M)^T: one sgemm per
// (row, expert).
void run_moe_combine_weights_grad(const Args& a) {
  const Shape& d = a.shape(0);
  const Shape& y = a.shape(1);
  const int64_t B = d[0], S = d[1], M = d[2], E = y[0], C = y[2];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t e = 0; e < E; ++e)
      kern::matmul(false, true, S, C, M, 1.0f, a.f(0) + b * S * M, M, a.f(1) + (e * B + b) * C * M,
                   M, 0.0f, a.out(0) + b * S * E * C + e * C, E * C);
}

// One sgemm per expert g: (R, K) . (K, N) (trans_b: (N, K)^T); grad: (R, K)^T . (R, N).
void run_expert_matmul(const Args& a) {
  const Shape& as = a.shape(0);
  const Shape& ws = a.shape(1);
  const int r = as.rank();
  const int64_t G = as[0], R = as.prod(1, r - 1), K = as[r - 1];
  if (a.in.kind == OpKind::kExpertMatmulGrad) {
    const int64_t N = ws[r - 1];
    for (int64_t g = 0; g < G; ++g)
      kern::matmul(true, false, K, N, R, 1.0f, a.f(0) + g * R * K, K, a.f(1) + g * R * N, N, 0.0f,
                   a.out(0) + g * K * N, N);
    return;
  }
  const bool tb = a.in.attrs.trans_b;
  const int64_t N = ws[tb ? 1 : 2];
  for (int64_t g = 0; g < G; ++g)
    kern::matmul(false, tb, R, N, K, 1.0f, a.f(0) + g * R * K, K, a.f(1) + g * K * N, tb ? K : N,
                 0.0f, a.out(0) + g * R * N, N);
}

// The dropless dispatch (moe.h's loops in float; bf16 operands run widened through f32).
void run_moe_top_k(const Args& a) {
  const Shape& x = a.shape(0);
  const size_t n_in = a.in.kind == OpKind::kMoeTopK ? 1 : 2;
  const float* bias = a.in.inputs.size() > n_in ? a.f(n_in) : nullptr;
  if (a.in.kind == OpKind::kMoeTopK) {
    moe::top_k(a.f(0), bias, x[0], x[1], x[2], route_params(a.in.attrs), a.out(0), a.iout(1),
               a.iout(2), a.iout(3), a.out(4), a.out(5));
    return;
  }
  const bool dbias = a.in.attrs.raw;
  moe::top_k_grad(a.f(0), a.f(1), bias, x[0], x[1], x[2], route_params(a.in.attrs),
                  dbias ? nullptr : a.out(0), dbias ? a.out(0) : nullptr);
}

void run_moe_permute(const Args& a) {
  const Shape& o = a.shape(1);
  const int64_t k = a.in.attrs.size;
  if (a.in.kind == OpKind::kMoePermuteWeightsGrad) {
    moe::permute_weights_grad<float>(a.f(0), a.f(1), a.ids(3), o[0], o[1] / k, k, a.last_dim(0),
                                     a.out(0));
    return;
  }
  moe::permute<float>(a.f(0), a.ids(1), a.ids(2), a.in.inputs.size() == 4 ? a.f(3) : nullptr, o[0],
                      o[1] / k, k, a.last_dim(0), a.in.attrs.inverse, a.out(0));
}

// kern::ragged_dot: one sgemm per (row b, group e); grad: drhs[e] += lhs_e^T dout_e over b.
void run_ragged_dot(const Args& a) {
  const Shape& l = a.shape(0);
  const Shape& r = a.shape(1);
  const int lr = l.rank();
  const int64_t B = lr == 3 ? l[0] : 1, N = l[lr - 2], K = l[lr - 1], E = a.last_dim(2);
  const bool tb = a.in.attrs.trans_b;
  if (a.in.kind == OpKind::kRaggedDotGrad)
    kern::ragged_dot_grad(a.f(0), a.f(1), a.ids(2), B, N, K, r[lr - 1], E, a.out(0));
  else
    kern::ragged_dot(a.f(0), a.f(1), a.ids(2), B, N, K, r[tb ? 1 : 2], E, tb, a.out(0));
}

// moe_ep_plan (op.h): the index arithmetic of MaxText's expert-parallel dispatch for the device
// of rank q in a group of G, from every member's per-row group sizes c(s, b, e); no allocation.
void run_moe_ep_plan(const Args& a) {
  const Shape& cs = a.shape(0);
  const int64_t G = cs[0], Bl = cs[1], E = cs[2], El = E / G;
  const int64_t N = a.in.attrs.start, R = a.in.attrs.size, q = *a.ids(1);
  const int32_t* c = a.ids(0);
  auto count = [&](int64_t s, int64_t e) {  // member s's rows for expert e
    int64_t n = 0;
    for (int64_t b = 0; b < Bl; ++b) n += c[(s * Bl + b) * E + e];
    return n;
  };
  auto before = [&](int64_t s, int64_t e_end) {  // member s's rows for experts [0, e_end)
    int64_t n = 0;
    for (int64_t e = 0; e < e_end; ++e) n += count(s, e);
    return n;
  };
  auto sends = [&](int64_t s, int64_t r) { return before(s, (r + 1) * El) - before(s, r * El); };
  auto lands = [&](int64_t s, int64_t r) {  // where member s's rows land in member r's buffer
    int64_t n = 0;
    for (int64_t t = 0; t < s; ++t) n += sends(t, r);
    return n;
  };
  int32_t *send_order = a.iout(0), *send_rank = a.iout(1);
  int32_t *io = a.iout(2), *ss = a.iout(3), *oo = a.iout(4);
  int32_t *rio = a.iout(5), *rss = a.iout(6), *roo = a.iout(7);
  int32_t *local_order = a.iout(8), *local_rank = a.iout(9), *groups = a.iout(10);
  for (int64_t r = 0; r < G; ++r) {
    io[r] = static_cast<int32_t>(before(q, r * El));
    ss[r] = static_cast<int32_t>(sends(q, r));
    oo[r] = static_cast<int32_t>(lands(q, r));
    rio[r] = static_cast<int32_t>(lands(r, q));  // back to member r: from where its rows landed
    rss[r] = static_cast<int32_t>(sends(r, q));
    roo[r] = static_cast<int32_t>(before(r, q * El));  // to where they were sent from
  }
  // This device's rows (per row b sorted by expert) in (expert, b) order.
  const int64_t rows = Bl * N;
  std::fill(send_rank, send_rank + rows, -1);
  int64_t j = 0;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t b = 0; b < Bl; ++b) {
      int64_t start = b * N;
      for (int64_t f = 0; f < e; ++f) start += c[(q * Bl + b) * E + f];
      for (int64_t i = 0; i < c[(q * Bl + b) * E + e] && j < rows && start + i < (b + 1) * N; ++i)
        send_order[j++] = static_cast<int32_t>(start + i);
    }
  for (int64_t k = 0; k < j; ++k) send_rank[send_order[k]] = static_cast<int32_t>(k);
  for (int64_t p = 0; p < rows && j < rows; ++p)  // rows no expert claimed (none when sizes sum to N)
    if (send_rank[p] < 0) {
      send_rank[p] = static_cast<int32_t>(j);
      send_order[j++] = static_cast<int32_t>(p);
    }
  // The received rows in (local expert, sender) order, inside the buffer only; then the rest.
  std::fill(groups, groups + El, 0);
  int64_t v = 0;
  for (int64_t le = 0; le < El; ++le)
    for (int64_t s = 0; s < G; ++s) {
      const int64_t e = q * El + le;
      const int64_t at = lands(s, q) + before(s, e) - before(s, q * El);
      for (int64_t i = 0; i < count(s, e) && at + i < R; ++i) {
        local_order[v++] = static_cast<int32_t>(at + i);
        ++groups[le];
      }
    }
  for (int64_t p = v; p < R; ++p) local_order[p] = static_cast<int32_t>(p);
  for (int64_t k = 0; k < R; ++k) local_rank[local_order[k]] = static_cast<int32_t>(k);
}

// The bf16 forms (program.h's kBf16Kernels): the routing, dispatch and combine loops read bf16
// into float and round each bf16 result once; the per-expert GEMMs run the instruction's
// Bf16MatmulPlan (one expert's or one (row, expert)'s product, bf16_gemm_shape below) at each
// block's offset, f32 accumulation, C rounded once.
void run_moe_route_bf16(const Args& a) {  // logits, combine, dcombine, dlogits bf16; the rest f32
  const Shape& x = a.shape(0);
  const bool dbias = a.in.attrs.raw;
  if (a.in.kind == OpKind::kMoeRoute)
    moe::route(a.h(0), route_bias(a), x[0], x[1], x[2], route_params(a.in.attrs), a.hout(0),
               a.out(1), a.out(2));
  else
    moe::route_grad(a.h(0), a.h(1), route_bias(a), x[0], x[1], x[2], route_params(a.in.attrs),
                    dbias ? nullptr : a.hout(0), dbias ? a.out(0) : nullptr);
}

void run_moe_dispatch_bf16(const Args& a) {
  const Shape& c = a.shape(0);
  const int64_t M = a.last_dim(1);
  if (a.in.kind == OpKind::kMoeDispatch)
    moe::dispatch<float>(a.h(0), a.h(1), c[0], c[1], c[2], c[3], M, a.in.attrs.raw, a.hout(0));
  else
    moe::combine<float>(a.h(0), a.h(1), c[0], c[1], c[2], c[3], M, a.in.attrs.raw, a.hout(0));
}

void run_moe_combine_weights_grad_bf16(const Args& a) {
  ENG_CHECK(a.plan != nullptr, "executor: bf16 {} without a plan", op_name(a.in.kind));
  const Shape& d = a.shape(0);
  const Shape& y = a.shape(1);
  const int64_t B = d[0], S = d[1], M = d[2], E = y[0], C = y[2];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t e = 0; e < E; ++e)
      a.plan->run(a.h(0) + b * S * M, a.h(1) + (e * B + b) * C * M,
                  a.hout(0) + b * S * E * C + e * C);
}

void run_expert_matmul_bf16(const Args& a) {
  ENG_CHECK(a.plan != nullptr, "executor: bf16 {} without a plan", op_name(a.in.kind));
  const Shape& as = a.shape(0);
  const Shape& ws = a.shape(1);
  const int r = as.rank();
  const int64_t G = as[0], R = as.prod(1, r - 1), K = as[r - 1];
  const bool grad = a.in.kind == OpKind::kExpertMatmulGrad;
  const int64_t N = grad ? ws[r - 1] : ws[a.in.attrs.trans_b ? 1 : 2];
  for (int64_t g = 0; g < G; ++g)
    a.plan->run(a.h(0) + g * R * K, a.h(1) + g * (grad ? R : K) * N,
                a.hout(0) + g * (grad ? K : R) * N);
}

}  // namespace eng::executor_detail
