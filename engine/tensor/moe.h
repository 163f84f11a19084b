// engine/tensor/moe.h: the mixture-of-experts routing, dispatch and combine loops (op.h's
// kMoeRoute, kMoeRouteGrad, kMoeDispatch, kMoeCombine, kMoeCombineWeightsGrad; the dropless
// dispatch's kMoeTopK, kMoeTopKGrad, kMoePermute, kMoePermuteWeightsGrad, kRaggedDot), templated on
// the math type T and the storage type X of the activations: the executor runs them in float
// on float or bf16 storage (X = uint16_t: each value read into T exactly, each result computed
// in T and rounded to bf16 once, as it is stored), the reference interpreter in double.
// MaxText's layers/moe.py (get_topk, generate_masks, load_balance_loss, dense_matmul's
// einsums) is the specification; the comments name its steps.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "engine/tensor/dtype.h"

namespace eng::moe {

// An X element as T, and a T result stored as X (bf16: rounded once, f32_to_bf16).
template <class T, class X>
T ld(X x) {
  if constexpr (std::is_same_v<X, uint16_t>) return static_cast<T>(bf16_to_f32(x));
  else return static_cast<T>(x);
}
template <class X, class T>
X st(T v) {
  if constexpr (std::is_same_v<X, uint16_t>) return f32_to_bf16(static_cast<float>(v));
  else return static_cast<X>(v);
}
// One row of n X elements read into row (T).
template <class T, class X>
void ld_row(const X* x, int64_t n, std::vector<T>& row) {
  row.resize(n);
  for (int64_t i = 0; i < n; ++i) row[i] = ld<T>(x[i]);
}

struct RouteParams {
  int64_t k = 1;         // num_experts_per_tok
  int64_t capacity = 1;  // C: slots per expert per sequence
  int score_func = 0;    // 0 none, 1 softmax, 2 sigmoid (routed_score_func)
  bool deepseek_weights = false;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  double lb_scale = 0.0;  // load_balance_loss_weight * E / (B * S^2), B and S global
};

// One token's routing: scores s (E), the chosen experts in rank order and their weights.
// With a router bias (routed_bias) the choice and the load-balance probabilities use
// g = s + bias (MaxText's gate_logits), the weights s (its pre_bias_logits: deepseek3's
// choice-only bias); without one g = s.
template <class T>
struct Token {
  std::vector<T> s, g, p;      // scores; s + bias; softmax(g) (the load-balance probabilities)
  std::vector<int64_t> idx;    // k chosen experts, largest score first, ties lower first
  std::vector<T> w0, w;        // weights before / after norm_topk_prob
  std::vector<T> top;          // the k chosen scores (route_token's working row)
  T w0_sum = 0;
};

// The routing kernels' working rows, one set per thread and math type (thread_local: their
// capacity outlives a call, so a training step's routing allocates nothing after the first).
template <class T>
struct RouteScratch {
  Token<T> t;
  std::vector<T> row, count_t, ds, dw, dt, w;
  std::vector<double> count, prob;
  std::vector<int64_t> idx, slot, next, arrivals;
};
template <class T>
RouteScratch<T>& route_scratch() {
  thread_local RouteScratch<T> sc;
  return sc;
}

template <class T>
void softmax(const T* x, T* y, int64_t n) {
  T m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  T sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (y[i] = std::exp(x[i] - m));
  for (int64_t i = 0; i < n; ++i) y[i] /= sum;
}

template <class T>
void route_token(const T* logits, const T* bias, int64_t E, const RouteParams& p, Token<T>& t) {
  t.s.assign(logits, logits + E);
  if (p.score_func == 1) softmax(logits, t.s.data(), E);
  if (p.score_func == 2)
    for (int64_t e = 0; e < E; ++e) t.s[e] = T(1) / (T(1) + std::exp(-logits[e]));
  t.g = t.s;
  if (bias != nullptr)
    for (int64_t e = 0; e < E; ++e) t.g[e] += bias[e];
  t.p.resize(E);
  softmax(t.g.data(), t.p.data(), E);
  // jax.lax.top_k: descending, stable (equal values keep the lower index first): the k largest
  // kept in order while the experts are read in index order, each inserted after every chosen
  // one that is not smaller (std::stable_sort's order, without its temporary buffer).
  t.idx.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = static_cast<int64_t>(t.idx.size());
    if (n == p.k && !(t.g[e] > t.g[t.idx[n - 1]])) continue;
    int64_t pos = n;
    while (pos > 0 && t.g[e] > t.g[t.idx[pos - 1]]) --pos;
    if (n < p.k) t.idx.push_back(e);
    for (int64_t q = static_cast<int64_t>(t.idx.size()) - 1; q > pos; --q) t.idx[q] = t.idx[q - 1];
    t.idx[pos] = e;
  }
  t.w0.resize(p.k);
  t.top.resize(p.k);
  for (int64_t j = 0; j < p.k; ++j) t.top[j] = t.s[t.idx[j]];
  if (!p.deepseek_weights) {  // softmax over the top-k values (mixtral, qwen3)
    softmax(t.top.data(), t.w0.data(), p.k);
  } else {  // deepseek_scale_weights
    T sum = 0;
    for (T v : t.top) sum += v;
    for (int64_t j = 0; j < p.k; ++j)
      t.w0[j] = (p.score_func == 2 ? t.top[j] / sum : t.top[j]) * T(p.routed_scaling_factor);
  }
  t.w0_sum = 0;
  for (T v : t.w0) t.w0_sum += v;
  t.w = t.w0;
  if (p.norm_topk_prob)
    for (T& v : t.w) v /= t.w0_sum;
}

