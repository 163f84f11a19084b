// engine/tensor/attention_bf16.cpp: causal, segment-aware attention on bf16 q/k/v (kernels.h,
// bf16 section), one (batch, head) per pool task, block by block.
//
// Products of bf16 operands (q k^T, p v with p rounded to bf16, and do v^T) run on the engine's
// avx512_bf16 GEMM (bf16_gemm.h), or its AMX GEMM where the CPU has AMX, straight from the bf16
// rows; the backward's products with its f32 p and ds run as single-threaded sgemms on f32 copies of the head's rows (per-thread
// scratch). Both are f32 sums of exact products: only the summation order differs. On a CPU
// without avx512_bf16 every product is an sgemm on f32 copies (the same values).
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
#include "engine/tensor/bf16_gemm.h"
#include "engine/tensor/bf16_simd.h"
#include "engine/tensor/blas.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/simd.h"

namespace eng::kern {
namespace {

using simd::kW;
using simd::Mask;
using simd::Vec;

constexpr int64_t kQBlock = 32;   // forward: query rows per block
constexpr int64_t kKBlock = 32;   // backward: keys per block (its dK, dV rows are owned)
constexpr int64_t kQChunk = 256;  // backward: queries per step within a key block
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

thread_local std::vector<float> t_scratch;

float* scratch(int64_t n) {
  if (static_cast<int64_t>(t_scratch.size()) < n) t_scratch.resize(n);
  return t_scratch.data();
}
// Forward: f32 q, k, v copies (fallback) or packed k^T and v (native: at most
// T32 (D + 1) + D32 (T + 1) bf16 with X32 = X rounded up to 32, which packed_elems floats
// hold), then S (kQBlock, T), U (kQBlock, D), bf16 p (kQBlock, T).
int64_t packed_elems(int64_t T, int64_t D) {
  return ((T + 31) / 32 * 32 + 1) * ((D + 31) / 32 * 32 + 1);
}
int64_t forward_floats(int64_t T, int64_t D) {
  return std::max(3 * T * D, packed_elems(T, D) + 1) + kQBlock * (T + D) + kQBlock * T / 2 + 1;
}
int64_t backward_floats(int64_t T, int64_t D) { return 7 * T * D + T + 2 * kQChunk * kKBlock; }

bool native() { return detail::native_bf16_gemm_available(); }
// On a CPU with AMX the products run the AMX GEMM (vdpbf16ps runs at half the f32 FMA rate
// there), each call packing its own B: no k^T / v panels are packed per head.
bool amx() { return detail::amx_bf16_gemm_available(); }

// C (f32, row stride ldc) = A (M, K) times B (K, N), or B^T when B is (N, K): bf16 rows.
Bf16MatmulShape head_gemm(bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                          int64_t ldc) {
  return {.trans_b = trans_b, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc,
          .c_dtype = DType::kF32};
}
void gemm_bf16(bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float* C, int64_t ldc) {
  const Bf16MatmulShape s = head_gemm(trans_b, M, N, K, lda, ldb, ldc);
  if (amx()) detail::amx_gemm(s, A, B, C);
  else detail::native_gemm(s, A, B, C);
}

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

// One score row z[0, n) (f32 q.k, times `scale` here) of query t: rounds the scores, then
// p = rb(exp(rb(z - m))) on visible keys and 0 elsewhere, into pf (f32) or, when pf is null,
// pb (bf16 bits: p is a bf16 value). Returns m; *l = rb(sum p).
float softmax_row_bf16(const float* z, float scale, int64_t n, int64_t valid, const int32_t* seg,
                       int32_t seg_t, float* pf, uint16_t* pb, float* l) {
  const Vec sv = simd::set1(scale);
  Vec mx = simd::set1(kNegInf);
  for (int64_t s = 0; s < n; s += kW) {
    const Mask vis = bf16::visible(seg, s, valid, seg_t);
    mx = simd::max(mx, simd::load_or(z + s, vis, kNegInf) * sv);
  }
  const float m = bf16::round(simd::reduce_max(mx));  // max of rounded = rounded max
  const Vec mv = simd::set1(m);
  Vec acc = simd::set1(0.f);
  for (int64_t s = 0; s < n; s += kW) {
    const Mask all = simd::mask_for(n - s), vis = bf16::visible(seg, s, valid, seg_t);
    const Vec zr = bf16::round(simd::load(z + s, all) * sv);
    const Vec p = bf16::select(vis, bf16::round(simd::exp(bf16::round(zr - mv))));
    if (pf != nullptr) simd::store(pf + s, p, all);
    else bf16::store(pb + s, p, all);  // exact: p is already a bf16 value
    acc = acc + p;
  }
  *l = bf16::round(simd::reduce_add(acc));
  return m;
}

// One head's operands: bf16 rows (row stride ld) and, without native bf16 GEMMs, their f32
// copies (compact (T, D)); the forward's scratch.
struct HeadFwd {
  const uint16_t *q, *k, *v;
  const float *qf, *kf, *vf;  // null on the native path
  uint16_t *kp, *vp;          // native: k^T's and v's packed GEMM panels (all T keys)
  float *S, *U;               // (kQBlock, T) scores (then f32 p), (kQBlock, D)
  uint16_t* Pb;               // (kQBlock, T) bf16 p (native path)
};

// S = q k^T for query rows [q0, q0 + nq) and keys [0, n), and U = p v after the softmax.
void scores(const HeadFwd& h, int64_t q0, int64_t nq, int64_t n, int64_t T, int64_t ld, int64_t D,
            float scale) {
  if (h.qf == nullptr && amx())
    gemm_bf16(true, nq, n, D, h.q + q0 * ld, ld, h.k, ld, h.S, T);
  else if (h.qf == nullptr)
    detail::native_gemm_packed_b(head_gemm(true, nq, n, D, ld, ld, T), h.q + q0 * ld, h.kp, D, h.S);
  else blas::sgemm(false, true, nq, n, D, scale, h.qf + q0 * D, D, h.kf, D, 0.f, h.S, T);
}
void weighted_values(const HeadFwd& h, int64_t nq, int64_t n, int64_t T, int64_t ld, int64_t D) {
  if (h.qf == nullptr && amx())
    gemm_bf16(false, nq, D, n, h.Pb, T, h.v, ld, h.U, D);
  else if (h.qf == nullptr && n % 2 == 0)  // v packed for K = T serves K = n when n is even
    detail::native_gemm_packed_b(head_gemm(false, nq, D, n, T, ld, D), h.Pb, h.vp, T, h.U);
  else if (h.qf == nullptr)
    gemm_bf16(false, nq, D, n, h.Pb, T, h.v, ld, h.U, D);
  else blas::sgemm(false, false, nq, D, n, 1.f, h.S, T, h.vf, D, 0.f, h.U, D);
}

// Query rows [q0, q0 + nq) of one head.
void forward_block(const HeadFwd& h, const int32_t* seg, uint16_t* oh, float* lh, int64_t q0,
                   int64_t nq, int64_t T, int64_t ld, int64_t D, float scale) {
  const int64_t n = q0 + nq;  // keys [0, n): causal
  scores(h, q0, nq, n, T, ld, D, scale);
  const bool nat = h.qf == nullptr;
  float l[kQBlock];
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t t = q0 + i;
    const float m = softmax_row_bf16(h.S + i * T, nat ? scale : 1.f, n, t + 1, seg,
                                     seg ? seg[t] : 0, nat ? nullptr : h.S + i * T,
                                     h.Pb + i * T, &l[i]);
    lh[t] = m + std::log(l[i]);
  }
  weighted_values(h, nq, n, T, ld, D);  // u = sum_s p v
  for (int64_t i = 0; i < nq; ++i) {
    const Vec lv = simd::set1(l[i]);
    for (int64_t d = 0; d < D; d += kW) {
      const Mask m = simd::mask_for(D - d);
      bf16::store(oh + (q0 + i) * ld + d, bf16::round(simd::load(h.U + i * D + d, m)) / lv, m);
    }
  }
}

}  // namespace

