// engine/tensor/attention_bf16.cpp: causal, segment-aware attention on bf16 q/k/v (kernels.h,
// bf16 section). Each (batch, head) task widens its head's rows to f32 once (per-thread
// scratch), then works block by block with single-threaded sgemms, as attention.cpp does.
//
// Forward: a block of kQBlock query rows sees keys [0, end of block): its whole score row
// block is held at once (kQBlock x T floats), so the softmax is exact, with MaxText's bf16
// roundings, instead of an online (rescaled) one. Backward: FlashAttention-2's loop.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/tensor/bf16_simd.h"
#include "engine/tensor/blas.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/simd.h"

namespace eng::kern {
namespace {

using simd::kW;
using simd::Mask;
using simd::Vec;

constexpr int64_t kQBlock = 64;   // forward: query rows per block
constexpr int64_t kKBlock = 64;   // backward: keys per block (its dK, dV rows are owned)
constexpr int64_t kQChunk = 256;  // backward: queries per step within a key block
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

thread_local std::vector<float> t_scratch;

float* scratch(int64_t n) {
  if (static_cast<int64_t>(t_scratch.size()) < n) t_scratch.resize(n);
  return t_scratch.data();
}
int64_t forward_floats(int64_t T, int64_t D) { return 3 * T * D + kQBlock * (T + D); }
int64_t backward_floats(int64_t T, int64_t D) { return 7 * T * D + T + 2 * kQChunk * kKBlock; }

// One head's (T, D) rows, strided by ld, to and from compact f32.
void widen_head(const uint16_t* x, int64_t ld, int64_t T, int64_t D, float* y) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; d += kW) {
      const Mask m = simd::mask_for(D - d);
      simd::store(y + t * D + d, bf16::load(x + t * ld + d, m), m);
    }
}
void narrow_head(const float* x, int64_t T, int64_t D, uint16_t* y, int64_t ld) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; d += kW) {
      const Mask m = simd::mask_for(D - d);
      bf16::store(y + t * ld + d, simd::load(x + t * D + d, m), m);
    }
}

// One score row z[0, n) (f32 scale*q.k) of query t: rounds z, then turns the row into
// p = rb(exp(rb(z - m))) on visible keys and 0 elsewhere. Returns m; *l = rb(sum p).
float softmax_row_bf16(float* z, int64_t n, int64_t valid, const int32_t* seg, int32_t seg_t,
                       float* l) {
  Vec mx = simd::set1(kNegInf);
  for (int64_t s = 0; s < n; s += kW) {
    const Mask vis = bf16::visible(seg, s, valid, seg_t);
    mx = simd::max(mx, simd::load_or(z + s, vis, kNegInf));
  }
  const float m = bf16::round(simd::reduce_max(mx));  // max of rounded = rounded max
  const Vec mv = simd::set1(m);
  Vec acc = simd::set1(0.f);
  for (int64_t s = 0; s < n; s += kW) {
    const Mask all = simd::mask_for(n - s), vis = bf16::visible(seg, s, valid, seg_t);
    const Vec zr = bf16::round(simd::load(z + s, all));
    const Vec p = bf16::select(vis, bf16::round(simd::exp(bf16::round(zr - mv))));
    simd::store(z + s, p, all);
    acc = acc + p;
  }
  *l = bf16::round(simd::reduce_add(acc));
  return m;
}

// Query rows [q0, q0 + nq) of one head (f32 copies qf, kf, vf, compact (T, D)).
void forward_block(const float* qf, const float* kf, const float* vf, const int32_t* seg,
                   uint16_t* oh, float* lh, int64_t q0, int64_t nq, int64_t T, int64_t ld,
                   int64_t D, float scale, float* S, float* U) {
  const int64_t n = q0 + nq;  // keys [0, n): causal
  blas::sgemm(false, true, nq, n, D, scale, qf + q0 * D, D, kf, D, 0.f, S, T);
  float l[kQBlock];
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t t = q0 + i;
    const float m = softmax_row_bf16(S + i * T, n, t + 1, seg, seg ? seg[t] : 0, &l[i]);
    lh[t] = m + std::log(l[i]);
  }
  blas::sgemm(false, false, nq, D, n, 1.f, S, T, vf, D, 0.f, U, D);  // u = sum_s p v
  for (int64_t i = 0; i < nq; ++i) {
    const Vec lv = simd::set1(l[i]);
    for (int64_t d = 0; d < D; d += kW) {
      const Mask m = simd::mask_for(D - d);
      bf16::store(oh + (q0 + i) * ld + d, bf16::round(simd::load(U + i * D + d, m)) / lv, m);
    }
  }
}

}  // namespace

void attention_forward_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                            const int32_t* segment_ids, uint16_t* o, float* lse, int64_t B,
                            int64_t T, int64_t H, int64_t D, float scale) {
  const int64_t ld = H * D;
  parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
    float* qf = scratch(forward_floats(T, D));  // (T, D) each: q, k, v
    float* kf = qf + T * D;
    float* vf = kf + T * D;
    float* S = vf + T * D;      // (kQBlock, T) scores, then p
    float* U = S + kQBlock * T;  // (kQBlock, D)
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const int64_t off = b * T * ld + h * D;
      widen_head(q + off, ld, T, D, qf);
      widen_head(k + off, ld, T, D, kf);
      widen_head(v + off, ld, T, D, vf);
      const int32_t* seg = segment_ids ? segment_ids + b * T : nullptr;
      for (int64_t q0 = 0; q0 < T; q0 += kQBlock)
        forward_block(qf, kf, vf, seg, o + off, lse + bh * T, q0, std::min(kQBlock, T - q0), T,
                      ld, D, scale, S, U);
    }
  });
}

