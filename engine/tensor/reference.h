// engine/tensor/reference.h: naive kernels, the oracles for kernels.h and the arithmetic of
// the reference interpreter (engine/ir/interpret.h). Templated on the float type so that
// gradient checks run in double. Written for clarity, never for speed: one loop nest each,
// the formula from kernels.h's comment and nothing else.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/tensor/rope_form.h"

namespace eng::ref {

template <typename T>
void matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
            int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      T acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        T a = trans_a ? A[k * lda + m] : A[m * lda + k];
        T b = trans_b ? B[n * ldb + k] : B[k * ldb + n];
        acc += a * b;
      }
      C[m * ldc + n] = alpha * acc + (beta == T(0) ? T(0) : beta * C[m * ldc + n]);
    }
}

template <typename T>
void embed_lookup(const T* table, const int32_t* ids, T* out, int64_t N, int64_t V, int64_t E) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e)
      out[n * E + e] = (ids[n] >= 0 && ids[n] < V) ? table[ids[n] * E + e] : T(0);
}

template <typename T>
void embed_lookup_grad(const int32_t* ids, const T* dy, T* dtable, int64_t N, int64_t V, int64_t E) {
  for (int64_t i = 0; i < V * E; ++i) dtable[i] = 0;
  for (int64_t n = 0; n < N; ++n)
    if (ids[n] >= 0 && ids[n] < V)
      for (int64_t e = 0; e < E; ++e) dtable[ids[n] * E + e] += dy[n * E + e];
}

template <typename T>
void one_hot(const int32_t* ids, T* out, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) out[n * V + v] = (ids[n] == v) ? T(1) : T(0);
}

template <typename T>
void rmsnorm_forward(const T* x, const T* scale, T* y, T* rstd, int64_t N, int64_t E, T eps) {
  for (int64_t n = 0; n < N; ++n) {
    T ms = 0;
    for (int64_t e = 0; e < E; ++e) ms += x[n * E + e] * x[n * E + e];
    ms /= T(E);
    rstd[n] = T(1) / std::sqrt(ms + eps);
    for (int64_t e = 0; e < E; ++e) y[n * E + e] = x[n * E + e] * rstd[n] * scale[e];
  }
}

// y = x * r * s with r = (mean(x^2) + eps)^(-1/2):
//   dscale[e] = sum_n dy * x * r;  dx = r * (dy*s) - x * r^3 / E * sum_e(dy*s*x)
template <typename T>
void rmsnorm_backward(const T* x, const T* scale, const T* rstd, const T* dy, T* dx, T* dscale,
                      int64_t N, int64_t E) {
  for (int64_t e = 0; e < E; ++e) dscale[e] = 0;
  for (int64_t n = 0; n < N; ++n) {
    T r = rstd[n], dot = 0;
    for (int64_t e = 0; e < E; ++e) dot += dy[n * E + e] * scale[e] * x[n * E + e];
    for (int64_t e = 0; e < E; ++e) {
      dscale[e] += dy[n * E + e] * x[n * E + e] * r;
      dx[n * E + e] = r * dy[n * E + e] * scale[e] - x[n * E + e] * r * r * r * dot / T(E);
    }
  }
}

// MaxText's Gpt3LayerNorm (kernels.h): y = (x - m) r (1 + s) + b, r = (var + eps)^(-1/2).
template <typename T>
void layernorm_forward(const T* x, const T* scale, const T* bias, T* y, T* mean, T* rstd,
                       int64_t N, int64_t E, T eps) {
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * E;
    T m = 0, v = 0;
    for (int64_t e = 0; e < E; ++e) m += xr[e];
    m /= T(E);
    for (int64_t e = 0; e < E; ++e) v += (xr[e] - m) * (xr[e] - m);
    const T r = T(1) / std::sqrt(v / T(E) + eps);
    mean[n] = m;
    rstd[n] = r;
    for (int64_t e = 0; e < E; ++e) y[n * E + e] = (xr[e] - m) * r * (T(1) + scale[e]) + bias[e];
  }
}

