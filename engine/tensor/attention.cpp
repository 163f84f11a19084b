// engine/tensor/attention.cpp: causal flash-style attention: query x key blocks through small
// single-threaded sgemms on strided head slices, online softmax, no (T, T) tensor.
//
// A head's rows are strided by H*D in (B, T, H, D), which sgemm takes as a leading dimension,
// so q/k/v/o are never copied. Scratch is per thread, grown on first use.
//
// Segment ids (packed sequences, MaxText's inputs_segmentation): key s is visible to query t
// iff s <= t and seg[s] == seg[t]; the scores of other keys in the causal prefix are masked to
// -inf (forward) and their probabilities to 0 (backward). Query t's own key is always visible,
// so every row keeps a finite max.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/tensor/blas.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/simd.h"

namespace eng::kern {
namespace {

using simd::kW;
using simd::Mask;
using simd::Vec;

constexpr int64_t kQBlock = 64;    // forward: query rows per block
constexpr int64_t kKChunk = 512;   // forward: keys per online-softmax step (>= T: exact softmax)
constexpr int64_t kKBlock = 64;    // backward: keys per block (dK, dV of a block are owned)
constexpr int64_t kQChunk = 512;   // backward: queries per step within a key block
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

thread_local std::vector<float> t_scratch;

float* scratch(int64_t n) {
  if (static_cast<int64_t>(t_scratch.size()) < n) t_scratch.resize(n);
  return t_scratch.data();
}

void scale_row(float* x, int64_t n, float c) {
  const Vec cv = simd::set1(c);
  for (int64_t i = 0; i < n; i += kW) {
    Mask m = simd::mask_for(n - i);
    simd::store(x + i, simd::load(x + i, m) * cv, m);
  }
}

// Row of scores s[0, nk): keeps the first `valid` entries, zeroes the rest; online softmax
// step: returns the new max, turns s into exp(s - new max), adds the row sum to *l after
// rescaling it by exp(old max - new max) (returned through *alpha).
float softmax_step(float* s, int64_t nk, int64_t valid, float m_old, float* l, float* alpha) {
  Vec mx = simd::set1(kNegInf);
  for (int64_t j = 0; j < valid; j += kW)
    mx = simd::max(mx, simd::load_or(s + j, simd::mask_for(valid - j), kNegInf));
  const float m_new = std::max(m_old, simd::reduce_max(mx));
  const Vec mv = simd::set1(m_new);
  Vec acc = simd::set1(0.f);
  for (int64_t j = 0; j < valid; j += kW) {
    Mask m = simd::mask_for(valid - j);
    Vec p = simd::exp(simd::load(s + j, m) - mv);
    simd::store(s + j, p, m);
    acc = acc + simd::load(s + j, m);  // masked lanes read 0
  }
  if (valid < nk) std::memset(s + valid, 0, sizeof(float) * (nk - valid));
  *alpha = m_old == kNegInf ? 0.f : std::exp(m_old - m_new);
  *l = *l * *alpha + simd::reduce_add(acc);
  return m_new;
}

// Masks s[j] (key k0 + j) of query t to -inf where the segments differ; returns how many of
// the first `valid` stay visible.
int64_t mask_segments(float* s, int64_t valid, const int32_t* seg, int64_t t, int64_t k0) {
  int64_t visible = 0;
  for (int64_t j = 0; j < valid; ++j) {
    if (seg[k0 + j] == seg[t]) ++visible;
    else s[j] = kNegInf;
  }
  return visible;
}

// One query block [q0, q0 + nq) of one head: o rows and lse entries. seg: the batch row's
// segment ids (T), or null.
void forward_block(const float* qh, const float* kh, const float* vh, float* oh, float* lh,
                   const int32_t* seg, int64_t q0, int64_t nq, int64_t ld, int64_t D,
                   float scale) {
  float* S = scratch(kQBlock * kKChunk + 2 * kQBlock);  // (nq, kKChunk) scores, m, l
  float* mrow = S + kQBlock * kKChunk;                  // (nq)
  float* lrow = mrow + kQBlock;                         // (nq)
  std::fill(mrow, mrow + nq, kNegInf);
  std::fill(lrow, lrow + nq, 0.f);
  const int64_t qend = q0 + nq;  // causal: keys [0, qend) only; later blocks are skipped
  for (int64_t k0 = 0; k0 < qend; k0 += kKChunk) {
    const int64_t nk = std::min(kKChunk, qend - k0);
    blas::sgemm(false, true, nq, nk, D, scale, qh + q0 * ld, ld, kh + k0 * ld, ld, 0.f, S, kKChunk);
    for (int64_t i = 0; i < nq; ++i) {
      float* s = S + i * kKChunk;
      const int64_t valid = std::min(nk, q0 + i - k0 + 1);
      // every key of this chunk is after query t, or in another segment
      if (valid <= 0 || (seg != nullptr && mask_segments(s, valid, seg, q0 + i, k0) == 0)) {
        std::memset(s, 0, sizeof(float) * nk);
        continue;
      }
      float alpha;
      mrow[i] = softmax_step(s, nk, valid, mrow[i], &lrow[i], &alpha);
      if (k0 > 0 && alpha != 1.f) scale_row(oh + (q0 + i) * ld, D, alpha);
    }
    blas::sgemm(false, false, nq, D, nk, 1.f, S, kKChunk, vh + k0 * ld, ld, k0 == 0 ? 0.f : 1.f,
                oh + q0 * ld, ld);
  }
  for (int64_t i = 0; i < nq; ++i) {
    scale_row(oh + (q0 + i) * ld, D, 1.f / lrow[i]);
    lh[q0 + i] = mrow[i] + std::log(lrow[i]);
  }
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, float* o, float* lse,
                       int64_t B, int64_t T, int64_t H, int64_t D, float scale,
                       const int32_t* segment_ids) {
  const int64_t ld = H * D;  // row stride of one head's (T, D) slice
  const int64_t nqb = (T + kQBlock - 1) / kQBlock;
  parallel_for(B * H * nqb, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t bh = task / nqb, qb = task % nqb;
      const int64_t b = bh / H, h = bh % H;
      const int64_t off = b * T * ld + h * D;
      const int64_t q0 = qb * kQBlock;
      const int32_t* seg = segment_ids == nullptr ? nullptr : segment_ids + b * T;
      forward_block(q + off, k + off, v + off, o + off, lse + bh * T, seg, q0,
                    std::min(kQBlock, T - q0), ld, D, scale);
    }
  });
}

