// engine/tensor/loss.cpp: fused softmax cross-entropy (forward saves lse; backward is one pass),
// on f32 or bf16 logits (read in f32, a row at a time: the convert fused into the loss).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/base/check.h"
#include "engine/base/thread_pool.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/simd.h"

namespace eng::kern {
namespace {

using simd::kW;
using simd::Mask;
using simd::Vec;

int64_t rows_per_chunk(int64_t V) { return std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, V)); }

// logsumexp of one row: a max pass and an exp-sum pass (the row stays in L1/L2 between them).
float row_lse(const float* x /*(V)*/, int64_t V) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  Vec mx = simd::set1(kNegInf);
  for (int64_t v = 0; v < V; v += kW) mx = simd::max(mx, simd::load_or(x + v, simd::mask_for(V - v), kNegInf));
  const float m = simd::reduce_max(mx);
  if (m == kNegInf || std::isinf(m)) return m;  // all -inf, or an inf logit: lse is that
  const Vec mv = simd::set1(m);
  Vec z0 = simd::set1(0.f), z1 = simd::set1(0.f);
  int64_t v = 0;
  for (; v + 2 * kW <= V; v += 2 * kW) {  // two accumulators hide the exp latency
    z0 = z0 + simd::exp(simd::load(x + v, simd::mask_for(kW)) - mv);
    z1 = z1 + simd::exp(simd::load(x + v + kW, simd::mask_for(kW)) - mv);
  }
  for (; v < V; v += kW) {
    Mask mk = simd::mask_for(V - v);
    z0 = z0 + simd::exp(simd::load_or(x + v, mk, kNegInf) - mv);
  }
  return m + std::log(simd::reduce_add(z0 + z1));
}

// bf16 logits are read a row at a time: widened into this thread's buffer (convert_bf16_to_f32
// runs inline inside the pool's loop), and a row of dlogits computed there is rounded out as it
// is stored. The bits equal widening the whole tensor first, without its (N, V) f32 copy. The
// buffer holds two rows; reserve_loss_scratch grows it before a step (kernels.h's rule).
thread_local std::vector<float> t_loss_rows;

float* loss_rows(int64_t V) {
  if (static_cast<int64_t>(t_loss_rows.size()) < 2 * V) t_loss_rows.resize(2 * V);
  return t_loss_rows.data();
}
const float* f32_row(const float* x, int64_t) { return x; }
const float* f32_row(const uint16_t* x, int64_t V) {
  float* row = loss_rows(V);
  convert_bf16_to_f32(x, row, V);
  return row;
}
// Where a row of dlogits is computed in f32: in place, or the buffer's second row.
float* f32_out_row(float* y, int64_t) { return y; }
float* f32_out_row(uint16_t*, int64_t V) { return loss_rows(V) + V; }
void store_row(float*, const float*, int64_t) {}
void store_row(uint16_t* y, const float* row, int64_t V) { convert_f32_to_bf16(row, y, V); }

template <typename T>
void xent_forward(const T* logits, const int32_t* targets, float* xent, float* lse, int64_t N,
                  int64_t V) {
  parallel_for(N, rows_per_chunk(V), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float* row = f32_row(logits + n * V, V);  // (V)
      lse[n] = row_lse(row, V);
      // A label outside [0, V) reads nothing: its loss is NaN, as jnp.take_along_axis's
      // default "fill" mode gives optax's loss (the gradient skips it, as backward does).
      const int32_t t = targets[n];
      xent[n] = t >= 0 && t < V ? lse[n] - row[t] : std::numeric_limits<float>::quiet_NaN();
    }
  });
}

template <typename T>
void xent_backward(const T* logits, const int32_t* targets, const float* lse, const float* dxent,
                   T* dlogits, int64_t N, int64_t V, int64_t offset) {
  parallel_for(N, rows_per_chunk(V), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float* row = f32_row(logits + n * V, V);  // (V)
      float* drow = f32_out_row(dlogits + n * V, V);  // (V)
      const Vec l = simd::set1(lse[n]), d = simd::set1(dxent[n]);
      for (int64_t v = 0; v < V; v += kW) {
        Mask m = simd::mask_for(V - v);
        simd::store(drow + v, d * simd::exp(simd::load(row + v, m) - l), m);
      }
      const int64_t t = targets[n] - offset;
      if (t >= 0 && t < V) drow[t] = dxent[n] * (std::exp(row[t] - lse[n]) - 1.f);
      store_row(dlogits + n * V, drow, V);
    }
  });
}