// xhat = (x - m) r, g = dy (1 + s): dx = r (g - mean(g) - xhat mean(g xhat));
// dscale = sum_n dy xhat; dbias = sum_n dy.
template <typename T>
void layernorm_backward(const T* x, const T* scale, const T* mean, const T* rstd, const T* dy,
                        T* dx, T* dscale, T* dbias, int64_t N, int64_t E) {
  for (int64_t e = 0; e < E; ++e) dscale[e] = dbias[e] = 0;
  for (int64_t n = 0; n < N; ++n) {
    const T m = mean[n], r = rstd[n];
    T mg = 0, mgx = 0;
    for (int64_t e = 0; e < E; ++e) {
      const T g = dy[n * E + e] * (T(1) + scale[e]), xh = (x[n * E + e] - m) * r;
      mg += g;
      mgx += g * xh;
    }
    mg /= T(E);
    mgx /= T(E);
    for (int64_t e = 0; e < E; ++e) {
      const T g = dy[n * E + e] * (T(1) + scale[e]), xh = (x[n * E + e] - m) * r;
      dx[n * E + e] = r * (g - mg - xh * mgx);
      dscale[e] += dy[n * E + e] * xh;
      dbias[e] += dy[n * E + e];
    }
  }
}

// dbias[f] = sum over rows of dy[row, f] (dy viewed as (rows, F)).
template <typename T>
void bias_add_grad(const T* dy, T* dbias, int64_t rows, int64_t F) {
  for (int64_t f = 0; f < F; ++f) dbias[f] = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t f = 0; f < F; ++f) dbias[f] += dy[r * F + f];
}

template <typename T>
void rope(const T* x, const int32_t* pos, T* y, int64_t B, int64_t T_, int64_t H, int64_t D,
          T min_ts, T max_ts, bool inverse, kern::RopeForm form = {}) {
  int64_t half = D / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const T* xr = x + ((b * T_ + t) * H + h) * D;
        T* yr = y + ((b * T_ + t) * H + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          T ts = kern::rope_timescale<T>(i, D, min_ts, max_ts, form.use_scale);
          T ang = T(pos[b * T_ + t]) / ts;
          T c = std::cos(ang), s = inverse ? -std::sin(ang) : std::sin(ang);
          const int64_t a = kern::rope_first(i, D, form), e = kern::rope_second(i, D, form);
          T x1 = xr[a], x2 = xr[e];
          yr[a] = x1 * c - x2 * s;
          yr[e] = x2 * c + x1 * s;
        }
      }
}

// Causal attention; with segment_ids (B, T) key u is visible to query t only when
// segment_ids[b,u] == segment_ids[b,t] too (kernels.h).
template <typename T>
void attention_forward(const T* q, const T* k, const T* v, T* o, T* lse, int64_t B, int64_t T_,
                       int64_t H, int64_t D, T scale, const int32_t* segment_ids = nullptr) {
  std::vector<T> s(T_);
  auto at = [&](int64_t b, int64_t t, int64_t h) { return ((b * T_ + t) * H + h) * D; };
  auto visible = [&](int64_t b, int64_t t, int64_t u) {
    return segment_ids == nullptr || segment_ids[b * T_ + u] == segment_ids[b * T_ + t];
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T_; ++t) {
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t u = 0; u <= t; ++u) {
          if (!visible(b, t, u)) continue;
          T dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[at(b, t, h) + d] * k[at(b, u, h) + d];
          s[u] = scale * dot;
          mx = std::max(mx, s[u]);
        }
        T z = 0;
        for (int64_t u = 0; u <= t; ++u)
          if (visible(b, t, u)) z += std::exp(s[u] - mx);
        T l = mx + std::log(z);
        lse[(b * H + h) * T_ + t] = l;
        for (int64_t d = 0; d < D; ++d) {
          T acc = 0;
          for (int64_t u = 0; u <= t; ++u)
            if (visible(b, t, u)) acc += std::exp(s[u] - l) * v[at(b, u, h) + d];
          o[at(b, t, h) + d] = acc;
        }
      }
}

