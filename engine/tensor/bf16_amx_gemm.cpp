// engine/tensor/bf16_amx_gemm.cpp: the engine's own bf16 GEMM on Intel AMX (tdpbf16ps), the
// allocation-free backend of Bf16MatmulPlan on CPUs with AMX-BF16 (onednn_matmul.h:
// MatmulBackend::kAmx).
//
// Why: on the Xeons with AMX (Sapphire Rapids and later) vdpbf16ps runs at half the core's f32
// FMA rate (bench/bf16_gemm_bench: 121 against 244 GFLOP/s a core), so the avx512_bf16 GEMM
// (bf16_gemm.cpp) is slower than sgemm there; the matrix unit does 16 x 16 x 32 products per
// instruction. Layout, as bf16_gemm.cpp's: B is packed once per call (in parallel) into panels
// of 32 columns of bf16 pairs (k, k+1), the pairs padded with zeros to a whole number of
// 16-pair tiles; a B tile is 16 pairs x 16 columns of a panel (row stride 128 bytes). A is read
// in place, 16 rows x 32 k per tile, when its rows hold whole tiles (not transposed, K a
// multiple of 32); otherwise op(A) is packed once per call, row-major and zero-padded, in
// passes of at most 16 MiB. Pool tasks of kAmxTaskRows rows x kNC columns run 32 x 32 blocks
// (2 x 2 tiles of C in tmm0-3, A in tmm4-5, B in tmm6-7) over the whole K, so every element of C is the same
// sequence of tile products for any thread count and tile split: bitwise the same. Rows of C
// past M are never stored (the last partial block of rows read in place is copied, zero-padded,
// so no tile reads past A). tdpbf16ps, like vdpbf16ps, treats bf16 denormal inputs as zero and
// flushes denormal f32 results; it sums its 32 products per element in an order of its own, so
// results differ from the vdpbf16ps GEMM's in the last bits (docs/precision.md).
//
// AMX needs the kernel's permission (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, once per
// process) and a tile configuration per thread (ldtilecfg at the start of every task, tilerelease
// at its end). Compiled where the build has avx512_bf16 (the AMX instructions through a target
// attribute, so a Zen 4 build compiles it too), used where CPUID shows AMX-TILE and AMX-BF16,
// XCR0 enables the tile state and the kernel grants it; SHARDLAB_DISABLE_AMX=1 (or
// SHARDLAB_DISABLE_AVX512_BF16=1) turns it off.
#include <algorithm>
#include <cpuid.h>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/base/check.h"
#include "engine/base/thread_pool.h"
#include "engine/tensor/bf16_gemm.h"
#include "engine/tensor/bf16_simd.h"
#include "engine/tensor/simd.h"