namespace {

// One head, FlashAttention-2 style: per key block, recompute P = exp(scale q.k - lse) for the
// queries at or after it, then dV, dK (owned by the block) and dQ (accumulated) by sgemm.
void backward_head(const float* qh, const float* kh, const float* vh, const float* oh,
                   const float* lh, const float* doh, const int32_t* seg, float* dqh, float* dkh,
                   float* dvh, int64_t T, int64_t ld, int64_t D, float scale) {
  float* P = scratch(2 * kQChunk * kKBlock + T);  // (nq, kKBlock) probabilities
  float* dS = P + kQChunk * kKBlock;              // (nq, kKBlock) dP, then dS
  float* delta = dS + kQChunk * kKBlock;          // (T) rowsum(dO * O)
  for (int64_t t = 0; t < T; ++t) {
    delta[t] = simd::dot(doh + t * ld, oh + t * ld, D);
    std::memset(dqh + t * ld, 0, sizeof(float) * D);
  }
  for (int64_t k0 = 0; k0 < T; k0 += kKBlock) {
    const int64_t nk = std::min(kKBlock, T - k0);
    for (int64_t qc = k0; qc < T; qc += kQChunk) {  // causal: queries before k0 see none of it
      const int64_t nq = std::min(kQChunk, T - qc);
      const float beta = qc == k0 ? 0.f : 1.f;
      blas::sgemm(false, true, nq, nk, D, scale, qh + qc * ld, ld, kh + k0 * ld, ld, 0.f, P, kKBlock);
      blas::sgemm(false, true, nq, nk, D, 1.f, doh + qc * ld, ld, vh + k0 * ld, ld, 0.f, dS, kKBlock);
      for (int64_t i = 0; i < nq; ++i) {
        float* p = P + i * kKBlock;
        float* ds = dS + i * kKBlock;
        const int64_t valid = std::min(nk, qc + i - k0 + 1);
        const Vec l = simd::set1(lh[qc + i]), dl = simd::set1(delta[qc + i]);
        for (int64_t j = 0; j < valid; j += kW) {
          Mask m = simd::mask_for(valid - j);
          const Vec pv = simd::exp(simd::load(p + j, m) - l);
          simd::store(p + j, pv, m);
          simd::store(ds + j, pv * (simd::load(ds + j, m) - dl), m);
        }
        if (valid < nk) {
          std::memset(p + valid, 0, sizeof(float) * (nk - valid));
          std::memset(ds + valid, 0, sizeof(float) * (nk - valid));
        }
        if (seg != nullptr)  // keys of other segments: no probability, no gradient
          for (int64_t j = 0; j < valid; ++j)
            if (seg[k0 + j] != seg[qc + i]) p[j] = ds[j] = 0.f;
      }
      blas::sgemm(true, false, nk, D, nq, 1.f, P, kKBlock, doh + qc * ld, ld, beta, dvh + k0 * ld, ld);
      blas::sgemm(true, false, nk, D, nq, scale, dS, kKBlock, qh + qc * ld, ld, beta, dkh + k0 * ld, ld);
      blas::sgemm(false, false, nq, D, nk, scale, dS, kKBlock, kh + k0 * ld, ld, 1.f, dqh + qc * ld, ld);
    }
  }
}

}  // namespace

void attention_backward(const float* q, const float* k, const float* v, const float* o,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv,
                        int64_t B, int64_t T, int64_t H, int64_t D, float scale,
                        const int32_t* segment_ids) {
  const int64_t ld = H * D;
  // Parallel over (batch, head): dQ sums over key blocks, so one head stays on one thread.
  parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const int64_t off = b * T * ld + h * D;
      const int32_t* seg = segment_ids == nullptr ? nullptr : segment_ids + b * T;
      backward_head(q + off, k + off, v + off, o + off, lse + bh * T, dout + off, seg, dq + off,
                    dk + off, dv + off, T, ld, D, scale);
    }
  });
}

// The largest scratch either pass asks for at sequence length T (see scratch() calls above).
void reserve_attention_scratch(int64_t T) {
  scratch(std::max(kQBlock * kKChunk + 2 * kQBlock, 2 * kQChunk * kKBlock + T));
}

}  // namespace eng::kern
