// engine/tensor/bf16_gemm.cpp: the engine's own bf16 GEMM on avx512_bf16 (vdpbf16ps), the
// allocation-free backend of Bf16MatmulPlan (onednn_matmul.h: MatmulBackend::kNative).
//
// GotoBLAS-style: B is packed (in parallel; all of it, up to kPackedB elements per pass) into
// 32-column panels of bf16 pairs (k, k+1) in the calling thread's scratch; then tiles of kMC
// rows by kNC columns go to the pool, each packing its rows of A (or reading them in place
// when they hold whole pairs: not transposed, K even) and running a 6 x 64 micro-kernel (two
// panels; 24 f32 accumulators; a last odd panel 6 x 32) over the whole K, so every element of
// C is one f32 sum over k in order: bitwise the same for any thread count and any tile shape
// (the 8 x 32 kernel before it gave the same bits). vdpbf16ps treats bf16 denormal inputs as
// zero and flushes f32 denormal results (< 1.2e-38): the only difference from an exact-product
// f32 sum besides order.
//
// Speed (bench/bf16_gemm_bench.cpp, one thread, thread CPU time, Zen 4): the core's vdpbf16ps
// peak is 1 zmm per cycle, ~232 GFLOP/s; this GEMM runs llama-small's 12 matmul shapes at
// 177-222 GFLOP/s, 202-207 over a step's mix (~88% of that peak), the same as oneDNN's brgemm called
// directly on the same shapes (docs/precision.md, "Speed").
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/base/check.h"
#include "engine/base/thread_pool.h"
#include "engine/tensor/bf16_gemm.h"
#include "engine/tensor/bf16_simd.h"
#include "engine/tensor/onednn_matmul.h"
#include "engine/tensor/simd.h"

namespace eng::kern::detail {

namespace {
constexpr int64_t kScratchAlign = 64;
thread_local std::vector<uint8_t> t_scratch;
}  // namespace

void* thread_matmul_scratch(int64_t bytes) {
  if (static_cast<int64_t>(t_scratch.size()) < bytes + kScratchAlign) t_scratch.resize(bytes + kScratchAlign);
  const auto p = reinterpret_cast<uintptr_t>(t_scratch.data());
  return reinterpret_cast<void*>((p + kScratchAlign - 1) / kScratchAlign * kScratchAlign);
}

#if defined(__AVX512BF16__)
namespace {

constexpr int64_t kMR = 8;    // rows per packed group of A
constexpr int64_t kNR = 32;   // columns per packed panel of B (two zmm of f32)
constexpr int64_t kRows = kNativeKernelRows;  // micro-kernel rows (by 64 columns: 24 zmm)
constexpr int64_t kMC = kNativeTaskRows;       // rows per pool task (whole kMR and kRows groups)
static_assert(kMC % kMR == 0 && kMC % kRows == 0 && 2 * kNR == kNativeKernelCols);
constexpr int64_t kNC = 512;  // columns per chunk of B that a task's rows pass over (16 panels)
constexpr int64_t kPackedB = int64_t{8} << 20;  // elements of B packed per pass (16 MiB)

// Per thread (thread_matmul_scratch): [packed A: kMC rows | packed B chunk: the calling
// thread's, read by the workers].

int64_t pairs(int64_t K) { return (K + 1) / 2; }
int64_t packed_a_elems(const Bf16MatmulShape& s) { return pairs(s.K) * 2 * kMC; }
// Columns packed per pass: all of N when that fits in kPackedB elements, else whole chunks.
int64_t pass_cols(const Bf16MatmulShape& s) {
  const int64_t chunk_elems = std::max<int64_t>(1, kNC * pairs(s.K) * 2);
  return std::min(s.N, std::max<int64_t>(1, kPackedB / chunk_elems) * kNC);
}
int64_t packed_b_elems(const Bf16MatmulShape& s) {
  return (pass_cols(s) + kNR - 1) / kNR * pairs(s.K) * 2 * kNR;
}

uint16_t* pack_scratch(int64_t elems) { return static_cast<uint16_t*>(thread_matmul_scratch(2 * elems)); }

// Panel j of B: for pair p, 32 columns x (b[2p][n], b[2p+1][n]), zero past K and N.
void pack_b_panel(const Bf16MatmulShape& s, const uint16_t* B, int64_t j, uint16_t* dst) {
  const int64_t n0 = j * kNR, nn = std::min(kNR, s.N - n0), P = pairs(s.K);
  if (!s.trans_b && nn == kNR) {  // rows of 32 contiguous columns: interleave two rows
    __m512i lo_idx, hi_idx;
    alignas(64) uint16_t lo[32], hi[32];
    for (int i = 0; i < 32; ++i) {
      lo[i] = static_cast<uint16_t>((i & 1) * 32 + i / 2);
      hi[i] = static_cast<uint16_t>((i & 1) * 32 + 16 + i / 2);
    }
    lo_idx = _mm512_load_si512(lo), hi_idx = _mm512_load_si512(hi);
    for (int64_t p = 0; p < P; ++p) {
      const __m512i r0 = _mm512_loadu_si512(B + 2 * p * s.ldb + n0);
      const __m512i r1 = 2 * p + 1 < s.K ? _mm512_loadu_si512(B + (2 * p + 1) * s.ldb + n0)
                                         : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + p * 2 * kNR, _mm512_permutex2var_epi16(r0, lo_idx, r1));
      _mm512_storeu_si512(dst + p * 2 * kNR + kNR, _mm512_permutex2var_epi16(r0, hi_idx, r1));
    }
    return;
  }
  if (s.trans_b && nn == kNR && s.K % 2 == 0 && s.ldb % 2 == 0 && s.ldb < (int64_t{1} << 28)) {
    // Rows n of B hold whole pairs: gather word p of 16 rows at a time (32-bit offsets).
    const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(static_cast<int>(s.ldb * 2)));
    for (int64_t p = 0; p < P; ++p)
      for (int64_t h = 0; h < 2; ++h) {
        const uint16_t* base = B + (n0 + 16 * h) * s.ldb + 2 * p;
        _mm512_storeu_si512(dst + p * 2 * kNR + 32 * h, _mm512_i32gather_epi32(rows, base, 1));
      }
    return;
  }
  for (int64_t p = 0; p < P; ++p)
    for (int64_t c = 0; c < kNR; ++c)
      for (int64_t h = 0; h < 2; ++h) {
        const int64_t k = 2 * p + h, n = n0 + c;
        dst[p * 2 * kNR + 2 * c + h] =
            (c < nn && k < s.K) ? (s.trans_b ? B[n * s.ldb + k] : B[k * s.ldb + n]) : 0;
      }
}