// p = exp(s - lse); dv = p^T do; dp = do v^T; ds = p * (dp - rowsum(do * o)); dq = scale ds k;
// dk = scale ds^T q.
template <typename T>
void attention_backward(const T* q, const T* k, const T* v, const T* o, const T* lse,
                        const T* dout, T* dq, T* dk, T* dv, int64_t B, int64_t T_, int64_t H,
                        int64_t D, T scale, const int32_t* segment_ids = nullptr) {
  auto at = [&](int64_t b, int64_t t, int64_t h) { return ((b * T_ + t) * H + h) * D; };
  for (int64_t i = 0; i < B * T_ * H * D; ++i) dq[i] = dk[i] = dv[i] = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T_; ++t) {
        T delta = 0;
        for (int64_t d = 0; d < D; ++d) delta += dout[at(b, t, h) + d] * o[at(b, t, h) + d];
        for (int64_t u = 0; u <= t; ++u) {
          if (segment_ids != nullptr && segment_ids[b * T_ + u] != segment_ids[b * T_ + t])
            continue;
          T dot = 0, dp = 0;
          for (int64_t d = 0; d < D; ++d) {
            dot += q[at(b, t, h) + d] * k[at(b, u, h) + d];
            dp += dout[at(b, t, h) + d] * v[at(b, u, h) + d];
          }
          T p = std::exp(scale * dot - lse[(b * H + h) * T_ + t]);
          T ds = p * (dp - delta);
          for (int64_t d = 0; d < D; ++d) {
            dv[at(b, u, h) + d] += p * dout[at(b, t, h) + d];
            dq[at(b, t, h) + d] += scale * ds * k[at(b, u, h) + d];
            dk[at(b, u, h) + d] += scale * ds * q[at(b, t, h) + d];
          }
        }
      }
}

template <typename T>
T silu(T x) { return x / (T(1) + std::exp(-x)); }

template <typename T>
void swiglu_forward(const T* g, const T* u, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = silu(g[i]) * u[i];
}

// d silu(g)/dg = sig(g) * (1 + g * (1 - sig(g)))
template <typename T>
void swiglu_backward(const T* g, const T* u, const T* dy, T* dg, T* du, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T sig = T(1) / (T(1) + std::exp(-g[i]));
    du[i] = dy[i] * g[i] * sig;
    dg[i] = dy[i] * u[i] * sig * (T(1) + g[i] * (T(1) - sig));
  }
}

// Grouped-query attention: x (N, Hkv, D) -> y (N, Hkv*R, D), y[n, h, d] = x[n, h / R, d].
template <typename T>
void repeat_kv(const T* x, T* y, int64_t N, int64_t Hkv, int64_t D, int64_t R) {
  const int64_t H = Hkv * R;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) y[(n * H + h) * D + d] = x[(n * Hkv + h / R) * D + d];
}

// Its transpose: dx[n, j, d] = sum_{r < R} dy[n, j*R + r, d], summed in r order.
template <typename T>
void repeat_kv_grad(const T* dy, T* dx, int64_t N, int64_t Hkv, int64_t D, int64_t R) {
  const int64_t H = Hkv * R;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < Hkv; ++j)
      for (int64_t d = 0; d < D; ++d) {
        T acc = 0;
        for (int64_t r = 0; r < R; ++r) acc += dy[(n * H + j * R + r) * D + d];
        dx[(n * Hkv + j) * D + d] = acc;
      }
}

template <typename T>
void softmax_cross_entropy_forward(const T* logits, const int32_t* targets, T* xent, T* lse,
                                   int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, logits[n * V + v]);
    T z = 0;
    for (int64_t v = 0; v < V; ++v) z += std::exp(logits[n * V + v] - mx);
    lse[n] = mx + std::log(z);
    const int32_t t = targets[n];  // outside [0, V): NaN, as the kernel (kernels.h)
    xent[n] = t >= 0 && t < V ? lse[n] - logits[n * V + t] : std::numeric_limits<T>::quiet_NaN();
  }
}

