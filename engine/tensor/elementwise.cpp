// engine/tensor/elementwise.cpp: elementwise kernels (add, mul, scale, SwiGLU, bf16
// conversion) and the AdamW update, vectorised and split over the pool when large.
#include <algorithm>
#include <cmath>

#include "engine/base/thread_pool.h"
#include "engine/tensor/bf16_simd.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/simd.h"

namespace eng::kern {
namespace {

using simd::kW;
using simd::Mask;
using simd::Vec;

// Elements per parallel chunk at least: smaller arrays run on the calling thread.
constexpr int64_t kElemGrain = 1 << 15;

// Runs body(i, mask) for every kW-wide block of [0, n), in parallel over whole blocks.
template <typename Body>
void for_each_block(int64_t n, Body&& body) {
  const int64_t blocks = (n + kW - 1) / kW;
  parallel_for(blocks, kElemGrain / kW, [&](int64_t b0, int64_t b1) {
    const int64_t hi = std::min(n, b1 * kW);
    for (int64_t i = b0 * kW; i < hi; i += kW) body(i, simd::mask_for(hi - i));
  });
}

}  // namespace

void add(const float* a, const float* b, float* y, int64_t n) {
  for_each_block(n, [&](int64_t i, Mask m) {
    simd::store(y + i, simd::load(a + i, m) + simd::load(b + i, m), m);
  });
}

void mul(const float* a, const float* b, float* y, int64_t n) {
  for_each_block(n, [&](int64_t i, Mask m) {
    simd::store(y + i, simd::load(a + i, m) * simd::load(b + i, m), m);
  });
}

void scale(const float* x, float c, float* y, int64_t n) {
  const Vec cv = simd::set1(c);
  for_each_block(n, [&](int64_t i, Mask m) { simd::store(y + i, simd::load(x + i, m) * cv, m); });
}

// Unsigned arithmetic wraps (signed overflow is undefined in C++); the conversion back to
// int32_t is modular (C++20).
void add_i32(const int32_t* a, const int32_t* b, int32_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<int32_t>(static_cast<uint32_t>(a[i]) + static_cast<uint32_t>(b[i]));
}

void mul_i32(const int32_t* a, const int32_t* b, int32_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<int32_t>(static_cast<uint32_t>(a[i]) * static_cast<uint32_t>(b[i]));
}

void scale_i32(const int32_t* x, int64_t c, int32_t* y, int64_t n) {
  const auto cu = static_cast<uint32_t>(c);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int32_t>(static_cast<uint32_t>(x[i]) * cu);
}

void matmul_i32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const int32_t* A,
                int64_t lda, const int32_t* B, int64_t ldb, int32_t* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    uint32_t* c = reinterpret_cast<uint32_t*>(C + i * ldc);
    std::fill(c, c + N, 0u);
    for (int64_t k = 0; k < K; ++k) {
      const auto a = static_cast<uint32_t>(trans_a ? A[k * lda + i] : A[i * lda + k]);
      if (trans_b) {
        for (int64_t j = 0; j < N; ++j) c[j] += a * static_cast<uint32_t>(B[j * ldb + k]);
      } else {
        const int32_t* b = B + k * ldb;
        for (int64_t j = 0; j < N; ++j) c[j] += a * static_cast<uint32_t>(b[j]);
      }
    }
  }
}

// silu(g) = g * sig(g), sig(g) = 1 / (1 + exp(-g)).
void swiglu_forward(const float* g, const float* u, float* y, int64_t n) {
  const Vec one = simd::set1(1.f), zero = simd::set1(0.f);
  for_each_block(n, [&](int64_t i, Mask m) {
    const Vec gv = simd::load(g + i, m);
    const Vec sig = one / (one + simd::exp(zero - gv));
    simd::store(y + i, gv * sig * simd::load(u + i, m), m);
  });
}