// The slot of each (s, rank) choice in row b, -1 when dropped (generate_masks: a cumsum over
// the fused (S, k) axis per expert; arrival j takes slot j - 1 while j <= C). arrivals: scratch.
inline void assign_slots(const std::vector<int64_t>& idx, int64_t S, int64_t k, int64_t E,
                         int64_t C, std::vector<int64_t>& arrivals, std::vector<int64_t>& slot) {
  arrivals.assign(E, 0);
  slot.resize(S * k);
  for (int64_t i = 0; i < S * k; ++i) {
    const int64_t c = arrivals[idx[i]]++;
    slot[i] = c < C ? c : -1;
  }
}

// Routes the S tokens of one row (logits (S,E)): sc.idx (S*k) their choices in rank order,
// sc.count (E) the choices per expert, sc.prob (E) the summed load-balance probabilities;
// on_token(s, token) sees each token's routing. The forward pass of route and top_k, and the
// counting pass of their gradients.
template <class T, class X, class F>
void route_row(const X* logits, const T* bias, int64_t S, int64_t E, const RouteParams& p,
               RouteScratch<T>& sc, F&& on_token) {
  sc.idx.resize(S * p.k);
  sc.count.assign(E, 0.0);
  sc.prob.assign(E, 0.0);
  for (int64_t s = 0; s < S; ++s) {
    ld_row(logits + s * E, E, sc.row);
    route_token(sc.row.data(), bias, E, p, sc.t);
    for (int64_t j = 0; j < p.k; ++j) {
      sc.idx[s * p.k + j] = sc.t.idx[j];
      sc.count[sc.t.idx[j]] += 1;
    }
    for (int64_t e = 0; e < E; ++e) sc.prob[e] += static_cast<double>(sc.t.p[e]);
    on_token(s, sc.t);
  }
}