namespace eng::kern::detail {

#if defined(__AVX512BF16__) && defined(__x86_64__)
namespace {

#define ENG_AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))

constexpr int64_t kT = 16;                   // rows of a tile (A, C) and pairs of a B tile
constexpr int64_t kTK = 32;                  // k per tile: 64 bytes of bf16
constexpr int64_t kBlock = 2 * kT;           // the 32 x 32 block of C (2 x 2 tiles)
constexpr int64_t kNR = kBlock;              // columns per packed panel of B (pack_b_panel32's)
constexpr int64_t kMC = kAmxTaskRows;        // rows per pool task
static_assert(kMC % kBlock == 0 && 2 * kNR == kNativeKernelCols);
constexpr int64_t kNC = 512;                 // columns per chunk of B a task passes over
constexpr int64_t kPackedB = int64_t{8} << 20;  // elements of B packed per pass (16 MiB)
constexpr int64_t kPackedA = int64_t{8} << 20;  // elements of op(A) packed per pass (16 MiB)

int64_t padded_k(int64_t K) { return (K + kTK - 1) / kTK * kTK; }
int64_t panel_elems(const Bf16MatmulShape& s) { return padded_k(s.K) * kNR; }
int64_t pass_cols(const Bf16MatmulShape& s) {
  return std::min(s.N, std::max<int64_t>(1, kPackedB / std::max<int64_t>(1, kNC * padded_k(s.K))) * kNC);
}
int64_t packed_b_elems(const Bf16MatmulShape& s) { return (pass_cols(s) + kNR - 1) / kNR * panel_elems(s); }
// op(A) is read in place: whole 32-k tiles per row (tileloadd needs no alignment).
bool a_in_place(const Bf16MatmulShape& s) { return !s.trans_a && s.K % kTK == 0; }
int64_t padded_m(int64_t M) { return (M + kBlock - 1) / kBlock * kBlock; }
// Rows of op(A) packed per pass when not read in place: whole tasks, at most kPackedA elements
// (at least one task), so the scratch does not grow with M.
int64_t pass_rows(const Bf16MatmulShape& s) {
  return std::min(padded_m(s.M), std::max<int64_t>(1, kPackedA / std::max<int64_t>(1, kMC * padded_k(s.K))) * kMC);
}
// op(A) packed row-major (pass_rows rows of padded_k(K)), when not read in place.
int64_t packed_a_elems(const Bf16MatmulShape& s) { return a_in_place(s) ? 0 : pass_rows(s) * padded_k(s.K); }
// One block of 32 rows copied and zero-padded (the last rows of an A read in place).
int64_t tail_a_elems(const Bf16MatmulShape& s) { return a_in_place(s) ? kBlock * padded_k(s.K) : 0; }

uint16_t* scratch_elems(int64_t elems) { return static_cast<uint16_t*>(thread_matmul_scratch(2 * elems)); }

// r[i] = row i of a 16 x 16 matrix of 32-bit words; afterwards row i holds column i.
inline void transpose16_epi32(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Each 128-bit lane of r[i] now holds a 4 x 4 block's row; gather the lanes.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
  }
}

// pack_a_block's transposed case for whole blocks of 32 rows inside M: per 32 k, the 16 pairs
// of rows (k, k+1) of A interleaved into 32-bit words (a[k][m], a[k+1][m]) for m = 0..15 and
// 16..31, then two 16 x 16 transposes of those words give each m's 32 consecutive k.
void pack_a_block_transposed(const Bf16MatmulShape& s, const uint16_t* A, int64_t m0, int64_t rows,
                             uint16_t* dst) {
  const int64_t kp = padded_k(s.K);
  alignas(64) uint16_t lo[32], hi[32];
  for (int i = 0; i < 32; ++i) {
    lo[i] = static_cast<uint16_t>((i & 1) * 32 + i / 2);
    hi[i] = static_cast<uint16_t>((i & 1) * 32 + 16 + i / 2);
  }
  const __m512i lo_idx = _mm512_load_si512(lo), hi_idx = _mm512_load_si512(hi);
  auto row = [&](int64_t k, int64_t r0) {
    return k < s.K ? _mm512_loadu_si512(A + k * s.lda + m0 + r0) : _mm512_setzero_si512();
  };
  for (int64_t r0 = 0; r0 < rows; r0 += 32)
    for (int64_t k0 = 0; k0 < kp; k0 += kTK) {
      __m512i a[16], b[16];  // rows p of pairs: m 0..15 of the 32, m 16..31
      for (int p = 0; p < 16; ++p) {
        const __m512i x = row(k0 + 2 * p, r0), y = row(k0 + 2 * p + 1, r0);
        a[p] = _mm512_permutex2var_epi16(x, lo_idx, y);
        b[p] = _mm512_permutex2var_epi16(x, hi_idx, y);
      }
      transpose16_epi32(a);
      transpose16_epi32(b);
      for (int m = 0; m < 16; ++m) {
        _mm512_storeu_si512(dst + (r0 + m) * kp + k0, a[m]);
        _mm512_storeu_si512(dst + (r0 + 16 + m) * kp + k0, b[m]);
      }
    }
}

// Rows [m0, m0 + rows) of op(A) into dst (row stride padded_k(K)), zero past M and K.
void pack_a_block(const Bf16MatmulShape& s, const uint16_t* A, int64_t m0, int64_t rows, uint16_t* dst) {
  const int64_t kp = padded_k(s.K), mm = std::clamp<int64_t>(s.M - m0, 0, rows);
  if (!s.trans_a) {
    for (int64_t r = 0; r < rows; ++r) {
      uint16_t* d = dst + r * kp;
      if (r < mm) {
        std::memcpy(d, A + (m0 + r) * s.lda, 2 * s.K);
        std::memset(d + s.K, 0, 2 * (kp - s.K));
      } else {
        std::memset(d, 0, 2 * kp);
      }
    }
    return;
  }
  if (mm == rows && rows % 32 == 0) return pack_a_block_transposed(s, A, m0, rows, dst);
  // a[m][k] = A[k * lda + m]: 32 x 32 blocks, so reads and writes both stay in a few lines.
  for (int64_t k0 = 0; k0 < kp; k0 += kTK)
    for (int64_t r = 0; r < rows; ++r) {
      uint16_t* d = dst + r * kp + k0;
      if (r >= mm) {
        std::memset(d, 0, 2 * kTK);
        continue;
      }
      const int64_t kk = std::min(kTK, s.K - k0);
      const uint16_t* src = A + k0 * s.lda + m0 + r;
      for (int64_t k = 0; k < kk; ++k) d[k] = src[k * s.lda];
      for (int64_t k = std::max<int64_t>(kk, 0); k < kTK; ++k) d[k] = 0;
    }
}

// The 64-byte tile configuration: palette 1; tmm0-3 C (16 rows x 64 bytes of f32), tmm4-5 A
// (16 rows x 32 bf16), tmm6-7 B (16 pairs x 16 columns x 2 bf16).
struct alignas(64) TileConfig {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
// Constant-initialised (no static constructor that a plan run earlier could precede).
constexpr TileConfig kConfig = {1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {kT, kT, kT, kT, kT, kT, kT, kT}};

// C[m + r][n + c] (+)= for r < mm, c < nn, from the 32 x 32 sums in `sums`.
void store_block(const Bf16MatmulShape& s, const float* sums, void* C, int64_t m, int64_t mm,
                 int64_t n, int64_t nn) {
  for (int64_t r = 0; r < mm; ++r)
    for (int64_t h = 0; h < 2 && 16 * h < nn; ++h) {
      const simd::Mask mask = simd::mask_for(nn - 16 * h);
      store_c(s, C, (m + r) * s.ldc + n + 16 * h, simd::load(sums + r * kBlock + 16 * h, mask).v, mask);
    }
}

// One 32 x 32 block over k tiles [0, kt): a0/a1 the two 16-row halves of A's rows (row stride
// a_stride bytes), pb the panel (pair row stride 128 bytes); the sums land in `sums`.
ENG_AMX_TARGET void block(const uint16_t* a0, const uint16_t* a1, int64_t a_stride,
                          const uint16_t* pb, int64_t kt, float* sums) {
  __asm__ volatile("" ::: "memory");  // the tile instructions are asm without memory operands
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t t = 0; t < kt; ++t) {
    const uint16_t* b = pb + t * kT * 2 * kNR;  // 16 pair rows of 64 bf16
    _tile_loadd(4, a0 + t * kTK, a_stride);
    _tile_loadd(6, b, 4 * kNR);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b + 2 * kT, 4 * kNR);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a1 + t * kTK, a_stride);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, sums, 4 * kBlock);
  _tile_stored(1, sums + kT, 4 * kBlock);
  _tile_stored(2, sums + kT * kBlock, 4 * kBlock);
  _tile_stored(3, sums + kT * kBlock + kT, 4 * kBlock);
  __asm__ volatile("" ::: "memory");
}