// d silu(g)/dg = sig * (1 + g * (1 - sig)).
void swiglu_backward(const float* g, const float* u, const float* dy, float* dg, float* du,
                     int64_t n) {
  const Vec one = simd::set1(1.f), zero = simd::set1(0.f);
  for_each_block(n, [&](int64_t i, Mask m) {
    const Vec gv = simd::load(g + i, m), uv = simd::load(u + i, m), dyv = simd::load(dy + i, m);
    const Vec sig = one / (one + simd::exp(zero - gv));
    simd::store(du + i, dyv * gv * sig, m);
    simd::store(dg + i, dyv * uv * sig * simd::fma(gv, one - sig, one), m);
  });
}

// Same bits as eng::f32_to_bf16 (round to nearest even, NaN stays NaN, denormals kept),
// which the hardware vcvtneps2bf16 does not promise for denormals.
void convert_f32_to_bf16(const float* x, uint16_t* y, int64_t n) {
  const int64_t blocks = (n + 15) / 16;
  parallel_for(blocks, kElemGrain / 16, [&](int64_t b0, int64_t b1) {
    int64_t i = b0 * 16;
    const int64_t hi = std::min(n, b1 * 16);
#if ENG_AVX512
    const __m512i exp_mask = _mm512_set1_epi32(0x7f800000), man_mask = _mm512_set1_epi32(0x7fffff);
    for (; i + 16 <= hi; i += 16) {
      __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x + i));
      __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, exp_mask), exp_mask) &
                      _mm512_test_epi32_mask(u, man_mask);
      __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
      __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
      r = _mm512_srli_epi32(r, 16);
      __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
      r = _mm512_mask_mov_epi32(r, nan, q);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtepi32_epi16(r));
    }
#elif ENG_AVX2
    for (; i + 8 <= hi; i += 8) bf16::store(y + i, simd::load(x + i, simd::mask_for(8)), simd::mask_for(8));
#endif
    for (; i < hi; ++i) y[i] = f32_to_bf16(x[i]);
  });
}

void convert_bf16_to_f32(const uint16_t* x, float* y, int64_t n) {
  const int64_t blocks = (n + 15) / 16;
  parallel_for(blocks, kElemGrain / 16, [&](int64_t b0, int64_t b1) {
    int64_t i = b0 * 16;
    const int64_t hi = std::min(n, b1 * 16);
#if ENG_AVX512
    for (; i + 16 <= hi; i += 16) {
      __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
      _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
#elif ENG_AVX2
    for (; i + 8 <= hi; i += 8)
      _mm256_storeu_ps(y + i, bf16::widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
#endif
    for (; i < hi; ++i) y[i] = bf16_to_f32(x[i]);
  });
}

void adamw_update(float* param, const float* grad, float* mu, float* nu, int64_t n, float lr,
                  float clip, float b1, float b2, float eps, float weight_decay, int64_t count) {
  const float c1 = 1.f - std::pow(b1, static_cast<float>(count));
  const float c2 = 1.f - std::pow(b2, static_cast<float>(count));
  const Vec clipv = simd::set1(clip), b1v = simd::set1(b1), b2v = simd::set1(b2);
  const Vec nb1 = simd::set1(1.f - b1), nb2 = simd::set1(1.f - b2);
  const Vec c1v = simd::set1(c1), c2v = simd::set1(c2), epsv = simd::set1(eps);
  const Vec wdv = simd::set1(weight_decay), lrv = simd::set1(lr);
  for_each_block(n, [&](int64_t i, Mask m) {
    const Vec g = clipv * simd::load(grad + i, m);
    const Vec mv = b1v * simd::load(mu + i, m) + nb1 * g;
    const Vec nv = b2v * simd::load(nu + i, m) + nb2 * g * g;
    const Vec p = simd::load(param + i, m);
    const Vec upd = (mv / c1v) / (simd::sqrt(nv / c2v) + epsv) + wdv * p;
    simd::store(mu + i, mv, m);
    simd::store(nu + i, nv, m);
    simd::store(param + i, p - lrv * upd, m);
  });
}

}  // namespace eng::kern