template <typename T>
void softmax_cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse,
                                    const T* dxent, T* dlogits, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v)
      dlogits[n * V + v] =
          dxent[n] * (std::exp(logits[n * V + v] - lse[n]) - (v == targets[n] ? T(1) : T(0)));
}

template <typename T>
void adamw_update(T* p, const T* grad, T* mu, T* nu, int64_t n, T lr, T clip, T b1, T b2, T eps,
                  T wd, int64_t count) {
  T c1 = T(1) - std::pow(b1, T(count)), c2 = T(1) - std::pow(b2, T(count));
  for (int64_t i = 0; i < n; ++i) {
    T g = clip * grad[i];
    mu[i] = b1 * mu[i] + (T(1) - b1) * g;
    nu[i] = b2 * nu[i] + (T(1) - b2) * g * g;
    T upd = (mu[i] / c1) / (std::sqrt(nu[i] / c2) + eps) + wd * p[i];
    p[i] -= lr * upd;
  }
}

// ---- scalar functions shared by the executor and the interpreter --------------------------

// MaxText's create_learning_rate_schedule: linear warmup 0 -> lr over warmup_steps, cosine
// from lr to lr * final_fraction over cos_steps, then 0 for the remaining steps. The cosine's
// pct divides by cos_steps - 1 (MaxText's make_cos_schedule, since learning_rate_final_fraction),
// so its last step, warmup_steps + cos_steps - 1, is exactly lr * final_fraction; a one-step
// cosine is that step alone.
inline double learning_rate_at(int64_t step, double lr, int64_t warmup_steps, int64_t cos_steps,
                               double final_fraction) {
  const double kPi = 3.14159265358979323846;
  if (step < warmup_steps) return lr * static_cast<double>(step) / static_cast<double>(warmup_steps);
  int64_t s = step - warmup_steps;
  if (s < cos_steps || cos_steps == 0) {
    double pct = cos_steps <= 1 ? 1.0 : static_cast<double>(s) / static_cast<double>(cos_steps - 1);
    double a = 0.5 * (std::cos(kPi * std::min(pct, 1.0)) + 1.0);
    double fin = lr * final_fraction;
    return cos_steps == 0 ? fin : lr * a + fin * (1.0 - a);
  }
  return 0.0;
}

// optax.clip_by_global_norm: scale by max_norm / norm when norm >= max_norm.
inline double clip_factor(double global_norm, double max_norm) {
  if (max_norm <= 0 || global_norm < max_norm) return 1.0;
  return max_norm / global_norm;
}

// ---- bf16 (mixed precision) ------------------------------------------------------------------
// Oracles of kernels.h's bf16 section: the arithmetic runs in T (double in the tests) and
// round_bf16 is applied exactly where the kernel (and MaxText) rounds to bf16.

// x rounded to the nearest bf16 (8 significant bits, ties to even, f32's exponent range with
// subnormals down to 2^-133, overflow to inf, NaN stays NaN), computed directly from x.
template <typename T>
T round_bf16(T x) {
  if (!std::isfinite(x) || x == T(0)) return x;
  int e = 0;
  std::frexp(static_cast<double>(x), &e);  // |x| = m 2^e, m in [0.5, 1)
  const double q = std::ldexp(1.0, std::max(e - 8, -133));
  const double r = std::nearbyint(static_cast<double>(x) / q) * q;  // ties to even
  const double kMax = std::ldexp(255.0, 120);                        // 0x7f7f
  if (std::abs(r) > kMax) return static_cast<T>(r > 0 ? INFINITY : -INFINITY);
  return static_cast<T>(r);
}