// combine (B,S,E,C), lb (), load (2,E): op.h kMoeRoute. bias (E) or nullptr. logits and
// combine in X, the rest in T.
template <class T, class X>
void route(const X* logits, const T* bias, int64_t B, int64_t S, int64_t E, const RouteParams& p,
           X* combine, T* lb, T* load) {
  const int64_t C = p.capacity, k = p.k;
  std::fill(combine, combine + B * S * E * C, st<X>(T(0)));
  std::fill(load, load + 2 * E, T(0));
  double loss = 0;
  RouteScratch<T>& sc = route_scratch<T>();
  sc.w.resize(S * k);
  for (int64_t b = 0; b < B; ++b) {
    route_row(logits + b * S * E, bias, S, E, p, sc, [&](int64_t s, const Token<T>& t) {
      std::copy(t.w.begin(), t.w.end(), sc.w.begin() + s * k);
    });
    assign_slots(sc.idx, S, k, E, C, sc.arrivals, sc.slot);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = sc.idx[s * k + j], c = sc.slot[s * k + j];
        load[e] += T(1);
        if (c < 0) {
          load[E + e] += T(1);
          continue;
        }
        combine[((b * S + s) * E + e) * C + c] = st<X>(sc.w[s * k + j]);
      }
    for (int64_t e = 0; e < E; ++e) loss += sc.count[e] * sc.prob[e];
  }
  *lb = static_cast<T>(p.lb_scale * loss);
}

// One token's backward: dw (k) the cotangent of its weights in rank order (overwritten),
// count (E) its row's top-k choices per expert. Writes dx (E) (dbias null) or adds the
// load-balance part to dbias (E).
template <class T, class X>
void token_grad(const Token<T>& t, std::vector<T>& dw, const std::vector<T>& count, int64_t E,
                const RouteParams& p, std::vector<T>& ds, std::vector<T>& dt, X* dx, T* dbias) {
  const int64_t k = p.k;
  std::fill(ds.begin(), ds.end(), T(0));
  if (p.norm_topk_prob) {  // w = w0 / sum(w0)
    T dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += t.w[j] * dw[j];
    for (int64_t j = 0; j < k; ++j) dw[j] = (dw[j] - dot) / t.w0_sum;
  }
  if (!p.deepseek_weights) {  // w0 = softmax(top)
    T dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += t.w0[j] * dw[j];
    for (int64_t j = 0; j < k; ++j) dt[j] = t.w0[j] * (dw[j] - dot);
  } else if (p.score_func == 2) {  // w0 = rsf * top / sum(top)
    T sum = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j) sum += t.s[t.idx[j]];
    for (int64_t j = 0; j < k; ++j) dot += t.s[t.idx[j]] / sum * dw[j];
    for (int64_t j = 0; j < k; ++j) dt[j] = T(p.routed_scaling_factor) * (dw[j] - dot) / sum;
  } else {
    for (int64_t j = 0; j < k; ++j) dt[j] = T(p.routed_scaling_factor) * dw[j];
  }
  for (int64_t j = 0; j < k; ++j) ds[t.idx[j]] += dt[j];
  // load balance: d lb / d p[e] = lb_scale * count[b,e]; p = softmax(g), g = s + bias.
  T dot = 0;
  for (int64_t e = 0; e < E; ++e) dot += t.p[e] * T(p.lb_scale) * count[e];
  if (dbias != nullptr) {
    for (int64_t e = 0; e < E; ++e) dbias[e] += t.p[e] * (T(p.lb_scale) * count[e] - dot);
    return;
  }
  for (int64_t e = 0; e < E; ++e) ds[e] += t.p[e] * (T(p.lb_scale) * count[e] - dot);
  // the score function
  if (p.score_func == 0) {
    for (int64_t e = 0; e < E; ++e) dx[e] = st<X>(ds[e]);
  } else if (p.score_func == 1) {
    T d = 0;
    for (int64_t e = 0; e < E; ++e) d += t.s[e] * ds[e];
    for (int64_t e = 0; e < E; ++e) dx[e] = st<X>(t.s[e] * (ds[e] - d));
  } else {
    for (int64_t e = 0; e < E; ++e) dx[e] = st<X>(ds[e] * t.s[e] * (T(1) - t.s[e]));
  }
}