namespace {

struct HeadF32 {  // one head's compact f32 rows (T, D), and its accumulators
  float *q, *k, *v, *dout, *dq, *dk, *dv, *delta /*(T)*/, *P, *dS /*(kQChunk, kKBlock)*/;
};

// Key block [k0, k0 + nk) against query rows [qc, qc + nq): P and dS, then dV, dK, dQ.
void backward_tile(HeadF32& f, const float* lh, const int32_t* seg, int64_t k0, int64_t nk,
                   int64_t qc, int64_t nq, int64_t D, float scale) {
  blas::sgemm(false, true, nq, nk, D, scale, f.q + qc * D, D, f.k + k0 * D, D, 0.f, f.P, kKBlock);
  blas::sgemm(false, true, nq, nk, D, 1.f, f.dout + qc * D, D, f.v + k0 * D, D, 0.f, f.dS, kKBlock);
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t t = qc + i;
    float* p = f.P + i * kKBlock;
    float* ds = f.dS + i * kKBlock;
    const Vec l = simd::set1(lh[t]), dl = simd::set1(f.delta[t]);
    const int64_t valid = std::min(nk, t - k0 + 1);  // causal, relative to k0
    for (int64_t j = 0; j < nk; j += kW) {
      const Mask all = simd::mask_for(nk - j);
      const Mask vis = bf16::visible(seg ? seg + k0 : nullptr, j, valid, seg ? seg[t] : 0);
      const Vec pv = bf16::select(vis, simd::exp(bf16::round(simd::load(p + j, all)) - l));
      simd::store(p + j, pv, all);
      simd::store(ds + j, pv * (simd::load(ds + j, all) - dl), all);
    }
  }
  const float beta = qc == k0 ? 0.f : 1.f;  // first query chunk of this key block
  blas::sgemm(true, false, nk, D, nq, 1.f, f.P, kKBlock, f.dout + qc * D, D, beta, f.dv + k0 * D, D);
  blas::sgemm(true, false, nk, D, nq, scale, f.dS, kKBlock, f.q + qc * D, D, beta, f.dk + k0 * D, D);
  blas::sgemm(false, false, nq, D, nk, scale, f.dS, kKBlock, f.k + k0 * D, D, 1.f, f.dq + qc * D, D);
}

}  // namespace

void attention_backward_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             const uint16_t* o, const float* lse, const int32_t* segment_ids,
                             const uint16_t* dout, uint16_t* dq, uint16_t* dk, uint16_t* dv,
                             int64_t B, int64_t T, int64_t H, int64_t D, float scale) {
  const int64_t ld = H * D;
  parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
    float* base = scratch(backward_floats(T, D));
    HeadF32 f{};
    float* next = base;
    for (float** p : {&f.q, &f.k, &f.v, &f.dout, &f.dq, &f.dk, &f.dv}) *p = next, next += T * D;
    f.delta = next;
    f.P = f.delta + T;
    f.dS = f.P + kQChunk * kKBlock;
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const int64_t off = b * T * ld + h * D;
      widen_head(q + off, ld, T, D, f.q);
      widen_head(k + off, ld, T, D, f.k);
      widen_head(v + off, ld, T, D, f.v);
      widen_head(dout + off, ld, T, D, f.dout);
      std::memset(f.dq, 0, sizeof(float) * T * D);
      for (int64_t t = 0; t < T; ++t) {  // delta = rowsum(do * o), o as stored (bf16)
        Vec acc = simd::set1(0.f);
        for (int64_t d = 0; d < D; d += kW) {
          const Mask m = simd::mask_for(D - d);
          acc = simd::fma(simd::load(f.dout + t * D + d, m), bf16::load(o + off + t * ld + d, m), acc);
        }
        f.delta[t] = simd::reduce_add(acc);
      }
      const int32_t* seg = segment_ids ? segment_ids + b * T : nullptr;
      for (int64_t k0 = 0; k0 < T; k0 += kKBlock)
        for (int64_t qc = k0; qc < T; qc += kQChunk)  // causal: earlier queries see none of it
          backward_tile(f, lse + bh * T, seg, k0, std::min(kKBlock, T - k0), qc,
                        std::min(kQChunk, T - qc), D, scale);
      narrow_head(f.dq, T, D, dq + off, ld);
      narrow_head(f.dk, T, D, dk + off, ld);
      narrow_head(f.dv, T, D, dv + off, ld);
    }
  });
}

// The largest scratch either pass asks for at sequence length T and head dim D.
void reserve_attention_bf16_scratch(int64_t T, int64_t D) {
  scratch(std::max(forward_floats(T, D), backward_floats(T, D)));
}

}  // namespace eng::kern
