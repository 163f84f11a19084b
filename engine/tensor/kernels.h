// engine/tensor/kernels.h: the fast f32 kernels every op runs on. Each has a naive
// oracle of the same name in reference.h (templated, so gradient checks run in double);
// tests/tensor/kernels_test.cpp checks one against the other on random inputs.
//
// Conventions: row-major, contiguous; outputs first after inputs is NOT used here:
// inputs come first, outputs last, then sizes. Kernels parallelise on the engine's one
// pool (engine/base/thread_pool.h) and allocate nothing on the heap in steady state
// (per-thread scratch is reused). Glossary: N rows (tokens, B*T), E embed, V vocab,
// B batch, T sequence, H heads, D head dim.
#pragma once

#include <cstdint>
#include "engine/tensor/rope_form.h"

namespace eng::kern {

// ---- matmul (OpenBLAS sgemm, split over the pool; see blas.h) -------------------------
// C[M,N] = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T. A is [M,K] (or [K,M] if
// trans_a), B is [K,N] (or [N,K] if trans_b). Leading dims are the row strides.
void matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc);

// ---- grouped matmul (jax.lax.ragged_dot; op.h kRaggedDot / kRaggedDotGrad) ----------------
// Per row b of B: lhs (N,K) rows cut into E consecutive groups by group_sizes (E per row;
// negative as 0, cut at N), out (N,P) = group e's rows times rhs[e] (K,P) (trans_b: (P,K)^T),
// rows past the groups zero. One matmul per (b, e) over the group's rows.
void ragged_dot(const float* lhs, const float* rhs, const int32_t* group_sizes, int64_t B,
                int64_t N, int64_t K, int64_t P, int64_t E, bool trans_b, float* out);
// drhs (E,K,P) = sum over b of group e's lhs rows^T dout rows.
void ragged_dot_grad(const float* lhs, const float* dout, const int32_t* group_sizes, int64_t B,
                     int64_t N, int64_t K, int64_t P, int64_t E, float* drhs);

// ---- embedding --------------------------------------------------------------------------
// out[n, :] = table[ids[n] - offset, :]. ids outside [offset, offset + V) give a zero row
// (offset 0: checked by data loaders; offset > 0: the table is one device's vocab block).
void embed_lookup(const float* table /*(V, E)*/, const int32_t* ids /*(N)*/, float* out /*(N, E)*/,
                  int64_t N, int64_t V, int64_t E, int64_t offset = 0);
// dtable = zeros; dtable[ids[n] - offset, :] += dy[n, :] for ids inside the block
// (deterministic: same order every run).
void embed_lookup_grad(const int32_t* ids /*(N)*/, const float* dy /*(N, E)*/,
                       float* dtable /*(V, E)*/, int64_t N, int64_t V, int64_t E,
                       int64_t offset = 0);
// out[n, v] = (ids[n] == v) ? 1 : 0   (MaxText's use_iota_embed path).
void one_hot(const int32_t* ids /*(N)*/, float* out /*(N, V)*/, int64_t N, int64_t V);

// ---- RMSNorm (MaxText: y = x * rsqrt(mean(x^2) + eps) * scale) --------------------------
// rstd[n] = 1 / sqrt(mean_e(x[n,e]^2) + eps) is saved for the backward pass.
void rmsnorm_forward(const float* x /*(N, E)*/, const float* scale /*(E)*/, float* y /*(N, E)*/,
                     float* rstd /*(N)*/, int64_t N, int64_t E, float eps);
// dx and dscale are overwritten (not accumulated).
void rmsnorm_backward(const float* x /*(N, E)*/, const float* scale /*(E)*/,
                      const float* rstd /*(N)*/, const float* dy /*(N, E)*/, float* dx /*(N, E)*/,
                      float* dscale /*(E)*/, int64_t N, int64_t E);