// The second pass of a row's backward (after route_row counted its choices): routes each
// token again, fill_dw(s, token, dw) sets the cotangent of its k weights, and token_grad
// writes dlogits' row (S,E) or, with dbias non-null, adds to dbias.
template <class T, class X, class F>
void grad_tokens(const X* logits, const T* bias, int64_t S, int64_t E, const RouteParams& p,
                 RouteScratch<T>& sc, X* dlogits, T* dbias, F&& fill_dw) {
  sc.count_t.resize(E);
  for (int64_t e = 0; e < E; ++e) sc.count_t[e] = static_cast<T>(sc.count[e]);
  sc.ds.resize(E);
  sc.dw.resize(p.k);
  sc.dt.resize(p.k);
  for (int64_t s = 0; s < S; ++s) {
    ld_row(logits + s * E, E, sc.row);
    route_token(sc.row.data(), bias, E, p, sc.t);
    fill_dw(s, sc.t, sc.dw);
    token_grad(sc.t, sc.dw, sc.count_t, E, p, sc.ds, sc.dt,
               dbias != nullptr ? nullptr : dlogits + s * E, dbias);
  }
}

// dlogits (B,S,E) from dcombine (B,S,E,C) and the load-balance cotangent folded into
// p.lb_scale: op.h kMoeRouteGrad. With dbias (E) non-null, that instead (dlogits unused): the
// load-balance part only (the weights read s, not s + bias), summed over the tokens. logits,
// dcombine and dlogits in X, the bias and its gradient in T.
template <class T, class X>
void route_grad(const X* logits, const X* dcombine, const T* bias, int64_t B, int64_t S,
                int64_t E, const RouteParams& p, X* dlogits, T* dbias) {
  if (dbias != nullptr) std::fill(dbias, dbias + E, T(0));
  const int64_t C = p.capacity, k = p.k;
  RouteScratch<T>& sc = route_scratch<T>();
  for (int64_t b = 0; b < B; ++b) {
    const X* row = logits + b * S * E;
    route_row(row, bias, S, E, p, sc, [](int64_t, const Token<T>&) {});
    assign_slots(sc.idx, S, k, E, C, sc.arrivals, sc.slot);
    grad_tokens(row, bias, S, E, p, sc, dbias ? nullptr : dlogits + b * S * E, dbias,
                [&](int64_t s, const Token<T>& t, std::vector<T>& dw) {
                  for (int64_t j = 0; j < k; ++j) {  // combine: the kept choices' weights
                    const int64_t c = sc.slot[s * k + j];
                    dw[j] = c < 0 ? T(0) : ld<T>(dcombine[((b * S + s) * E + t.idx[j]) * C + c]);
                  }
                });
  }
}

template <class T>
T gate(T v, bool mask) {
  return mask ? (v != T(0) ? T(1) : T(0)) : v;
}

// dispatch and combine sum each output row in T on the stack, kRowChunk elements at a time
// (a training step allocates nothing); every element's sum runs in the same order whatever
// the chunking.
constexpr int64_t kRowChunk = 256;

// out (E,B,C,M) = sum_s g(combine[b,s,e,c]) x[b,s,:]: op.h kMoeDispatch. Each output row
// summed in T over s in order, stored once.
template <class T, class X>
void dispatch(const X* combine, const X* x, int64_t B, int64_t S, int64_t E, int64_t C,
              int64_t M, bool mask, X* out) {
  T acc[kRowChunk];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t e = 0; e < E; ++e)
      for (int64_t c = 0; c < C; ++c) {
        X* o = out + ((e * B + b) * C + c) * M;
        for (int64_t m0 = 0; m0 < M; m0 += kRowChunk) {
          const int64_t n = std::min(kRowChunk, M - m0);
          std::fill(acc, acc + n, T(0));
          for (int64_t s = 0; s < S; ++s) {
            const T g = gate(ld<T>(combine[((b * S + s) * E + e) * C + c]), mask);
            if (g == T(0)) continue;
            const X* xs = x + (b * S + s) * M + m0;
            for (int64_t m = 0; m < n; ++m) acc[m] += g * ld<T>(xs[m]);
          }
          for (int64_t m = 0; m < n; ++m) o[m0 + m] = st<X>(acc[m]);
        }
      }
}