// Rows [m0, m0 + 8) of op(A) as pairs: dst[p][r] = (a[r][2p], a[r][2p+1]), zero past M and K.
void pack_a_rows(const Bf16MatmulShape& s, const uint16_t* A, int64_t m0, uint16_t* dst) {
  const int64_t mm = std::min(kMR, s.M - m0), P = pairs(s.K);
  if (!s.trans_a && mm == kMR && s.K % 2 == 0) {  // whole pairs: a transpose of 32-bit words
    const uint16_t* rows[kMR];
    for (int64_t r = 0; r < kMR; ++r) rows[r] = A + (m0 + r) * s.lda;
    for (int64_t p = 0; p < P; ++p)
#pragma GCC unroll 8
      for (int64_t r = 0; r < kMR; ++r) std::memcpy(dst + (p * kMR + r) * 2, rows[r] + 2 * p, 4);
    return;
  }
  if (s.trans_a && mm == kMR && s.K % 2 == 0) {  // 8 contiguous m of rows k, k+1: interleave
    for (int64_t p = 0; p < P; ++p) {
      const __m128i k0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(A + 2 * p * s.lda + m0));
      const __m128i k1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(A + (2 * p + 1) * s.lda + m0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + p * 2 * kMR), _mm_unpacklo_epi16(k0, k1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + p * 2 * kMR + 8), _mm_unpackhi_epi16(k0, k1));
    }
    return;
  }
  if (!s.trans_a) {
    for (int64_t r = 0; r < kMR; ++r) {
      const uint16_t* row = r < mm ? A + (m0 + r) * s.lda : A;
      for (int64_t k = 0; k < 2 * P; ++k)
        dst[(k / 2) * 2 * kMR + 2 * r + (k & 1)] = (r < mm && k < s.K) ? row[k] : 0;
    }
    return;
  }
  for (int64_t k = 0; k < 2 * P; ++k) {
    const uint16_t* col = A + std::min(k, s.K - 1) * s.lda + m0;  // a[m0 + r][k] = A[k * lda + m0 + r]
    for (int64_t r = 0; r < kMR; ++r) dst[(k / 2) * 2 * kMR + 2 * r + (k & 1)] = (r < mm && k < s.K) ? col[r] : 0;
  }
}

// Where the micro-kernel reads A's pairs: pair p of row r at rows[r] + p * pair_stride
// (packed groups of kMR rows: row r of a group at group + 2r, stride 2 * kMR; rows of A used in
// place: stride 2).
struct APairs {
  const uint16_t* rows[kRows];
  int64_t pair_stride;
};

// Whether op(A) is read in place: rows of whole pairs (K even, 4-byte aligned row starts).
bool a_in_place(const Bf16MatmulShape& s) { return !s.trans_a && s.K % 2 == 0 && s.lda % 2 == 0; }