// ---- LayerNorm with bias (MaxText's Gpt3LayerNorm) and bias add (layernorm.cpp) ----------
// y = (x - mean) * rstd * (1 + scale) + bias per row; mean and rstd saved (f32 math, double
// row sums). The backward overwrites dx, dscale, dbias; dscale and dbias sum the rows in order.
void layernorm_forward(const float* x /*(N, E)*/, const float* scale /*(E)*/,
                       const float* bias /*(E)*/, float* y /*(N, E)*/, float* mean /*(N)*/,
                       float* rstd /*(N)*/, int64_t N, int64_t E, float eps);
void layernorm_backward(const float* x, const float* scale, const float* mean, const float* rstd,
                        const float* dy /*(N, E)*/, float* dx /*(N, E)*/, float* dscale /*(E)*/,
                        float* dbias /*(E)*/, int64_t N, int64_t E);
// y = x + bias, bias (F) broadcast over rows; dbias = dy summed over rows (in order).
void bias_add(const float* x /*(rows, F)*/, const float* bias /*(F)*/, float* y, int64_t rows,
              int64_t F);
void bias_add_grad(const float* dy /*(rows, F)*/, float* dbias /*(F)*/, int64_t rows, int64_t F);

// ---- RoPE (MaxText RotaryEmbedding, rotate-half) -----------------------------------------
// For i < D/2: timescale_i = min_ts * (max_ts/min_ts)^(2i/D), angle = pos[b,t] / timescale_i,
//   y[..., i]       = x[..., i] * cos - x[..., i + D/2] * sin
//   y[..., i + D/2] = x[..., i + D/2] * cos + x[..., i] * sin
// inverse = true applies the transpose rotation (sin -> -sin): that is the VJP. `form`
// (rope_form.h): adjacent pairs and/or Llama 3.1's scaled timescales (LLaMARotaryEmbedding).
void rope(const float* x /*(B, T, H, D)*/, const int32_t* pos /*(B, T)*/, float* y /*(B, T, H, D)*/,
          int64_t B, int64_t T, int64_t H, int64_t D, float min_timescale, float max_timescale,
          bool inverse, RopeForm form = {});

// ---- causal attention (flash-style: no (T, T) tensor is materialised) ---------------------
// o[b,t,h,:] = sum_{s visible to t} softmax_s(scale * q[b,t,h,:].k[b,s,h,:]) v[b,s,h,:]
// lse[b,h,t] = log sum_{s visible to t} exp(scale * q.k): saved for the backward pass.
// Visible: s <= t, and with segment_ids (B, T) (packed sequences; null: one segment)
// segment_ids[b,s] == segment_ids[b,t].
void attention_forward(const float* q, const float* k, const float* v /*(B, T, H, D) each*/,
                       float* o /*(B, T, H, D)*/, float* lse /*(B, H, T)*/, int64_t B, int64_t T,
                       int64_t H, int64_t D, float scale,
                       const int32_t* segment_ids /*(B, T)*/ = nullptr);
// dq, dk, dv are overwritten.
void attention_backward(const float* q, const float* k, const float* v, const float* o,
                        const float* lse, const float* dout /*(B, T, H, D)*/, float* dq, float* dk,
                        float* dv, int64_t B, int64_t T, int64_t H, int64_t D, float scale,
                        const int32_t* segment_ids /*(B, T)*/ = nullptr);

// ---- elementwise ---------------------------------------------------------------------------
void add(const float* a, const float* b, float* y, int64_t n);           // y = a + b
void mul(const float* a, const float* b, float* y, int64_t n);           // y = a * b
void scale(const float* x, float c, float* y, int64_t n);                // y = c * x
// int32 (jnp's int32 arithmetic): two's complement, wrapping on overflow as XLA's integer ops.
void add_i32(const int32_t* a, const int32_t* b, int32_t* y, int64_t n);
void mul_i32(const int32_t* a, const int32_t* b, int32_t* y, int64_t n);
void scale_i32(const int32_t* x, int64_t c, int32_t* y, int64_t n);
// C = op(A) op(B) in int32, wrapping (row-major, as matmul's arguments; no alpha/beta): the
// int32 matmul (jnp's int32 dot). A plain loop: integer matmuls here are small index math.
void matmul_i32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const int32_t* A,
                int64_t lda, const int32_t* B, int64_t ldb, int32_t* C, int64_t ldc);