// out (B,S,M) = sum_{e,c} g(combine[b,s,e,c]) y[e,b,c,:]: op.h kMoeCombine. Each output row
// summed in T over (e, c) in order, stored once.
template <class T, class X>
void combine(const X* comb, const X* y, int64_t B, int64_t S, int64_t E, int64_t C, int64_t M,
             bool mask, X* out) {
  T acc[kRowChunk];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      X* o = out + (b * S + s) * M;
      for (int64_t m0 = 0; m0 < M; m0 += kRowChunk) {
        const int64_t n = std::min(kRowChunk, M - m0);
        std::fill(acc, acc + n, T(0));
        for (int64_t e = 0; e < E; ++e)
          for (int64_t c = 0; c < C; ++c) {
            const T g = gate(ld<T>(comb[((b * S + s) * E + e) * C + c]), mask);
            if (g == T(0)) continue;
            const X* ys = y + ((e * B + b) * C + c) * M + m0;
            for (int64_t m = 0; m < n; ++m) acc[m] += g * ld<T>(ys[m]);
          }
        for (int64_t m = 0; m < n; ++m) o[m0 + m] = st<X>(acc[m]);
      }
    }
}

// out (B,S,E,C) = <dout[b,s,:], y[e,b,c,:]>: op.h kMoeCombineWeightsGrad (the reference; the
// executor runs one GEMM per (row, expert)).
template <class T>
void combine_weights_grad(const T* dout, const T* y, int64_t B, int64_t S, int64_t E, int64_t C,
                          int64_t M, T* out) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t e = 0; e < E; ++e)
        for (int64_t c = 0; c < C; ++c) {
          const T* d = dout + (b * S + s) * M;
          const T* ys = y + ((e * B + b) * C + c) * M;
          T acc = 0;
          for (int64_t m = 0; m < M; ++m) acc += d[m] * ys[m];
          out[((b * S + s) * E + e) * C + c] = acc;
        }
}

// out (G,R,N) = a (G,R,K) . w (G,K,N) (or w (G,N,K) transposed): op.h kExpertMatmul (the
// reference; the executor uses sgemm per expert).
template <class T>
void expert_matmul(const T* a, const T* w, int64_t G, int64_t R, int64_t K, int64_t N,
                   bool trans_b, T* out) {
  for (int64_t g = 0; g < G; ++g)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t n = 0; n < N; ++n) {
        T acc = 0;
        for (int64_t q = 0; q < K; ++q)
          acc += a[(g * R + r) * K + q] *
                 (trans_b ? w[(g * N + n) * K + q] : w[(g * K + q) * N + n]);
        out[(g * R + r) * N + n] = acc;
      }
}

// dw (G,K,N) = a (G,R,K)^T . dy (G,R,N): op.h kExpertMatmulGrad.
template <class T>
void expert_matmul_grad(const T* a, const T* dy, int64_t G, int64_t R, int64_t K, int64_t N,
                        T* dw) {
  std::fill(dw, dw + G * K * N, T(0));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t q = 0; q < K; ++q) {
        const T av = a[(g * R + r) * K + q];
        for (int64_t n = 0; n < N; ++n) dw[(g * K + q) * N + n] += av * dy[(g * R + r) * N + n];
      }
}

// ---- the dropless dispatch (op.h kMoeTopK ... kRaggedDotGrad; MaxText's sparse_matmul) ----
// Index arrays are I: int32_t in the executor, double in the interpreter.