template <typename T>
void rmsnorm_forward_bf16(const T* x, const T* scale, T* y, T* rstd, int64_t N, int64_t E, T eps) {
  for (int64_t n = 0; n < N; ++n) {
    T ss = 0;
    for (int64_t e = 0; e < E; ++e) ss += x[n * E + e] * x[n * E + e];
    T r = T(1) / std::sqrt(ss / T(E) + eps);
    rstd[n] = r;
    for (int64_t e = 0; e < E; ++e)
      y[n * E + e] = round_bf16(round_bf16(x[n * E + e] * r) * round_bf16(scale[e]));
  }
}

// g = rb(dy * rb(s)); dx = rb(r g - x r^3 / E sum_e(g x)); dscale = rb(sum_n dy rb(x r)).
template <typename T>
void rmsnorm_backward_bf16(const T* x, const T* scale, const T* rstd, const T* dy, T* dx,
                           T* dscale, int64_t N, int64_t E) {
  for (int64_t e = 0; e < E; ++e) dscale[e] = 0;
  for (int64_t n = 0; n < N; ++n) {
    const T r = rstd[n];
    T gx = 0;
    for (int64_t e = 0; e < E; ++e) gx += round_bf16(dy[n * E + e] * round_bf16(scale[e])) * x[n * E + e];
    for (int64_t e = 0; e < E; ++e) {
      const T g = round_bf16(dy[n * E + e] * round_bf16(scale[e]));
      dx[n * E + e] = round_bf16(r * g - x[n * E + e] * r * r * r / T(E) * gx);
      dscale[e] += dy[n * E + e] * round_bf16(x[n * E + e] * r);
    }
  }
  for (int64_t e = 0; e < E; ++e) dscale[e] = round_bf16(dscale[e]);
}

template <typename T>
void rope_bf16(const T* x, const int32_t* pos, T* y, int64_t B, int64_t T_, int64_t H, int64_t D,
               T min_ts, T max_ts, bool inverse, kern::RopeForm form = {}) {
  const int64_t half = D / 2;
  for (int64_t bth = 0; bth < B * T_ * H; ++bth) {
    const T* xr = x + bth * D;
    T* yr = y + bth * D;
    for (int64_t i = 0; i < half; ++i) {
      const T ts = kern::rope_timescale<T>(i, D, min_ts, max_ts, form.use_scale);
      const T ang = T(pos[bth / H]) / ts;
      if (form.interleave) {  // f32 cos/sin (the kernel's table: rounded to float), one rounding
        const T c = T(static_cast<float>(std::cos(ang)));
        const T s = (inverse ? -1 : 1) * T(static_cast<float>(std::sin(ang)));
        const T x1 = xr[2 * i], x2 = xr[2 * i + 1];
        yr[2 * i] = round_bf16(x1 * c - x2 * s);
        yr[2 * i + 1] = round_bf16(x2 * c + x1 * s);
        continue;
      }
      const T c = round_bf16(std::cos(ang)), s = (inverse ? -1 : 1) * round_bf16(std::sin(ang));
      const T x1 = xr[i], x2 = xr[i + half];
      yr[i] = round_bf16(round_bf16(x1 * c) - round_bf16(x2 * s));
      yr[i + half] = round_bf16(round_bf16(x2 * c) + round_bf16(x1 * s));
    }
  }
}

// Key s visible to query t of batch b: causal, and the same segment when ids are given.
inline bool attention_visible(const int32_t* seg, int64_t b, int64_t T_, int64_t s, int64_t t) {
  return s <= t && (seg == nullptr || seg[b * T_ + s] == seg[b * T_ + t]);
}

