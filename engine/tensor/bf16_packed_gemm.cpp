// engine/tensor/bf16_packed_gemm.cpp: the bf16 GEMM for CPUs without avx512_bf16
// (MatmulBackend::kPacked): bf16 operands widened to f32 while they are packed, an f32 FMA
// micro-kernel (AVX2+FMA: 6 x 16, AVX-512F: 6 x 32), f32 sums, C rounded once at the end.
//
// GotoBLAS-style, as bf16_gemm.cpp: op(B) is packed (in parallel, all of K, up to kPackedB
// floats per pass of columns) into panels of kNR columns, widened to f32 on the way, stored
// k-block by k-block (a tile's panels for one block are contiguous); then the pass is cut into
// tiles of at most kMC rows x kNC columns, sized per shape (grid(): few large tiles, a count
// that is a multiple of the threads when there are few), which go to the pool. A tile walks K
// in blocks of kKC: it packs its rows of op(A) for the block (widened, kMR-row groups), and
// every (panel, row group) pair runs the micro-kernel over the block, adding into the tile's
// f32 sums (kept in the thread's scratch). After the last block the sums go to C (f32, or
// rounded to bf16; added to C's old values when accumulating). The operands stay bf16 in
// memory; only a tile's block of A (kMC x kKC) and the pass's panels of B exist as f32, in
// per-thread scratch. Software prefetch covers what the hardware prefetcher misses: B's
// panels 32 k-steps ahead in the micro-kernel (the first row group reads them from L3), and
// transposed A's rows (lda apart) 8 rows ahead while packing.
//
// Every element of C is the same f32 sum in the same order (k = 0, 1, ..., K - 1, one FMA
// chain: the sums are stored and reloaded exactly between k blocks) for any thread count and
// any tiling. The sums differ from the convert+sgemm fallback's only in order
// (docs/precision.md).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "engine/base/check.h"
#include "engine/base/thread_pool.h"
#include "engine/tensor/bf16_gemm.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/simd.h"  // immintrin.h (AVX-512 builds)

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace eng::kern::detail {

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
namespace {

#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;
using VF = __m512;
[[gnu::always_inline]] inline VF vzero() { return _mm512_setzero_ps(); }
[[gnu::always_inline]] inline VF vload(const float* p) { return _mm512_loadu_ps(p); }
[[gnu::always_inline]] inline void vstore(float* p, VF v) { _mm512_storeu_ps(p, v); }
[[gnu::always_inline]] inline VF vbroadcast(const float* p) { return _mm512_set1_ps(*p); }
[[gnu::always_inline]] inline VF vfma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
// 16 bf16 -> 16 f32 (exact: the bf16 bits are the f32's high half).
inline void widen_lanes(const uint16_t* x, float* y) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  _mm512_storeu_ps(y, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
}
constexpr const char* kIsa = "avx512f";
#else
constexpr int64_t kLanes = 8;
using VF = __m256;
[[gnu::always_inline]] inline VF vzero() { return _mm256_setzero_ps(); }
[[gnu::always_inline]] inline VF vload(const float* p) { return _mm256_loadu_ps(p); }
[[gnu::always_inline]] inline void vstore(float* p, VF v) { _mm256_storeu_ps(p, v); }
[[gnu::always_inline]] inline VF vbroadcast(const float* p) { return _mm256_broadcast_ss(p); }
[[gnu::always_inline]] inline VF vfma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
inline void widen_lanes(const uint16_t* x, float* y) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  _mm256_storeu_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
}
constexpr const char* kIsa = "avx2";
#endif

constexpr int64_t kMR = 6;               // micro-kernel rows
constexpr int64_t kNR = 2 * kLanes;      // micro-kernel columns: two vectors (12 accumulators)
constexpr int64_t kKC = 256;             // k per block: a panel of B's block is kKC x kNR f32
constexpr int64_t kMC = kPackedTaskRows;  // rows per pool task at most (whole kMR groups)
static_assert(kMC % kMR == 0);
constexpr int64_t kNC = 512;             // columns per task at most (whole panels)
static_assert(kNC % kNR == 0);
constexpr int64_t kPrefetchK = 32;
constexpr int64_t kPackedB = int64_t{4} << 20;  // f32 elements of B packed per pass (16 MiB)

// Per-thread scratch (thread_matmul_scratch), in floats: [A block: kMC x kKC | C tile: kMC x kNC |
// B panels: the calling thread's, read by the workers].
constexpr int64_t kAElems = kMC * kKC, kCElems = kMC * kNC;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
// Columns packed per pass: all of N when that fits in kPackedB floats, else whole tasks' worth.
int64_t pass_cols(const Bf16MatmulShape& s) {
  const int64_t per_chunk = std::max<int64_t>(1, kNC * s.K);
  return std::min(s.N, std::max<int64_t>(1, kPackedB / per_chunk) * kNC);
}
int64_t packed_b_elems(const Bf16MatmulShape& s) { return round_up(pass_cols(s), kNR) * s.K; }

float* scratch(int64_t floats) { return static_cast<float*>(thread_matmul_scratch(4 * floats)); }

// Panel j of op(B)'s pass (columns [j kNR, j kNR + kNR) of B) over all of K, widened, zero past
// N, laid out by k-block: the pass's panels are stored block after block ([k0 / kKC][panel][k in
// block][kNR]), so a tile's panels for one block are contiguous (panel-major over all of K put
// them K x kNR x 4 bytes apart: at large K, on the same cache sets).
// `dst` is the pass's packed B, np its panel count, jp the panel's index in the pass.
float* b_block(float* pass, int64_t np, int64_t K, int64_t k0, int64_t jp) {
  return pass + k0 * np * kNR + jp * std::min(kKC, K - k0) * kNR;
}
void pack_b_panel(const Bf16MatmulShape& s, const uint16_t* B, int64_t j, float* pass, int64_t np,
                  int64_t jp) {
  const int64_t n0 = j * kNR, nn = std::min(kNR, s.N - n0);
  for (int64_t k0 = 0; k0 < s.K; k0 += kKC) {
    const int64_t kc = std::min(kKC, s.K - k0);
    float* dst = b_block(pass, np, s.K, k0, jp);
    if (!s.trans_b && nn == kNR) {
      for (int64_t k = 0; k < kc; ++k) {
        const uint16_t* row = B + (k0 + k) * s.ldb + n0;
        widen_lanes(row, dst + k * kNR);
        widen_lanes(row + kLanes, dst + k * kNR + kLanes);
      }
    } else if (!s.trans_b) {
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t c = 0; c < kNR; ++c)
          dst[k * kNR + c] = c < nn ? bf16_to_f32(B[(k0 + k) * s.ldb + n0 + c]) : 0.f;
    } else {
      // B is (N, K): column c of the panel is row n0 + c of B, contiguous in k. k outer: the
      // block is written in order while the nn rows are read as nn sequential streams.
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t c = 0; c < kNR; ++c)
          dst[k * kNR + c] = c < nn ? bf16_to_f32(B[(n0 + c) * s.ldb + k0 + k]) : 0.f;
    }
  }
}