void attention_forward_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                            const int32_t* segment_ids, uint16_t* o, float* lse, int64_t B,
                            int64_t T, int64_t H, int64_t D, float scale) {
  const int64_t ld = H * D;
  const bool nat = native();
  parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
    float* base = scratch(forward_floats(T, D));
    float* qf = base;  // (T, D) each: q, k, v (fallback path)
    float* kf = qf + T * D;
    float* vf = kf + T * D;
    HeadFwd h{};
    h.S = vf + T * D;
    h.U = h.S + kQBlock * T;
    h.Pb = reinterpret_cast<uint16_t*>(h.U + kQBlock * D);
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / H, hd = bh % H;
      const int64_t off = b * T * ld + hd * D;
      h.q = q + off, h.k = k + off, h.v = v + off;
      if (nat && amx()) {
        // nothing to pack: each product packs its B (gemm_bf16)
      } else if (nat) {
        h.kp = reinterpret_cast<uint16_t*>(base);  // the fallback's f32 copies' place
        const Bf16MatmulShape ks = head_gemm(true, 0, T, D, ld, ld, T);
        h.vp = h.kp + detail::packed_b_elems_all(ks);
        detail::pack_b_all(ks, h.k, h.kp);
        detail::pack_b_all(head_gemm(false, 0, D, T, T, ld, D), h.v, h.vp);
      } else {
        widen_head(q + off, ld, T, D, qf);
        widen_head(k + off, ld, T, D, kf);
        widen_head(v + off, ld, T, D, vf);
        h.qf = qf, h.kf = kf, h.vf = vf;
      }
      const int32_t* seg = segment_ids ? segment_ids + b * T : nullptr;
      for (int64_t q0 = 0; q0 < T; q0 += kQBlock)
        forward_block(h, seg, o + off, lse + bh * T, q0, std::min(kQBlock, T - q0), T, ld, D,
                      scale);
    }
  });
}