// Rows [m, m + mm) of the tile starting at m0; rows past mm repeat row m (their sums are not
// stored). Packed: `pa` holds the tile's groups of kMR rows, group_elems apart.
APairs row_pairs(const Bf16MatmulShape& s, const uint16_t* A, const uint16_t* pa,
                 int64_t group_elems, int64_t m0, int64_t m, int64_t mm) {
  APairs a{{}, pa ? 2 * kMR : 2};
  for (int64_t r = 0; r < kRows; ++r) {
    const int64_t i = m + (r < mm ? r : 0);
    a.rows[r] = pa ? pa + (i - m0) / kMR * group_elems + 2 * ((i - m0) % kMR) : A + i * s.lda;
  }
  return a;
}

// C[m + r][n + c] (+)= sum_p a-pairs . b-pairs for r < mm, c < nn: kRows rows by kZmm x 16
// columns (kZmm / 2 panels of B, panel_elems apart), kRows * kZmm f32 accumulators in zmm
// registers. Per pair: kZmm loads of B and kRows broadcasts of A for kRows * kZmm vdpbf16ps.
template <int kZmm>
void micro_kernel(const Bf16MatmulShape& s, const APairs& pa, const uint16_t* pb,
                  int64_t panel_elems, void* C, int64_t m, int64_t mm, int64_t n, int64_t nn) {
  __m512 acc[kRows][kZmm];  // the loops are unrolled so they stay in registers
#pragma GCC unroll 8
  for (int64_t r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kZmm; ++v) acc[r][v] = _mm512_setzero_ps();
  const int64_t P = pairs(s.K), ps = pa.pair_stride;
  const uint16_t* rows[kRows];
#pragma GCC unroll 8
  for (int64_t r = 0; r < kRows; ++r) rows[r] = pa.rows[r];
  const uint16_t* pb1 = pb + (kZmm > 2 ? panel_elems : 0);
  for (int64_t p = 0; p < P; ++p) {
    __m512bh b[kZmm];
#pragma GCC unroll 4
    for (int v = 0; v < kZmm; ++v)
      b[v] = (__m512bh)_mm512_loadu_si512((v < 2 ? pb : pb1) + p * 2 * kNR + (v & 1) * 16 * 2);
#pragma GCC unroll 8
    for (int64_t r = 0; r < kRows; ++r) {
      int32_t pair;  // (a[r][2p], a[r][2p+1]) as one 32-bit lane, broadcast
      std::memcpy(&pair, rows[r] + p * ps, 4);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 4
      for (int v = 0; v < kZmm; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, b[v]);
    }
  }
#pragma GCC unroll 8
  for (int64_t r = 0; r < kRows; ++r) {  // unrolled, so the accumulators are never spilled
    if (r >= mm) break;
#pragma GCC unroll 4
    for (int v = 0; v < kZmm; ++v)
      if (16 * v < nn) store_c(s, C, (m + r) * s.ldc + n + 16 * v, acc[r][v], simd::mask_for(nn - 16 * v));
  }
}

// One pool task: rows [m0, m0 + kMC) x the packed chunk's columns [n0, n1) of C. Two panels of
// B (64 columns) at a time stay in L1/L2 while the task's rows of A (packed once, or read in
// place) pass over them kRows at a time; a last single panel runs the 32-column kernel.
// Panels are panel_elems apart (pairs(K) * 2 * kNR, or more for panels packed with a longer K).
void tile(const Bf16MatmulShape& s, const uint16_t* A, const uint16_t* packed_b, void* C,
          int64_t m0, int64_t n0, int64_t n1, int64_t panel_elems) {
  const bool in_place = a_in_place(s);
  uint16_t* pa = in_place ? nullptr : pack_scratch(packed_a_elems(s));
  const int64_t m1 = std::min(s.M, m0 + kMC);
  const int64_t group_elems = pairs(s.K) * 2 * kMR;
  if (!in_place)
    for (int64_t m = m0; m < m1; m += kMR) pack_a_rows(s, A, m, pa + (m - m0) / kMR * group_elems);
  for (int64_t n = n0; n < n1; n += 2 * kNR) {
    const uint16_t* pb = packed_b + ((n - n0) / kNR) * panel_elems;
    for (int64_t m = m0; m < m1; m += kRows) {
      const int64_t mm = std::min(kRows, m1 - m);
      const APairs a = row_pairs(s, A, pa, group_elems, m0, m, mm);
      if (n1 - n > kNR)
        micro_kernel<4>(s, a, pb, panel_elems, C, m, mm, n, std::min(2 * kNR, n1 - n));
      else
        micro_kernel<2>(s, a, pb, panel_elems, C, m, mm, n, n1 - n);
    }
  }
}

}  // namespace