void swiglu_forward(const float* g, const float* u, float* y, int64_t n);  // y = silu(g) * u
void swiglu_backward(const float* g, const float* u, const float* dy, float* dg, float* du,
                     int64_t n);
// ---- grouped-query attention (op.h kRepeatKv) ---------------------------------------------
// y[n, h, :] = x[n, h / R, :] for h < Hkv*R (x (N, Hkv, D), y (N, Hkv*R, D)); bytes, any dtype
// of elem_bytes per element.
void repeat_kv(const void* x, void* y, int64_t N, int64_t Hkv, int64_t D, int64_t R,
               int64_t elem_bytes);
// dx[n, j, :] = sum_{r < R} dy[n, j*R + r, :], summed in r order (f32; overwritten).
void repeat_kv_grad(const float* dy, float* dx, int64_t N, int64_t Hkv, int64_t D, int64_t R);
void convert_f32_to_bf16(const float* x, uint16_t* y, int64_t n);
void convert_bf16_to_f32(const uint16_t* x, float* y, int64_t n);

// ---- loss ----------------------------------------------------------------------------------
// lse[n] = logsumexp_v logits[n, v]; xent[n] = lse[n] - logits[n, targets[n]] (NaN for a target
// outside [0, V): nothing out of range is read).
void softmax_cross_entropy_forward(const float* logits /*(N, V)*/, const int32_t* targets /*(N)*/,
                                   float* xent /*(N)*/, float* lse /*(N)*/, int64_t N, int64_t V);
// dlogits[n, v] = dxent[n] * (exp(logits[n, v] - lse[n]) - (v + offset == targets[n])).
// offset > 0: logits is one device's vocab block starting at global column offset (lse global).
void softmax_cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse,
                                    const float* dxent /*(N)*/, float* dlogits /*(N, V)*/,
                                    int64_t N, int64_t V, int64_t offset = 0);
// Vocab-parallel cross-entropy pieces (op.h kVocabMax / kVocabStats / kXentFromStats):
// mx[n] = max_v logits[n, v];
void vocab_max(const float* logits /*(N, V)*/, float* mx /*(N)*/, int64_t N, int64_t V);
// sumexp[n] = sum_v exp(logits[n, v] - mx[n]) (1 when mx[n] is +-inf);
// picked[n] = logits[n, targets[n] - offset] when inside [0, V), else 0.
void vocab_stats(const float* logits /*(N, V)*/, const float* mx, const int32_t* targets,
                 int64_t offset, float* sumexp /*(N)*/, float* picked /*(N)*/, int64_t N, int64_t V);
// The same four on bf16 logits (and bf16 dlogits): each row is widened to f32 in a per-thread
// buffer, the f32 math above runs on it, and dlogits are rounded to bf16 as they are stored, so
// the bits equal widening the whole tensor first, with no (N, V) f32 copy (MaxText's
// cast_logits_to_fp32 as XLA fuses it: the convert into its consumers).
void softmax_cross_entropy_forward_bf16(const uint16_t* logits, const int32_t* targets,
                                        float* xent, float* lse, int64_t N, int64_t V);
void softmax_cross_entropy_backward_bf16(const uint16_t* logits, const int32_t* targets,
                                         const float* lse, const float* dxent, uint16_t* dlogits,
                                         int64_t N, int64_t V, int64_t offset = 0);
void vocab_max_bf16(const uint16_t* logits, float* mx, int64_t N, int64_t V);
void vocab_stats_bf16(const uint16_t* logits, const float* mx, const int32_t* targets,
                      int64_t offset, float* sumexp, float* picked, int64_t N, int64_t V);

// ---- reductions and the optimizer ---------------------------------------------------------
double sum(const float* x, int64_t n);          // accumulated in double
double sum_squares(const float* x, int64_t n);  // accumulated in double