namespace {

struct HeadF32 {  // one head's compact f32 rows (T, D), and its accumulators
  float *q, *k, *v, *dout, *dq, *dk, *dv, *delta /*(T)*/, *P, *dS /*(kQChunk, kKBlock)*/;
  const uint16_t *qb, *kb, *vb, *doutb;  // the bf16 rows (stride ld): native products
  int64_t ld;
  bool native;
};

// P = q k^T (unscaled on the native path) and dS = do v^T for the tile.
void tile_products(HeadF32& f, int64_t k0, int64_t nk, int64_t qc, int64_t nq, int64_t D,
                   float scale) {
  const int64_t ld = f.ld;
  if (f.native) {
    gemm_bf16(true, nq, nk, D, f.qb + qc * ld, ld, f.kb + k0 * ld, ld, f.P, kKBlock);
    gemm_bf16(true, nq, nk, D, f.doutb + qc * ld, ld, f.vb + k0 * ld, ld, f.dS, kKBlock);
    return;
  }
  blas::sgemm(false, true, nq, nk, D, scale, f.q + qc * D, D, f.k + k0 * D, D, 0.f, f.P, kKBlock);
  blas::sgemm(false, true, nq, nk, D, 1.f, f.dout + qc * D, D, f.v + k0 * D, D, 0.f, f.dS, kKBlock);
}

// Key block [k0, k0 + nk) against query rows [qc, qc + nq): P and dS, then dV, dK, dQ.
void backward_tile(HeadF32& f, const float* lh, const int32_t* seg, int64_t k0, int64_t nk,
                   int64_t qc, int64_t nq, int64_t D, float scale) {
  tile_products(f, k0, nk, qc, nq, D, scale);
  const Vec sv = simd::set1(f.native ? scale : 1.f);
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t t = qc + i;
    float* p = f.P + i * kKBlock;
    float* ds = f.dS + i * kKBlock;
    const Vec l = simd::set1(lh[t]), dl = simd::set1(f.delta[t]);
    const int64_t valid = std::min(nk, t - k0 + 1);  // causal, relative to k0
    for (int64_t j = 0; j < nk; j += kW) {
      const Mask all = simd::mask_for(nk - j);
      const Mask vis = bf16::visible(seg ? seg + k0 : nullptr, j, valid, seg ? seg[t] : 0);
      const Vec z = bf16::round(simd::load(p + j, all) * sv);
      const Vec pv = bf16::select(vis, simd::exp(z - l));
      simd::store(p + j, pv, all);
      simd::store(ds + j, pv * (simd::load(ds + j, all) - dl), all);
    }
  }
  const float beta = qc == k0 ? 0.f : 1.f;  // first query chunk of this key block
  blas::sgemm(true, false, nk, D, nq, 1.f, f.P, kKBlock, f.dout + qc * D, D, beta, f.dv + k0 * D, D);
  blas::sgemm(true, false, nk, D, nq, scale, f.dS, kKBlock, f.q + qc * D, D, beta, f.dk + k0 * D, D);
  blas::sgemm(false, false, nq, D, nk, scale, f.dS, kKBlock, f.k + k0 * D, D, 1.f, f.dq + qc * D, D);
}