void pack_b_panel32(const Bf16MatmulShape& s, const uint16_t* B, int64_t j, uint16_t* dst) {
  pack_b_panel(s, B, j, dst);
}

bool native_bf16_gemm_available() { return bf16::use_hw_convert(); }

int64_t native_gemm_scratch_bytes(const Bf16MatmulShape& s) {
  return 2 * (packed_b_elems(s) + packed_a_elems(s));
}

// Two pool jobs per pass (usually one pass): pack the pass's panels of B, then every
// (chunk of kNC columns, kMC rows) tile, chunk-major so both threads share a chunk in cache.
void native_gemm(const Bf16MatmulShape& s, const uint16_t* A, const uint16_t* B, void* C) {
  // The caller's buffer: its B panels are read by the workers while the caller waits in run().
  uint16_t* pb = pack_scratch(packed_a_elems(s) + packed_b_elems(s)) + packed_a_elems(s);
  const int64_t panel_elems = pairs(s.K) * 2 * kNR, mt = (s.M + kMC - 1) / kMC;
  const bool inline_only = ThreadPool::in_parallel_region() || default_pool().num_threads() <= 1;
  const int64_t cols = pass_cols(s);
  for (int64_t p0 = 0; p0 < s.N; p0 += cols) {
    const int64_t p1 = std::min(s.N, p0 + cols), np = (p1 - p0 + kNR - 1) / kNR;
    const int64_t chunks = (p1 - p0 + kNC - 1) / kNC;
    auto pack = [&](int64_t j) { pack_b_panel(s, B, p0 / kNR + j, pb + j * panel_elems); };
    auto work = [&](int64_t t) {
      const int64_t n0 = p0 + (t / mt) * kNC, n1 = std::min(p1, n0 + kNC);
      tile(s, A, pb + (n0 - p0) / kNR * panel_elems, C, (t % mt) * kMC, n0, n1, panel_elems);
    };
    if (inline_only) {
      for (int64_t j = 0; j < np; ++j) pack(j);
      for (int64_t t = 0; t < chunks * mt; ++t) work(t);
    } else {
      default_pool().run(np, pack);
      default_pool().run(chunks * mt, work);
    }
  }
}

int64_t packed_b_elems_all(const Bf16MatmulShape& s) {
  return (s.N + kNR - 1) / kNR * pairs(s.K) * 2 * kNR;
}

void pack_b_all(const Bf16MatmulShape& s, const uint16_t* B, uint16_t* dst) {
  const int64_t panel_elems = pairs(s.K) * 2 * kNR;
  for (int64_t j = 0; j < (s.N + kNR - 1) / kNR; ++j) pack_b_panel(s, B, j, dst + j * panel_elems);
}

void native_gemm_packed_b(const Bf16MatmulShape& s, const uint16_t* A, const uint16_t* packed_b,
                          int64_t packed_k, void* C) {
  ENG_CHECK(packed_k >= s.K && (s.K % 2 == 0 || packed_k == s.K),
            "bf16 GEMM: B packed with K = {} used for K = {}", packed_k, s.K);
  const int64_t panel_elems = pairs(packed_k) * 2 * kNR;
  for (int64_t m0 = 0; m0 < s.M; m0 += kMC)
    for (int64_t n0 = 0; n0 < s.N; n0 += kNC)
      tile(s, A, packed_b + n0 / kNR * panel_elems, C, m0, n0, std::min(s.N, n0 + kNC), panel_elems);
}

#else  // no avx512_bf16 in this build: Bf16MatmulPlan uses oneDNN or convert+sgemm

bool native_bf16_gemm_available() { return false; }
int64_t native_gemm_scratch_bytes(const Bf16MatmulShape&) { return 0; }
void native_gemm(const Bf16MatmulShape&, const uint16_t*, const uint16_t*, void*) {
  ENG_CHECK(false, "bf16 matmul: native backend used in a build without avx512_bf16");
}
void pack_b_panel32(const Bf16MatmulShape&, const uint16_t*, int64_t, uint16_t*) {
  ENG_CHECK(false, "bf16 matmul: native backend used in a build without avx512_bf16");
}
int64_t packed_b_elems_all(const Bf16MatmulShape&) { return 0; }
void pack_b_all(const Bf16MatmulShape&, const uint16_t*, uint16_t*) {
  ENG_CHECK(false, "bf16 matmul: native backend used in a build without avx512_bf16");
}
void native_gemm_packed_b(const Bf16MatmulShape&, const uint16_t*, const uint16_t*, int64_t, void*) {
  ENG_CHECK(false, "bf16 matmul: native backend used in a build without avx512_bf16");
}

#endif

}  // namespace eng::kern::detail