// optax.adamw step (eps_root 0), in place, with the gradient scaled by clip first:
//   g = clip * grad; mu = b1 mu + (1-b1) g; nu = b2 nu + (1-b2) g^2
//   mu_hat = mu / (1 - b1^count); nu_hat = nu / (1 - b2^count)      (count = step + 1)
//   p -= lr * (mu_hat / (sqrt(nu_hat) + eps) + weight_decay * p)
void adamw_update(float* param, const float* grad, float* mu, float* nu, int64_t n, float lr,
                  float clip, float b1, float b2, float eps, float weight_decay, int64_t count);

// ---- per-thread scratch ----------------------------------------------------------------------
// Kernels keep scratch in thread-local buffers grown on first use. To keep "a training step
// allocates nothing" true from the first step on (whichever pool thread runs which chunk),
// the runtime reserves them up front, once per executable, on every pool thread:
//   default_pool().run_on_every_thread([&] { kern::reserve_scratch(needs); });
struct ScratchNeeds {
  int64_t attention_seq = 0;        // largest T of attention / attention_backward
  int64_t rmsnorm_rows = 0;         // largest N * ... of rmsnorm_backward: rows
  int64_t rmsnorm_width = 0;        //   and its E
  int64_t sum_elements = 0;         // largest n of sum / sum_squares
  int64_t rope_positions = 0;       // rope: positions 0..rope_positions-1 are tabulated
  int64_t rope_dim = 0;             //   for this head dim
  float rope_min_timescale = 1, rope_max_timescale = 10000;
  bool rope_use_scale = false;      //   and Llama 3.1's scaling (rope_form.h)
  int64_t attention_head_dim = 0;   // bf16 attention: its D (with attention_seq)
  int64_t bf16_matmul_bytes = 0;    // largest Bf16MatmulPlan::scratch_bytes() (onednn_matmul.h)
  int64_t loss_vocab = 0;           // largest V of the cross-entropy kernels (bf16: two f32 rows)
  void merge(const ScratchNeeds& o);  // element-wise max (rope: the last non-empty one)
};
// Grows the calling thread's scratch to `needs`; allocates nothing when already large enough.
// False when the memory could not be had (std::bad_alloc caught here: out of memory inside a
// step is an error the runtime returns, never an abort).
bool reserve_scratch(const ScratchNeeds& needs);


// ---- bf16 (MaxText's dtype=bfloat16) -------------------------------------------------------------
// Storage is bf16 (uint16_t bits, dtype.h); math and accumulation are f32; results are rounded
// to bf16 exactly where MaxText's JAX code rounds them (each op on bf16 arrays rounds its
// result; files read: MaxText src/maxtext/layers/normalizations.py RMSNorm, embeddings.py
// RotaryEmbedding, linears.py MlpBlock, attention_op.py apply_attention_dot, at commit e591f30c,
// 2026-08). rb(v) below is "round to bf16". The rounding bits are eng::f32_to_bf16's on every
// CPU (vcvtneps2bf16 where there is avx512_bf16, denormal lanes fixed up; software elsewhere),
// so results do not depend on the CPU. Same pool and scratch rules as the f32 kernels;
// ref::*_bf16 (reference.h) are the float64 oracles with rb at the same points. bf16 matmuls
// are planned objects: Bf16MatmulPlan in onednn_matmul.h. Cross-entropy computes in f32 (MaxText's
// cast_logits_to_fp32: true) on bf16 logits: the *_bf16 loss kernels above.
//
// RMSNorm: x -> f32; rstd = 1/sqrt(mean(x^2) + eps); y = rb(rb(x * rstd) * rb(scale)).
void rmsnorm_forward_bf16(const uint16_t* x /*(N, E)*/, const float* scale /*(E)*/,
                          uint16_t* y /*(N, E)*/, float* rstd /*(N)*/, int64_t N, int64_t E,
                          float eps);