// One head's f32 copies (v only without native products), dq zeroed, delta = rowsum(do * o)
// with o as stored (bf16).
void prepare_head(HeadF32& f, const uint16_t* o, int64_t T, int64_t D) {
  const int64_t ld = f.ld;
  widen_head(f.qb, ld, T, D, f.q);
  widen_head(f.kb, ld, T, D, f.k);
  if (!f.native) widen_head(f.vb, ld, T, D, f.v);
  widen_head(f.doutb, ld, T, D, f.dout);
  std::memset(f.dq, 0, sizeof(float) * T * D);
  for (int64_t t = 0; t < T; ++t) {
    Vec acc = simd::set1(0.f);
    for (int64_t d = 0; d < D; d += kW) {
      const Mask m = simd::mask_for(D - d);
      acc = simd::fma(simd::load(f.dout + t * D + d, m), bf16::load(o + t * ld + d, m), acc);
    }
    f.delta[t] = simd::reduce_add(acc);
  }
}

}  // namespace

void attention_backward_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             const uint16_t* o, const float* lse, const int32_t* segment_ids,
                             const uint16_t* dout, uint16_t* dq, uint16_t* dk, uint16_t* dv,
                             int64_t B, int64_t T, int64_t H, int64_t D, float scale) {
  const int64_t ld = H * D;
  const bool nat = native();
  parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
    float* base = scratch(backward_floats(T, D));
    HeadF32 f{};
    float* next = base;
    for (float** p : {&f.q, &f.k, &f.v, &f.dout, &f.dq, &f.dk, &f.dv}) *p = next, next += T * D;
    f.delta = next;
    f.P = f.delta + T;
    f.dS = f.P + kQChunk * kKBlock;
    f.ld = ld;
    f.native = nat;
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const int64_t off = b * T * ld + h * D;
      f.qb = q + off, f.kb = k + off, f.vb = v + off, f.doutb = dout + off;
      prepare_head(f, o + off, T, D);
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

// The largest scratch either pass asks for at sequence length T and head dim D, and the bf16
// GEMM's packing buffers for the head-sized products.
void reserve_attention_bf16_scratch(int64_t T, int64_t D) {
  scratch(std::max(forward_floats(T, D), backward_floats(T, D)));
  if (!native()) return;
  const int64_t q = std::min(kQBlock, T);
  for (const Bf16MatmulShape& s :
       {head_gemm(true, q, T, D, D, D, T), head_gemm(false, q, D, T, T, D, D),
        head_gemm(true, std::min(kQChunk, T), std::min(kKBlock, T), D, D, D, kKBlock)})
    detail::thread_matmul_scratch(detail::native_gemm_scratch_bytes(s));
  if (!amx()) return;
  // p v with n <= T keys packs at most as much as with T: at most 32 rows of padded_k(T) for A
  // (packed, or the tail block of an A read in place) and T's panels of B.
  for (const Bf16MatmulShape& s :
       {head_gemm(true, q, T, D, D, D, T), head_gemm(false, q, D, T, T, D, D),
        head_gemm(true, std::min(kQChunk, T), std::min(kKBlock, T), D, D, D, kKBlock)})
    detail::thread_matmul_scratch(detail::amx_gemm_scratch_bytes(s));
}

}  // namespace eng::kern