template <typename T>
void vocab_max_rows(const T* logits, float* mx, int64_t N, int64_t V) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  parallel_for(N, rows_per_chunk(V), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float* x = f32_row(logits + n * V, V);  // (V)
      Vec m = simd::set1(kNegInf);
      for (int64_t v = 0; v < V; v += kW) m = simd::max(m, simd::load_or(x + v, simd::mask_for(V - v), kNegInf));
      mx[n] = simd::reduce_max(m);
    }
  });
}

template <typename T>
void vocab_stats_rows(const T* logits, const float* mx, const int32_t* targets, int64_t offset,
                      float* sumexp, float* picked, int64_t N, int64_t V) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  parallel_for(N, rows_per_chunk(V), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float* x = f32_row(logits + n * V, V);  // (V)
      const int64_t t = targets[n] - offset;
      picked[n] = t >= 0 && t < V ? x[t] : 0.f;
      if (std::isinf(mx[n])) {  // lse = max (the fused kernel's rule)
        sumexp[n] = 1.f;
        continue;
      }
      const Vec mv = simd::set1(mx[n]);
      Vec z0 = simd::set1(0.f), z1 = simd::set1(0.f);
      int64_t v = 0;
      for (; v + 2 * kW <= V; v += 2 * kW) {
        z0 = z0 + simd::exp(simd::load(x + v, simd::mask_for(kW)) - mv);
        z1 = z1 + simd::exp(simd::load(x + v + kW, simd::mask_for(kW)) - mv);
      }
      for (; v < V; v += kW) z0 = z0 + simd::exp(simd::load_or(x + v, simd::mask_for(V - v), kNegInf) - mv);
      sumexp[n] = simd::reduce_add(z0 + z1);
    }
  });
}

}  // namespace

void softmax_cross_entropy_forward(const float* logits, const int32_t* targets, float* xent,
                                   float* lse, int64_t N, int64_t V) {
  xent_forward(logits, targets, xent, lse, N, V);
}
void softmax_cross_entropy_forward_bf16(const uint16_t* logits, const int32_t* targets,
                                        float* xent, float* lse, int64_t N, int64_t V) {
  xent_forward(logits, targets, xent, lse, N, V);
}

void softmax_cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse,
                                    const float* dxent, float* dlogits, int64_t N, int64_t V,
                                    int64_t offset) {
  xent_backward(logits, targets, lse, dxent, dlogits, N, V, offset);
}
void softmax_cross_entropy_backward_bf16(const uint16_t* logits, const int32_t* targets,
                                         const float* lse, const float* dxent, uint16_t* dlogits,
                                         int64_t N, int64_t V, int64_t offset) {
  xent_backward(logits, targets, lse, dxent, dlogits, N, V, offset);
}

void vocab_max(const float* logits, float* mx, int64_t N, int64_t V) {
  vocab_max_rows(logits, mx, N, V);
}
void vocab_max_bf16(const uint16_t* logits, float* mx, int64_t N, int64_t V) {
  vocab_max_rows(logits, mx, N, V);
}

void vocab_stats(const float* logits, const float* mx, const int32_t* targets, int64_t offset,
                 float* sumexp, float* picked, int64_t N, int64_t V) {
  vocab_stats_rows(logits, mx, targets, offset, sumexp, picked, N, V);
}
void vocab_stats_bf16(const uint16_t* logits, const float* mx, const int32_t* targets,
                      int64_t offset, float* sumexp, float* picked, int64_t N, int64_t V) {
  vocab_stats_rows(logits, mx, targets, offset, sumexp, picked, N, V);
}

void reserve_loss_scratch(int64_t V) { loss_rows(V); }

}  // namespace eng::kern