// Its VJP (JAX autodiff of the forward's ops): g = rb(dy * rb(scale)) (the bf16 product's
// cotangent); dx = rb(rstd * g - x * rstd^3 / E * sum_e(g * x)) (f32 math, as MaxText's);
// dscale = rb(sum_n dy * rb(x * rstd)), stored f32 (the cotangent of the scale's bf16 cast).
void rmsnorm_backward_bf16(const uint16_t* x, const float* scale, const float* rstd,
                           const uint16_t* dy /*(N, E)*/, uint16_t* dx /*(N, E)*/,
                           float* dscale /*(E)*/, int64_t N, int64_t E);

// RoPE as rope() with c = rb(cos), s = rb(sin) (MaxText casts sin/cos to the input dtype):
//   y[i] = rb(rb(x[i] c) - rb(x[i+D/2] s)),  y[i+D/2] = rb(rb(x[i+D/2] c) + rb(x[i] s)).
// inverse = true negates s: that is exactly the VJP (each product's cotangent rounded, summed
// and rounded as JAX's transpose of the forward does).
// form.interleave (LLaMARotaryEmbedding): MaxText multiplies the bf16 input by the f32 cos/sin,
// so the math is f32 and only the result is rounded: y[a] = rb(x[a] c - x[b] s) (c, s f32).
void rope_bf16(const uint16_t* x /*(B, T, H, D)*/, const int32_t* pos /*(B, T)*/,
               uint16_t* y /*(B, T, H, D)*/, int64_t B, int64_t T, int64_t H, int64_t D,
               float min_timescale, float max_timescale, bool inverse, RopeForm form = {});

// Causal attention with segments: key s is visible to query t iff s <= t and (segment_ids is
// null or seg[b, s] == seg[b, t]). MaxText's dot-product attention (what it runs on CPU) with
// float32_qk_product = float32_logits = false, per (b, h, t):
//   z_s = rb(scale * sum_d q.k) (f32 sum);  m = max_s z_s;  p_s = rb(exp(rb(z_s - m)));
//   l = rb(sum_s p_s);  u = rb(sum_s p_s v_s) (f32 sums);  o = rb(u / l);
//   lse[b,h,t] = m + log(l) (f32), saved for the backward pass.
// No (T, T) tensor: one block of query rows' scores at a time (per-thread scratch).
void attention_forward_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v /*(B,T,H,D)*/,
                            const int32_t* segment_ids /*(B, T) or null*/, uint16_t* o /*(B,T,H,D)*/,
                            float* lse /*(B, H, T)*/, int64_t B, int64_t T, int64_t H, int64_t D,
                            float scale);
// Flash-style backward in f32 from the bf16 inputs: P = exp(z - lse) with z as above;
// dv = P^T do; ds = P * (do v^T - rowsum(do * o)); dq = scale ds k; dk = scale ds^T q; each
// summed in f32 and rounded to bf16 once (JAX's VJP would round its intermediates too: the
// difference is within the tolerance tests/tensor/kernels_bf16_test.cpp states). Overwritten.
void attention_backward_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             const uint16_t* o, const float* lse, const int32_t* segment_ids,
                             const uint16_t* dout, uint16_t* dq, uint16_t* dk, uint16_t* dv,
                             int64_t B, int64_t T, int64_t H, int64_t D, float scale);

// SwiGLU (MlpBlock: silu(wi_0 x) * (wi_1 x), silu = x * sigmoid(x), all bf16):
//   sg = rb(sigmoid(g)); a = rb(g * sg); y = rb(a * u).
void swiglu_forward_bf16(const uint16_t* g, const uint16_t* u, uint16_t* y, int64_t n);
// JAX's VJP of those ops: du = rb(dy a); da = rb(dy u); dg = rb(rb(da sg) + rb(rb(da g) *
// rb(sg rb(1 - sg)))) (lax.logistic's derivative is ans * (1 - ans)).
void swiglu_backward_bf16(const uint16_t* g, const uint16_t* u, const uint16_t* dy, uint16_t* dg,
                          uint16_t* du, int64_t n);
void add_bf16(const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n);  // y = rb(a + b)
void mul_bf16(const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n);  // y = rb(a * b)

}  // namespace eng::kern
