// engine/tensor/bf16_simd.h: bf16 loads, stores and in-register rounding for simd::Vec;
// private to engine/tensor/*.cpp (the bf16 kernels).
//
// Rounding is eng::f32_to_bf16's rule (dtype.h: nearest, ties to even, NaN stays NaN, denormals
// rounded, not flushed) on every CPU. Where the CPU has avx512_bf16 the rounding is one
// vcvtneps2bf16; that instruction flushes denormal inputs to zero, so lanes holding f32
// denormals are redone in software: the bits never depend on the CPU.
#pragma once

#include <cstdint>

#include "engine/tensor/dtype.h"
#include "engine/tensor/simd.h"

namespace eng::kern::bf16 {

// Whether this process uses vcvtneps2bf16 (cpu_has_avx512_bf16() and a build that can emit it):
// set once when the library loads (kernels_bf16.cpp), read inline in every rounding.
extern const bool g_hw_convert;
inline bool use_hw_convert() { return g_hw_convert; }

#if ENG_AVX512 && !(defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__))
#error "bf16 kernels: an AVX-512 build needs AVX512BW, VL and DQ (every AVX-512 CPU since 2017)"
#endif

#if ENG_AVX512
// Lanes whose bits are f32 rounded to bf16, still as f32 (low 16 bits zero); software rule.
inline __m512i round_bits_sw(__m512i u) {
  const __m512 f = _mm512_castsi512_ps(u);
  const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));  // quiet NaN, same payload
  return _mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
}

inline __m512i round_bits(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
#if defined(__AVX512BF16__)
  if (use_hw_convert()) {
    // The 16 bf16 into the high halves of the lanes, low halves zero: one word expand.
    __m512i r = _mm512_maskz_expand_epi16(
        0xAAAAAAAAu, _mm512_castsi256_si512((__m256i)_mm512_cvtneps_pbh(v)));
    const __mmask16 denormal = _mm512_fpclass_ps_mask(v, 0x20);  // 0x20: denormal
    if (denormal) r = _mm512_mask_mov_epi32(r, denormal, round_bits_sw(u));
    return r;
  }
#endif
  return round_bits_sw(u);
}

// v rounded to bf16 and widened back: a rounding point inside a kernel.
inline simd::Vec round(simd::Vec v) { return {_mm512_castsi512_ps(round_bits(v.v))}; }

inline simd::Vec load(const uint16_t* p, simd::Mask m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}

// v where m is set, 0 elsewhere.
inline simd::Vec select(simd::Mask m, simd::Vec v) { return {_mm512_maskz_mov_ps(m, v.v)}; }

// Lanes [s, s + 16) of a score row that query t may see: s < valid (causal) and, with
// segment ids, seg[s] == seg_t.
inline simd::Mask visible(const int32_t* seg, int64_t s, int64_t valid, int32_t seg_t) {
  if (s >= valid) return 0;  // mask_for wants a positive count
  const simd::Mask m = simd::mask_for(valid - s);
  if (seg == nullptr) return m;
  return _mm512_mask_cmpeq_epi32_mask(m, _mm512_maskz_loadu_epi32(m, seg + s), _mm512_set1_epi32(seg_t));
}

// The high halves of the 32-bit lanes of r (f32 already rounded to bf16), as 16 bf16. A word
// permute, not vpmovdw: Zen 4 runs vpmovdw with a memory operand (what a masked store of a
// vpmovdw result compiles to) many times slower than a permute and a store.
inline __m256i high_halves(__m512i r) {
  const __m512i idx = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
                                       31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi16(idx, r));
}

inline void store(uint16_t* p, simd::Vec v, simd::Mask m) {
#if defined(__AVX512BF16__)
  if (use_hw_convert()) {  // vcvtneps2bf16 narrows in one step; denormal lanes redone in software
    __m256i h = (__m256i)_mm512_cvtneps_pbh(v.v);
    const __mmask16 denormal = _mm512_fpclass_ps_mask(v.v, 0x20);
    if (denormal)
      h = _mm256_mask_mov_epi16(h, denormal, high_halves(round_bits_sw(_mm512_castps_si512(v.v))));
    _mm256_mask_storeu_epi16(p, m, h);
    return;
  }
#endif
  _mm256_mask_storeu_epi16(p, m, high_halves(round_bits_sw(_mm512_castps_si512(v.v))));
}
#elif ENG_AVX2
// Lanes whose bits are f32 rounded to bf16, still as f32 (low 16 bits zero); the software rule.
inline __m256i round_bits_sw(__m256i u) {
  const __m256 f = _mm256_castsi256_ps(u);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);  // quiet NaN
  return _mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
}
inline simd::Vec round(simd::Vec v) {
  return {_mm256_castsi256_ps(round_bits_sw(_mm256_castps_si256(v.v)))};
}
// 8 bf16 (16 bytes) widened to f32.
inline __m256 widen8(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline simd::Vec load(const uint16_t* p, simd::Mask m) {
  if (m.full) return {widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
  alignas(16) uint16_t buf[8] = {};
  for (int i = 0; i < m.n; ++i) buf[i] = p[i];  // only the lanes that may be read
  return {_mm256_and_ps(widen8(_mm_load_si128(reinterpret_cast<const __m128i*>(buf))),
                        _mm256_castsi256_ps(m.m))};
}
inline simd::Vec select(simd::Mask m, simd::Vec v) {
  return {_mm256_and_ps(_mm256_castsi256_ps(m.m), v.v)};
}
inline simd::Mask visible(const int32_t* seg, int64_t s, int64_t valid, int32_t seg_t) {
  const simd::Mask m = simd::mask_for(valid - s);  // no lanes when s >= valid
  if (seg == nullptr || m.n == 0) return m;
  const __m256i eq = _mm256_cmpeq_epi32(_mm256_maskload_epi32(seg + s, m.m), _mm256_set1_epi32(seg_t));
  const __m256i on = _mm256_and_si256(eq, m.m);
  return {on, m.n, _mm256_movemask_ps(_mm256_castsi256_ps(on)) == 0xff};
}
inline void store(uint16_t* p, simd::Vec v, simd::Mask m) {
  const __m256i r = _mm256_srli_epi32(round_bits_sw(_mm256_castps_si256(v.v)), 16);
  const __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  if (m.full) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
    return;
  }
  alignas(16) uint16_t buf[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(buf), h);
  const int on = _mm256_movemask_ps(_mm256_castsi256_ps(m.m));
  for (int i = 0; i < m.n; ++i)
    if ((on >> i) & 1) p[i] = buf[i];
}
#else
inline simd::Vec round(simd::Vec v) { return {bf16_to_f32(f32_to_bf16(v.v))}; }
inline simd::Vec load(const uint16_t* p, simd::Mask) { return {bf16_to_f32(*p)}; }
inline void store(uint16_t* p, simd::Vec v, simd::Mask) { *p = f32_to_bf16(v.v); }
inline simd::Vec select(simd::Mask m, simd::Vec v) { return {m ? v.v : 0.f}; }
inline simd::Mask visible(const int32_t* seg, int64_t s, int64_t valid, int32_t seg_t) {
  return s < valid && (seg == nullptr || seg[s] == seg_t);
}
#endif

inline float round(float x) { return bf16_to_f32(f32_to_bf16(x)); }

}  // namespace eng::kern::bf16