// z = rb(scale q.k); m = max z; p = rb(exp(rb(z - m))); l = rb(sum p); o = rb(rb(sum p v) / l).
template <typename T>
void attention_forward_bf16(const T* q, const T* k, const T* v, const int32_t* seg, T* o, T* lse,
                            int64_t B, int64_t T_, int64_t H, int64_t D, T scale) {
  std::vector<T> z(T_);
  auto at = [&](int64_t b, int64_t t, int64_t h) { return ((b * T_ + t) * H + h) * D; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T_; ++t) {
        T m = -std::numeric_limits<T>::infinity(), l = 0;
        for (int64_t s = 0; s < T_; ++s) {
          if (!attention_visible(seg, b, T_, s, t)) continue;
          T dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[at(b, t, h) + d] * k[at(b, s, h) + d];
          z[s] = round_bf16(scale * dot);
          m = std::max(m, z[s]);
        }
        for (int64_t s = 0; s < T_; ++s)
          if (attention_visible(seg, b, T_, s, t)) l += z[s] = round_bf16(std::exp(round_bf16(z[s] - m)));
        l = round_bf16(l);
        for (int64_t d = 0; d < D; ++d) {
          T u = 0;
          for (int64_t s = 0; s < T_; ++s)
            if (attention_visible(seg, b, T_, s, t)) u += z[s] * v[at(b, s, h) + d];
          o[at(b, t, h) + d] = round_bf16(round_bf16(u) / l);
        }
        lse[(b * H + h) * T_ + t] = m + std::log(l);
      }
}

// P = exp(z - lse) (z as forward); dv = P^T do; ds = P (do.v - do.o); dq = scale ds k;
// dk = scale ds^T q; each rounded to bf16 once.
template <typename T>
void attention_backward_bf16(const T* q, const T* k, const T* v, const T* o, const T* lse,
                             const int32_t* seg, const T* dout, T* dq, T* dk, T* dv, int64_t B,
                             int64_t T_, int64_t H, int64_t D, T scale) {
  const int64_t n = B * T_ * H * D;
  std::vector<T> aq(n, T(0)), ak(n, T(0)), av(n, T(0));
  auto at = [&](int64_t b, int64_t t, int64_t h) { return ((b * T_ + t) * H + h) * D; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T_; ++t) {
        const int64_t qt = at(b, t, h);
        T delta = 0;
        for (int64_t d = 0; d < D; ++d) delta += dout[qt + d] * o[qt + d];
        for (int64_t s = 0; s <= t; ++s) {
          if (!attention_visible(seg, b, T_, s, t)) continue;
          const int64_t ks = at(b, s, h);
          T dot = 0, dp = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[qt + d] * k[ks + d], dp += dout[qt + d] * v[ks + d];
          const T p = std::exp(round_bf16(scale * dot) - lse[(b * H + h) * T_ + t]);
          const T ds = p * (dp - delta);
          for (int64_t d = 0; d < D; ++d) {
            av[ks + d] += p * dout[qt + d];
            aq[qt + d] += scale * ds * k[ks + d];
            ak[ks + d] += scale * ds * q[qt + d];
          }
        }
      }
  for (int64_t i = 0; i < n; ++i)
    dq[i] = round_bf16(aq[i]), dk[i] = round_bf16(ak[i]), dv[i] = round_bf16(av[i]);
}

template <typename T>
T sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }

// sg = rb(sigmoid(g)); y = rb(rb(g sg) u).
template <typename T>
void swiglu_forward_bf16(const T* g, const T* u, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = round_bf16(round_bf16(g[i] * round_bf16(sigmoid(g[i]))) * u[i]);
}

// du = rb(dy a); da = rb(dy u); dg = rb(rb(da sg) + rb(rb(da g) rb(sg rb(1 - sg)))).
template <typename T>
void swiglu_backward_bf16(const T* g, const T* u, const T* dy, T* dg, T* du, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T sg = round_bf16(sigmoid(g[i])), a = round_bf16(g[i] * sg);
    du[i] = round_bf16(dy[i] * a);
    const T da = round_bf16(dy[i] * u[i]);
    const T dlogistic = round_bf16(sg * round_bf16(T(1) - sg));
    dg[i] = round_bf16(round_bf16(da * sg) + round_bf16(round_bf16(da * g[i]) * dlogistic));
  }
}

template <typename T>
void add_bf16(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = round_bf16(a[i] + b[i]);
}
template <typename T>
void mul_bf16(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = round_bf16(a[i] * b[i]);
}

}  // namespace eng::ref