// Rows [m0, m0 + mm) of op(A), k in [k0, k0 + kc), as groups of kMR rows: dst[g][k][r] (zero
// past M). Not transposed: each row's run of k is widened kLanes at a time into a row buffer,
// then scattered into the group layout; transposed (A is (K, M)): the group's kMR rows are
// contiguous in each row k of A, read in order.
void pack_a_block(const Bf16MatmulShape& s, const uint16_t* A, int64_t m0, int64_t mm, int64_t k0,
                  int64_t kc, float* dst) {
  if (s.trans_a) {
    // A is (K, M): row k of A holds the block's mm rows contiguously. k outer: each row of A is
    // read once, in order (k inner, at large lda, walked the block's rows on a few cache sets:
    // every read missed L1), widened kLanes at a time into a row buffer, then copied out kMR
    // values per group.
    alignas(64) float buf[kMC + kLanes];
    const int64_t groups = round_up(mm, kMR) / kMR;
    for (int64_t k = 0; k < kc; ++k) {
      const uint16_t* row = A + (k0 + k) * s.lda + m0;
      if (k + 8 < kc) {  // rows of A are lda apart: the hardware prefetcher does not follow
        const char* ahead = reinterpret_cast<const char*>(row + 8 * s.lda);
        for (int64_t b = 0; b < 2 * mm; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
      }
      int64_t i = 0;
      for (; i + kLanes <= mm; i += kLanes) widen_lanes(row + i, buf + i);
      for (; i < mm; ++i) buf[i] = bf16_to_f32(row[i]);
      for (; i < groups * kMR; ++i) buf[i] = 0.f;
      for (int64_t g = 0; g < groups; ++g) {
        float* out = dst + g * kMR * kc + k * kMR;
#pragma GCC unroll 6
        for (int64_t r = 0; r < kMR; ++r) out[r] = buf[g * kMR + r];
      }
    }
    return;
  }
  for (int64_t g = 0; g < round_up(mm, kMR); g += kMR) {
    float* out = dst + g * kc;
    const int64_t rows = std::min(kMR, mm - g);
#if !defined(__AVX512F__)
    if (rows == kMR) {  // AVX2: 8 k of the 6 rows at a time, transposed in registers
      const uint16_t* row0 = A + (m0 + g) * s.lda + k0;
      int64_t k = 0;
      for (; k + 8 <= kc; k += 8) {
        __m256 v[8];
        for (int r = 0; r < 6; ++r) {
          const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row0 + r * s.lda + k));
          v[r] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        }
        v[6] = v[7] = _mm256_setzero_ps();
        // 8 x 8 transpose: t[i] = (v[0][i], ..., v[7][i]).
        __m256 u[8], w[8];
        for (int i = 0; i < 4; ++i) {
          u[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
          u[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
        }
        for (int i = 0; i < 2; ++i) {
          w[4 * i + 0] = _mm256_shuffle_ps(u[4 * i], u[4 * i + 2], 0x44);
          w[4 * i + 1] = _mm256_shuffle_ps(u[4 * i], u[4 * i + 2], 0xEE);
          w[4 * i + 2] = _mm256_shuffle_ps(u[4 * i + 1], u[4 * i + 3], 0x44);
          w[4 * i + 3] = _mm256_shuffle_ps(u[4 * i + 1], u[4 * i + 3], 0xEE);
        }
        // w[0..3]: rows 0-3 of k = (0,4), (1,5), (2,6), (3,7) in its halves; w[4..7]: rows 4-7.
        for (int i = 0; i < 4; ++i) {
          const __m256 lo = _mm256_permute2f128_ps(w[i], w[4 + i], 0x20);  // k = i
          const __m256 hi = _mm256_permute2f128_ps(w[i], w[4 + i], 0x31);  // k = i + 4
          for (const auto& [t, kk] : {std::pair{lo, i}, std::pair{hi, i + 4}}) {
            float* o = out + (k + kk) * kMR;  // 6 floats: rows 0-3, then 4-5
            _mm_storeu_ps(o, _mm256_castps256_ps128(t));
            _mm_storel_pi(reinterpret_cast<__m64*>(o + 4), _mm256_extractf128_ps(t, 1));
          }
        }
      }
      for (; k < kc; ++k)
        for (int64_t r = 0; r < kMR; ++r) out[k * kMR + r] = bf16_to_f32(row0[r * s.lda + k]);
      continue;
    }
#endif
    for (int64_t r = 0; r < kMR; ++r) {
      if (r >= rows) {
        for (int64_t k = 0; k < kc; ++k) out[k * kMR + r] = 0.f;
        continue;
      }
      const uint16_t* row = A + (m0 + g + r) * s.lda + k0;
      int64_t k = 0;
      alignas(64) float buf[kLanes];
      for (; k + kLanes <= kc; k += kLanes) {
        widen_lanes(row + k, buf);
#pragma GCC unroll 16
        for (int64_t i = 0; i < kLanes; ++i) out[(k + i) * kMR + r] = buf[i];
      }
      for (; k < kc; ++k) out[k * kMR + r] = bf16_to_f32(row[k]);
    }
  }
}

// c[r][0..kNR) (+)= sum_k a[k][r] b[k][0..kNR) for r < kMR: 12 accumulators in registers; c is
// the tile's f32 sums (row stride ldc), read unless `first`. Not instrumented by the sanitizers
// (nor the vector helpers above, always inlined into it): instrumented, its accumulator array
// lived in memory instead of registers and its helpers were calls, which made a bf16 llama-tiny
// step 7x slower under ASan+UBSan (8.7 s; CI's README session timed out). It reads only the
// packed panels and writes only the tile, both sized in this file; the packing and store_tile
// around it, which index the user's A, B and C, stay instrumented.
__attribute__((no_sanitize("address", "undefined")))
void micro_kernel(const float* a, const float* b, int64_t kc, float* c, int64_t ldc, bool first) {
  VF acc[kMR][2];
#pragma GCC unroll 6
  for (int64_t r = 0; r < kMR; ++r) {
    acc[r][0] = first ? vzero() : vload(c + r * ldc);
    acc[r][1] = first ? vzero() : vload(c + r * ldc + kLanes);
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    _mm_prefetch(reinterpret_cast<const char*>(b + (k + kPrefetchK) * kNR), _MM_HINT_T0);
    const VF b0 = vload(b + k * kNR), b1 = vload(b + k * kNR + kLanes);
#pragma GCC unroll 6
    for (int64_t r = 0; r < kMR; ++r) {
      const VF av = vbroadcast(a + k * kMR + r);
      acc[r][0] = vfma(av, b0, acc[r][0]);
      acc[r][1] = vfma(av, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int64_t r = 0; r < kMR; ++r) {
    vstore(c + r * ldc, acc[r][0]);
    vstore(c + r * ldc + kLanes, acc[r][1]);
  }
}

// The tile's sums (mm x nn of ct, row stride ldc) into C at (m0, n0).
void store_tile(const Bf16MatmulShape& s, const float* ct, void* C, int64_t m0, int64_t mm,
                int64_t n0, int64_t nn, int64_t ldc) {
  for (int64_t r = 0; r < mm; ++r) {
    const float* src = ct + r * ldc;
    if (s.c_dtype == DType::kF32) {
      float* dst = static_cast<float*>(C) + (m0 + r) * s.ldc + n0;
      if (s.accumulate)
        for (int64_t i = 0; i < nn; ++i) dst[i] += src[i];
      else
        std::memcpy(dst, src, 4 * nn);
    } else {
      uint16_t* dst = static_cast<uint16_t*>(C) + (m0 + r) * s.ldc + n0;
      if (s.accumulate)
        for (int64_t i = 0; i < nn; ++i) dst[i] = f32_to_bf16(bf16_to_f32(dst[i]) + src[i]);
      else
        convert_f32_to_bf16(src, dst, nn);
    }
  }
}

// One pool task: rows [m0, m1) x columns [n0, n1) of C, over all of K. The tile's sums live in
// the thread's scratch with row stride n1 - n0 (whole panels).
void tile(const Bf16MatmulShape& s, const uint16_t* A, float* packed_b, int64_t np, int64_t jp0,
          void* C, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  float* pa = scratch(kAElems + kCElems);
  float* ct = pa + kAElems;
  const int64_t mm = m1 - m0, nn = n1 - n0, ldc = round_up(nn, kNR);
  for (int64_t k0 = 0; k0 < s.K; k0 += kKC) {
    const int64_t kc = std::min(kKC, s.K - k0);
    pack_a_block(s, A, m0, mm, k0, kc, pa);
    for (int64_t n = 0; n < nn; n += kNR) {
      const float* pb = b_block(packed_b, np, s.K, k0, jp0 + n / kNR);
      for (int64_t g = 0; g < mm; g += kMR) micro_kernel(pa + g * kc, pb, kc, ct + g * ldc + n, ldc, k0 == 0);
    }
  }
  store_tile(s, ct, C, m0, mm, n0, nn, ldc);
}

// How a pass of `cols` columns is cut into tasks: rt row tiles x ct column tiles, the kMR-row
// groups and kNR-column panels dealt out evenly (tiles differ by at most one group or panel;
// at most kMC rows and kNC columns each). Few large tiles pack each block of A fewer times
// (once per column tile) and reuse each panel of B over more rows; with few tasks their count
// is made a multiple of the threads so none waits on a last, lone tile. The tiling does not
// change any sum (each element of C is one chain over k).
struct Grid {
  int64_t rt, ct, groups, panels;
  int64_t row(int64_t i) const { return i * groups / rt * kMR; }    // first row of row tile i
  int64_t col(int64_t j) const { return j * panels / ct * kNR; }    // first column of column tile j
};
Grid grid(int64_t M, int64_t cols, int64_t threads) {
  Grid g{(M + kMC - 1) / kMC, (cols + kNC - 1) / kNC, (M + kMR - 1) / kMR, (cols + kNR - 1) / kNR};
  while (threads > 1 && g.rt * g.ct < 8 * threads && (g.rt * g.ct) % threads != 0) {
    if (g.ct < g.panels) ++g.ct;
    else if (g.rt < g.groups) ++g.rt;
    else break;
  }
  return g;
}

}  // namespace

bool packed_bf16_gemm_available() { return true; }
const char* packed_bf16_gemm_isa() { return kIsa; }
int64_t packed_gemm_kernel_rows() { return kMR; }
int64_t packed_gemm_kernel_cols() { return kNR; }

int64_t packed_gemm_scratch_bytes(const Bf16MatmulShape& s) {
  return 4 * (kAElems + kCElems + packed_b_elems(s));
}

// Per pass of columns: pack its panels of B (one pool job), then every tile of the pass's grid
// (another), row tiles inner so both threads share panels in cache.
void packed_gemm(const Bf16MatmulShape& s, const uint16_t* A, const uint16_t* B, void* C) {
  float* pb = scratch(kAElems + kCElems + packed_b_elems(s)) + kAElems + kCElems;
  const bool inline_only = ThreadPool::in_parallel_region() || default_pool().num_threads() <= 1;
  const int64_t threads = inline_only ? 1 : default_pool().num_threads();
  const int64_t cols = pass_cols(s);
  for (int64_t p0 = 0; p0 < s.N; p0 += cols) {
    const int64_t p1 = std::min(s.N, p0 + cols), np = (p1 - p0 + kNR - 1) / kNR;
    const Grid g = grid(s.M, p1 - p0, threads);
    auto pack = [&](int64_t j) { pack_b_panel(s, B, p0 / kNR + j, pb, np, j); };
    auto work = [&](int64_t t) {
      const int64_t i = t % g.rt, j = t / g.rt;
      const int64_t n0 = p0 + g.col(j), n1 = std::min(p1, p0 + g.col(j + 1));
      const int64_t m0 = g.row(i), m1 = std::min(s.M, g.row(i + 1));
      tile(s, A, pb, np, (n0 - p0) / kNR, C, m0, m1, n0, n1);
    };
    if (inline_only) {
      for (int64_t j = 0; j < np; ++j) pack(j);
      for (int64_t t = 0; t < g.rt * g.ct; ++t) work(t);
    } else {
      default_pool().run(np, pack);
      default_pool().run(g.rt * g.ct, work);
    }
  }
}

int64_t packed_gemm_tasks(const Bf16MatmulShape& s) {
  const int64_t cols = pass_cols(s);
  int64_t tasks = 0;
  for (int64_t p0 = 0; p0 < s.N; p0 += cols) {
    const Grid g = grid(s.M, std::min(s.N, p0 + cols) - p0, default_pool().num_threads());
    tasks += g.rt * g.ct;
  }
  return tasks;
}

#else  // neither AVX2+FMA nor AVX-512F in this build: Bf16MatmulPlan uses convert+sgemm

bool packed_bf16_gemm_available() { return false; }
const char* packed_bf16_gemm_isa() { return "none"; }
int64_t packed_gemm_kernel_rows() { return 0; }
int64_t packed_gemm_kernel_cols() { return 0; }
int64_t packed_gemm_scratch_bytes(const Bf16MatmulShape&) { return 0; }
int64_t packed_gemm_tasks(const Bf16MatmulShape&) { return 0; }
void packed_gemm(const Bf16MatmulShape&, const uint16_t*, const uint16_t*, void*) {
  ENG_CHECK(false, "bf16 matmul: packed backend used in a build without AVX2+FMA or AVX-512F");
}

#endif

}  // namespace eng::kern::detail