// weights (B,S,k) in X; order, rank (B,S*k), group_sizes (B,E) in I; lb (), load (2,E) in T:
// op.h kMoeTopK. order sorts row b's choices i = s*k + r by expert, stably (a counting sort:
// jnp.argsort's order), rank[order[j]] = j.
template <class T, class X, class I>
void top_k(const X* logits, const T* bias, int64_t B, int64_t S, int64_t E, const RouteParams& p,
           X* weights, I* order, I* rank, I* group_sizes, T* lb, T* load) {
  const int64_t k = p.k, N = S * k;
  std::fill(load, load + 2 * E, T(0));
  double loss = 0;
  RouteScratch<T>& sc = route_scratch<T>();
  sc.next.resize(E);
  for (int64_t b = 0; b < B; ++b) {
    route_row(logits + b * S * E, bias, S, E, p, sc, [&](int64_t s, const Token<T>& t) {
      for (int64_t j = 0; j < k; ++j) weights[(b * S + s) * k + j] = st<X>(t.w[j]);
    });
    int64_t at = 0;
    for (int64_t e = 0; e < E; ++e) {
      sc.next[e] = at;
      at += static_cast<int64_t>(sc.count[e]);
      group_sizes[b * E + e] = static_cast<I>(sc.count[e]);
      load[e] += static_cast<T>(sc.count[e]);
      loss += sc.count[e] * sc.prob[e];
    }
    for (int64_t i = 0; i < N; ++i) {
      const int64_t j = sc.next[sc.idx[i]]++;
      order[b * N + j] = static_cast<I>(i);
      rank[b * N + i] = static_cast<I>(j);
    }
  }
  *lb = static_cast<T>(p.lb_scale * loss);
}

// dlogits (B,S,E) (or dbias (E)) from dweights (B,S,k): op.h kMoeTopKGrad.
template <class T, class X>
void top_k_grad(const X* logits, const X* dweights, const T* bias, int64_t B, int64_t S,
                int64_t E, const RouteParams& p, X* dlogits, T* dbias) {
  if (dbias != nullptr) std::fill(dbias, dbias + E, T(0));
  const int64_t k = p.k;
  RouteScratch<T>& sc = route_scratch<T>();
  for (int64_t b = 0; b < B; ++b) {
    const X* row = logits + b * S * E;
    route_row(row, bias, S, E, p, sc, [](int64_t, const Token<T>&) {});
    grad_tokens(row, bias, S, E, p, sc, dbias ? nullptr : dlogits + b * S * E, dbias,
                [&](int64_t s, const Token<T>&, std::vector<T>& dw) {
                  for (int64_t j = 0; j < k; ++j) dw[j] = ld<T>(dweights[(b * S + s) * k + j]);
                });
  }
}

// An index read from I as a row in [0, n), or -1 outside it.
template <class I>
int64_t row_index(I v, int64_t n) {
  const double d = static_cast<double>(v);
  return d >= 0 && d < static_cast<double>(n) ? static_cast<int64_t>(d) : -1;
}

// op.h kMoePermute. Forward: x (B,S,M) -> out (B,N,M); inverse: x (B,N,M) -> out (B,S,M).
// weights (B,S,k) or null. Each output row computed in T, stored once.
template <class T, class X, class I>
void permute(const X* x, const I* order, const I* rank, const X* weights, int64_t B, int64_t S,
             int64_t k, int64_t M, bool inverse, X* out) {
  const int64_t N = S * k;
  T acc[kRowChunk];
  for (int64_t b = 0; b < B; ++b) {
    if (!inverse) {
      for (int64_t j = 0; j < N; ++j) {
        X* o = out + (b * N + j) * M;
        const int64_t i = row_index(order[b * N + j], N);
        if (i < 0) {
          std::fill(o, o + M, st<X>(T(0)));
          continue;
        }
        const T w = weights ? ld<T>(weights[b * N + i]) : T(1);
        const X* xs = x + (b * S + i / k) * M;
        for (int64_t m = 0; m < M; ++m) o[m] = weights ? st<X>(w * ld<T>(xs[m])) : xs[m];
      }
      continue;
    }
    for (int64_t s = 0; s < S; ++s) {
      X* o = out + (b * S + s) * M;
      for (int64_t m0 = 0; m0 < M; m0 += kRowChunk) {
        const int64_t n = std::min(kRowChunk, M - m0);
        std::fill(acc, acc + n, T(0));
        for (int64_t r = 0; r < k; ++r) {
          const int64_t j = row_index(rank[b * N + s * k + r], N);
          if (j < 0) continue;
          const T w = weights ? ld<T>(weights[b * N + s * k + r]) : T(1);
          const X* ys = x + (b * N + j) * M + m0;
          for (int64_t m = 0; m < n; ++m) acc[m] += w * ld<T>(ys[m]);
        }
        for (int64_t m = 0; m < n; ++m) o[m0 + m] = st<X>(acc[m]);
      }
    }
  }
}

