// engine/tensor/simd.h: a tiny float-vector type for the kernels (AVX-512 when the build
// has it, else AVX2+FMA, else one float), so each loop is written once; private to
// engine/tensor/*.cpp. kSimdPath names the one compiled in (system_info's "simd").
//
//   for (int64_t i = 0; i < n; i += simd::kW) {
//     simd::Mask m = simd::mask_for(n - i);              // tail lanes off
//     simd::store(y + i, simd::load(a + i, m) * c, m);
//   }
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__AVX512F__)
// GCC 12 warns inside its own AVX-512 headers (PR105593, _mm512_undefined_*), wherever the
// intrinsics are inlined; the pragma region covers the header's lines.
// (clang has no -Wmaybe-uninitialized and would reject it under -Werror: GCC only.)
#if defined(__clang__)
#include <immintrin.h>
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#define ENG_AVX512 1
#define ENG_AVX2 0
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define ENG_AVX512 0
#define ENG_AVX2 1
#else
#define ENG_AVX512 0
#define ENG_AVX2 0
#endif

namespace eng::kern::simd {

constexpr const char* kSimdPath = ENG_AVX512 ? "avx512" : ENG_AVX2 ? "avx2" : "scalar";

#if ENG_AVX512
constexpr int64_t kW = 16;  // lanes
using Mask = __mmask16;
struct Vec {
  __m512 v;
};
inline Mask mask_for(int64_t r) {
  return r >= 16 ? static_cast<Mask>(0xFFFF) : static_cast<Mask>((1u << r) - 1u);
}
inline Vec set1(float x) { return {_mm512_set1_ps(x)}; }
inline Vec load(const float* p, Mask m) { return {_mm512_maskz_loadu_ps(m, p)}; }
// Masked-off lanes read as `fill` (e.g. -inf before a max).
inline Vec load_or(const float* p, Mask m, float fill) {
  return {_mm512_mask_loadu_ps(_mm512_set1_ps(fill), m, p)};
}
inline void store(float* p, Vec v, Mask m) { _mm512_mask_storeu_ps(p, m, v.v); }
inline Vec operator+(Vec a, Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
inline Vec operator-(Vec a, Vec b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline Vec operator*(Vec a, Vec b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline Vec operator/(Vec a, Vec b) { return {_mm512_div_ps(a.v, b.v)}; }
inline Vec fma(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }  // a*b+c
inline Vec max(Vec a, Vec b) { return {_mm512_max_ps(a.v, b.v)}; }
inline Vec sqrt(Vec a) { return {_mm512_sqrt_ps(a.v)}; }
inline float reduce_add(Vec a) { return _mm512_reduce_add_ps(a.v); }
inline float reduce_max(Vec a) { return _mm512_reduce_max_ps(a.v); }

// exp(x), relative error ~2 ulp: x = n ln2 + r, |r| <= ln2/2, Cephes polynomial for e^r,
// then scalef(p, n) = p * 2^n, which under/overflows to 0/inf cleanly; exp(-inf) = 0.
inline Vec exp(Vec a) {
  __m512 x = _mm512_max_ps(_mm512_set1_ps(-104.f), a.v);  // this operand order keeps NaN
  x = _mm512_min_ps(_mm512_set1_ps(89.f), x);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return {_mm512_scalef_ps(p, n)};
}
#elif ENG_AVX2
constexpr int64_t kW = 8;  // lanes
// Lanes on (all bits set) in m; n: lanes [0, n) may be read (the prefix mask_for gave); full:
// every lane on (plain loads and stores).
struct Mask {
  __m256i m;
  int n;
  bool full;
};
inline Mask mask_for(int64_t r) {
  const int n = r >= 8 ? 8 : r <= 0 ? 0 : static_cast<int>(r);
  return {_mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), n,
          n == 8};
}
struct Vec {
  __m256 v;
};
inline Vec set1(float x) { return {_mm256_set1_ps(x)}; }
inline Vec load(const float* p, Mask m) {
  return {m.full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m.m)};
}
inline Vec load_or(const float* p, Mask m, float fill) {
  if (m.full) return {_mm256_loadu_ps(p)};
  return {_mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m.m), _mm256_castsi256_ps(m.m))};
}
inline void store(float* p, Vec v, Mask m) {
  if (m.full) _mm256_storeu_ps(p, v.v);
  else _mm256_maskstore_ps(p, m.m, v.v);
}
inline Vec operator+(Vec a, Vec b) { return {_mm256_add_ps(a.v, b.v)}; }
inline Vec operator-(Vec a, Vec b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline Vec operator*(Vec a, Vec b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline Vec operator/(Vec a, Vec b) { return {_mm256_div_ps(a.v, b.v)}; }
inline Vec fma(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }  // a*b+c
inline Vec max(Vec a, Vec b) { return {_mm256_max_ps(a.v, b.v)}; }
inline Vec sqrt(Vec a) { return {_mm256_sqrt_ps(a.v)}; }
// Lanes combined in a fixed order: (0+4, 1+5, 2+6, 3+7), then pairs, then the last two.
inline float reduce_add(Vec a) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}
inline float reduce_max(Vec a) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// exp(x) as the AVX-512 version (the same polynomial); 2^n is applied as two factors
// 2^(n/2) and 2^(n - n/2), each a normal float, so results under- and overflow to 0 and inf
// as scalef's do; exp(-inf) = 0, NaN stays NaN.
inline Vec exp(Vec a) {
  __m256 x = _mm256_max_ps(_mm256_set1_ps(-104.f), a.v);  // this operand order keeps NaN
  x = _mm256_min_ps(_mm256_set1_ps(89.f), x);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return {_mm256_mul_ps(_mm256_mul_ps(p, f1), f2)};
}
#else
constexpr int64_t kW = 1;
using Mask = bool;
struct Vec {
  float v;
};
inline Mask mask_for(int64_t r) { return r > 0; }
inline Vec set1(float x) { return {x}; }
inline Vec load(const float* p, Mask) { return {*p}; }
inline Vec load_or(const float* p, Mask m, float fill) { return {m ? *p : fill}; }
inline void store(float* p, Vec v, Mask) { *p = v.v; }
inline Vec operator+(Vec a, Vec b) { return {a.v + b.v}; }
inline Vec operator-(Vec a, Vec b) { return {a.v - b.v}; }
inline Vec operator*(Vec a, Vec b) { return {a.v * b.v}; }
inline Vec operator/(Vec a, Vec b) { return {a.v / b.v}; }
inline Vec fma(Vec a, Vec b, Vec c) { return {a.v * b.v + c.v}; }
inline Vec max(Vec a, Vec b) { return {std::max(a.v, b.v)}; }
inline Vec sqrt(Vec a) { return {std::sqrt(a.v)}; }
inline float reduce_add(Vec a) { return a.v; }
inline float reduce_max(Vec a) { return a.v; }
inline Vec exp(Vec a) { return {std::exp(a.v)}; }
#endif

// sum_i a[i] * b[i] over n floats, lanes combined in a fixed order.
inline float dot(const float* a, const float* b, int64_t n) {
  Vec acc = set1(0.f);
  for (int64_t i = 0; i < n; i += kW) {
    Mask m = mask_for(n - i);
    acc = fma(load(a + i, m), load(b + i, m), acc);
  }
  return reduce_add(acc);
}

}  // namespace eng::kern::simd