ENG_AMX_TARGET void load_config() { _tile_loadconfig(&kConfig); }
ENG_AMX_TARGET void release_tiles() { _tile_release(); }

// One pool task: rows [m0, m0 + kMC) x the chunk's columns [n0, n1) of C. `a` is op(A) with row
// stride lda elements (A itself, or the packed copy with padded_m rows).
// `a` holds rows [a_row0, ...) of op(A): A itself (a_row0 = 0), or the pass's packed rows.
void task(const Bf16MatmulShape& s, const uint16_t* a, int64_t lda, int64_t a_row0, bool packed,
          const uint16_t* packed_b, void* C, int64_t m0, int64_t n0, int64_t n1) {
  const int64_t kp = padded_k(s.K), kt = kp / kTK, m1 = std::min(s.M, m0 + kMC);
  alignas(64) float sums[kBlock * kBlock];
  // The last rows of an A read in place, when not a whole block: copied once per task,
  // zero-padded, so no tile reads past A.
  const int64_t tail_m = (m1 - m0) % kBlock ? m0 + (m1 - m0) / kBlock * kBlock : m1;
  const uint16_t* tail = nullptr;
  if (!packed && tail_m < m1) {
    uint16_t* t = scratch_elems(tail_a_elems(s));
    pack_a_block(s, a, tail_m, kBlock, t);
    tail = t;
  }
  load_config();
  for (int64_t n = n0; n < n1; n += kNR) {
    const uint16_t* pb = packed_b + (n - n0) / kNR * panel_elems(s);
    for (int64_t m = m0; m < m1; m += kBlock) {
      const int64_t mm = std::min(kBlock, m1 - m);
      const uint16_t* rows = m == tail_m && tail ? tail : a + (m - a_row0) * lda;
      const int64_t stride = m == tail_m && tail ? kp : lda;
      block(rows, rows + kT * stride, 2 * stride, pb, kt, sums);
      store_block(s, sums, C, m, mm, n, std::min(kNR, n1 - n));
    }
  }
  release_tiles();
}

// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA: Linux (5.16+) hands AMX's 8 KiB of tile state to
// a process only when asked.
bool request_amx_permission() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

// CPUID.(7,0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE; XCR0 bits 17-18 (XTILECFG, XTILEDATA).
bool detect_amx() {
  if (env_set("SHARDLAB_DISABLE_AMX") || !native_bf16_gemm_available()) return false;
  unsigned a, b, c, d;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  if (!(d & (1u << 22)) || !(d & (1u << 24))) return false;
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;
  return request_amx_permission();
}

}  // namespace

bool amx_bf16_gemm_available() {
  static const bool available = detect_amx();
  return available;
}

int64_t amx_gemm_scratch_bytes(const Bf16MatmulShape& s) {
  return 2 * (tail_a_elems(s) + packed_a_elems(s) + packed_b_elems(s));
}

int64_t amx_gemm_tasks(const Bf16MatmulShape& s) {
  const int64_t mt = (std::min(s.M, a_in_place(s) ? s.M : pass_rows(s)) + kMC - 1) / kMC;
  return mt * ((std::min(s.N, pass_cols(s)) + kNC - 1) / kNC);
}

// Per call, per pass of rows (one unless op(A) is packed and over kPackedA elements): op(A)'s
// rows packed when it cannot be read in place; then per pass of columns (usually one) the
// pass's panels of B packed, then every (chunk of kNC columns, kMC rows) task, chunk-major so
// both threads share a chunk of B in cache. The caller's scratch: [a tail block | packed A |
// packed B]; the workers use only their own tail block.
void amx_gemm(const Bf16MatmulShape& s, const uint16_t* A, const uint16_t* B, void* C) {
  uint16_t* base = scratch_elems(tail_a_elems(s) + packed_a_elems(s) + packed_b_elems(s));
  uint16_t* pa = base + tail_a_elems(s);
  uint16_t* pb = pa + packed_a_elems(s);
  const bool packed = !a_in_place(s);
  const int64_t kp = padded_k(s.K), pe = panel_elems(s);
  const bool inline_only = ThreadPool::in_parallel_region() || default_pool().num_threads() <= 1;
  auto for_each = [&](int64_t n, const auto& f) {
    if (inline_only) {
      for (int64_t i = 0; i < n; ++i) f(i);
    } else {
      default_pool().run(n, f);
    }
  };
  const int64_t rows = packed ? pass_rows(s) : padded_m(s.M);
  const int64_t cols = pass_cols(s), P = (s.K + 1) / 2;
  for (int64_t r0 = 0; r0 < s.M; r0 += rows) {
    const int64_t r1 = std::min(s.M, r0 + rows), mt = (r1 - r0 + kMC - 1) / kMC;
    if (packed)
      for_each((r1 - r0 + kBlock - 1) / kBlock,
               [&](int64_t i) { pack_a_block(s, A, r0 + i * kBlock, kBlock, pa + i * kBlock * kp); });
    const uint16_t* a = packed ? pa : A;
    const int64_t lda = packed ? kp : s.lda, a_row0 = packed ? r0 : 0;
    for (int64_t p0 = 0; p0 < s.N; p0 += cols) {
      const int64_t p1 = std::min(s.N, p0 + cols), np = (p1 - p0 + kNR - 1) / kNR;
      const int64_t chunks = (p1 - p0 + kNC - 1) / kNC;
      for_each(np, [&](int64_t j) {
        uint16_t* panel = pb + j * pe;
        pack_b_panel32(s, B, p0 / kNR + j, panel);  // pairs(K) pair rows of 32 columns
        std::memset(panel + P * 2 * kNR, 0, 2 * (pe - P * 2 * kNR));
      });
      for_each(chunks * mt, [&](int64_t t) {
        const int64_t n0 = p0 + (t / mt) * kNC, n1 = std::min(p1, n0 + kNC);
        task(s, a, lda, a_row0, packed, pb + (n0 - p0) / kNR * pe, C, r0 + (t % mt) * kMC, n0, n1);
      });
    }
  }
}

#else  // no avx512_bf16 in this build: no AMX GEMM either

bool amx_bf16_gemm_available() { return false; }
int64_t amx_gemm_scratch_bytes(const Bf16MatmulShape&) { return 0; }
int64_t amx_gemm_tasks(const Bf16MatmulShape&) { return 0; }
void amx_gemm(const Bf16MatmulShape&, const uint16_t*, const uint16_t*, void*) {
  ENG_CHECK(false, "bf16 matmul: AMX backend used in a build without avx512_bf16");
}

#endif

}  // namespace eng::kern::detail
