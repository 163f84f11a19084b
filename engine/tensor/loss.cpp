// engine/tensor/loss.cpp: fused softmax cross-entropy (forward saves lse; backward is one pass).
#include <algorithm>
#include <cmath>
#include <limits>

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

}  // namespace

void softmax_cross_entropy_forward(const float* logits, const int32_t* targets, float* xent,
                                   float* lse, int64_t N, int64_t V) {
  parallel_for(N, rows_per_chunk(V), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float* row = logits + n * V;  // (V)
      lse[n] = row_lse(row, V);
      // A label outside [0, V) reads nothing: its loss is NaN, as jnp.take_along_axis's
      // default "fill" mode gives optax's loss (the gradient skips it, as backward does).
      const int32_t t = targets[n];
      xent[n] = t >= 0 && t < V ? lse[n] - row[t] : std::numeric_limits<float>::quiet_NaN();
    }
  });
}

void softmax_cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse,
                                    const float* dxent, float* dlogits, int64_t N, int64_t V,
                                    int64_t offset) {
  parallel_for(N, rows_per_chunk(V), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float* row = logits + n * V;  // (V)
      float* drow = dlogits + n * V;      // (V)
      const Vec l = simd::set1(lse[n]), d = simd::set1(dxent[n]);
      for (int64_t v = 0; v < V; v += kW) {
        Mask m = simd::mask_for(V - v);
        simd::store(drow + v, d * simd::exp(simd::load(row + v, m) - l), m);
      }
      const int64_t t = targets[n] - offset;
      if (t >= 0 && t < V) drow[t] = dxent[n] * (std::exp(row[t] - lse[n]) - 1.f);
    }
  });
}

void vocab_max(const float* logits, float* mx, int64_t N, int64_t V) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  parallel_for(N, rows_per_chunk(V), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float* x = logits + n * V;  // (V)
      Vec m = simd::set1(kNegInf);
      for (int64_t v = 0; v < V; v += kW) m = simd::max(m, simd::load_or(x + v, simd::mask_for(V - v), kNegInf));
      mx[n] = simd::reduce_max(m);
    }
  });
}

void vocab_stats(const float* logits, const float* mx, const int32_t* targets, int64_t offset,
                 float* sumexp, float* picked, int64_t N, int64_t V) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  parallel_for(N, rows_per_chunk(V), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float* x = logits + n * V;  // (V)
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

}  // namespace eng::kern