// out (B,S,k)[b,s,r] = <a[b,s], y[b, rank[b,s*k+r]]>: op.h kMoePermuteWeightsGrad.
template <class T, class X, class I>
void permute_weights_grad(const X* a, const X* y, const I* rank, int64_t B, int64_t S, int64_t k,
                          int64_t M, X* out) {
  const int64_t N = S * k;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < N; ++i) {
      const int64_t j = row_index(rank[b * N + i], N);
      T acc = 0;
      if (j >= 0) {
        const X* as = a + (b * S + i / k) * M;
        const X* ys = y + (b * N + j) * M;
        for (int64_t m = 0; m < M; ++m) acc += ld<T>(as[m]) * ld<T>(ys[m]);
      }
      out[b * N + i] = st<X>(acc);
    }
}

// Row b's groups: group e is rows [start[e], end[e]) (op.h kRaggedDot: cut at N, negative 0).
template <class I>
void group_bounds(const I* group_sizes, int64_t E, int64_t N, std::vector<int64_t>& start,
                  std::vector<int64_t>& end) {
  start.resize(E);
  end.resize(E);
  int64_t at = 0;
  for (int64_t e = 0; e < E; ++e) {
    const double g = static_cast<double>(group_sizes[e]);
    const int64_t size = g > 0 ? static_cast<int64_t>(std::min<double>(g, static_cast<double>(N)))
                               : 0;
    start[e] = at;
    at = std::min(N, at + size);
    end[e] = at;
  }
}

// out (B,N,P) = per row b and group e: lhs rows . rhs[e] (K,P) (trans_b: rhs[e] (P,K)^T);
// rows in no group zero: op.h kRaggedDot (the reference; the executor runs sgemm per group).
template <class T, class I>
void ragged_dot(const T* lhs, const T* rhs, const I* group_sizes, int64_t B, int64_t N,
                int64_t K, int64_t P, int64_t E, bool trans_b, T* out) {
  std::fill(out, out + B * N * P, T(0));
  std::vector<int64_t> start, end;
  for (int64_t b = 0; b < B; ++b) {
    group_bounds(group_sizes + b * E, E, N, start, end);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t n = start[e]; n < end[e]; ++n)
        for (int64_t c = 0; c < P; ++c) {
          T acc = 0;
          for (int64_t q = 0; q < K; ++q)
            acc += lhs[(b * N + n) * K + q] *
                   (trans_b ? rhs[(e * P + c) * K + q] : rhs[(e * K + q) * P + c]);
          out[(b * N + n) * P + c] = acc;
        }
  }
}

// drhs (E,K,P) = sum_b per group lhs_e^T dout_e: op.h kRaggedDotGrad (the reference).
template <class T, class I>
void ragged_dot_grad(const T* lhs, const T* dout, const I* group_sizes, int64_t B, int64_t N,
                     int64_t K, int64_t P, int64_t E, T* drhs) {
  std::fill(drhs, drhs + E * K * P, T(0));
  std::vector<int64_t> start, end;
  for (int64_t b = 0; b < B; ++b) {
    group_bounds(group_sizes + b * E, E, N, start, end);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t n = start[e]; n < end[e]; ++n)
        for (int64_t q = 0; q < K; ++q) {
          const T l = lhs[(b * N + n) * K + q];
          for (int64_t c = 0; c < P; ++c) drhs[(e * K + q) * P + c] += l * dout[(b * N + n) * P + c];
        }
  }
}

}  // namespace eng::moe
