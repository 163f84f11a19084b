// engine/tensor/kernels.cpp: fast f32 kernels (matmul split, embedding, RMSNorm, RoPE,
// reductions) on the engine's one pool; elementwise.cpp and loss.cpp hold the rest.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

#include "engine/base/check.h"
#include "engine/base/thread_pool.h"
#include "engine/tensor/blas.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/simd.h"

namespace eng::kern {
namespace {

// Below this much work a parallel_for costs more than it saves (pool wake-up ~ microseconds).
constexpr int64_t kMinParallelElems = 1 << 14;
constexpr double kMinParallelFlops = 4e6;

// Rows per parallel chunk so that each chunk touches about kMinParallelElems floats.
int64_t row_grain(int64_t row_len) { return std::max<int64_t>(1, kMinParallelElems / std::max<int64_t>(1, row_len)); }

using simd::Mask;
using simd::Vec;
using simd::kW;

}  // namespace

// ---- matmul ---------------------------------------------------------------------------------

void matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc) {
  ThreadPool& pool = default_pool();
  const int64_t nt = pool.num_threads();
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  // Split rows of C (each thread packs all of B), or columns when M is small.
  const bool by_rows = M >= N || M >= 128 * nt;
  const int64_t dim = by_rows ? M : N;
  // nt parts, or 2 per thread when each stays >= 256 wide: the pool hands parts out
  // dynamically, so a thread that loses its core to another process delays less. The split
  // depends only on the shape and the thread count, never on timing.
  const int64_t parts = std::min<int64_t>({std::max<int64_t>(nt, std::min<int64_t>(2 * nt, dim / 256)), dim / 16});
  if (nt <= 1 || parts <= 1 || flops < kMinParallelFlops || ThreadPool::in_parallel_region()) {
    blas::sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const int64_t per = ((dim + parts - 1) / parts + 15) / 16 * 16;  // whole 16-wide tiles
  pool.run(parts, [&](int64_t p) {
    const int64_t lo = p * per, hi = std::min(dim, lo + per);
    if (lo >= hi) return;
    if (by_rows) {
      const float* a = trans_a ? A + lo : A + lo * lda;  // A: (M, K) or (K, M)
      blas::sgemm(trans_a, trans_b, hi - lo, N, K, alpha, a, lda, B, ldb, beta, C + lo * ldc, ldc);
    } else {
      const float* b = trans_b ? B + lo * ldb : B + lo;  // B: (K, N) or (N, K)
      blas::sgemm(trans_a, trans_b, M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
    }
  });
}

// ---- grouped matmul ---------------------------------------------------------------------------

namespace {
// Group e of a row with group sizes g: its first row and row count (negative sizes as 0, the
// groups cut at N).
std::pair<int64_t, int64_t> group_rows(const int32_t* g, int64_t N, int64_t e) {
  int64_t at = 0;
  for (int64_t i = 0; i < e; ++i) at += std::min<int64_t>(N - at, std::max<int32_t>(g[i], 0));
  return {at, std::min<int64_t>(N - at, std::max<int32_t>(g[e], 0))};
}

// Whether to give each thread whole groups (each one single-threaded sgemm) rather than split
// every group's matmul over the pool: when there are at least two groups per thread and none
// holds more than twice the mean, which small groups (many experts) need: a split group of a
// few dozen rows spends more on the pool's hand-off than on its sgemm.
// per_expert: the grad's tasks are the E experts (each sums its rows over b), not the B x E
// (b, e) groups.
bool by_groups(const int32_t* group_sizes, int64_t B, int64_t N, int64_t E, bool per_expert) {
  const int64_t nt = default_pool().num_threads();
  if (nt <= 1 || ThreadPool::in_parallel_region()) return false;
  int64_t groups = 0, rows = 0, most = 0;
  for (int64_t e = 0; e < E && per_expert; ++e) {
    int64_t r = 0;
    for (int64_t b = 0; b < B; ++b) r += group_rows(group_sizes + b * E, N, e).second;
    groups += r > 0;
    rows += r;
    most = std::max(most, r);
  }
  for (int64_t b = 0; b < B && !per_expert; ++b)
    for (int64_t e = 0; e < E; ++e) {
      const int64_t r = group_rows(group_sizes + b * E, N, e).second;
      groups += r > 0;
      rows += r;
      most = std::max(most, r);
    }
  return groups >= 2 * nt && most * groups <= 2 * rows;
}
}  // namespace

void ragged_dot(const float* lhs, const float* rhs, const int32_t* group_sizes, int64_t B,
                int64_t N, int64_t K, int64_t P, int64_t E, bool trans_b, float* out) {
  auto one = [&](int64_t b, int64_t e) {
    const auto [at, rows] = group_rows(group_sizes + b * E, N, e);
    if (rows > 0)
      matmul(false, trans_b, rows, P, K, 1.0f, lhs + (b * N + at) * K, K, rhs + e * K * P,
             trans_b ? K : P, 0.0f, out + (b * N + at) * P, P);
  };
  if (by_groups(group_sizes, B, N, E, false)) {
    default_pool().run(B * E, [&](int64_t t) { one(t / E, t % E); });  // matmul: one thread each
  } else {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t e = 0; e < E; ++e) one(b, e);
  }
  for (int64_t b = 0; b < B; ++b) {
    const auto [at, rows] = group_rows(group_sizes + b * E, N, E - 1);
    std::fill(out + (b * N + at + rows) * P, out + (b + 1) * N * P, 0.0f);
  }
}

void ragged_dot_grad(const float* lhs, const float* dout, const int32_t* group_sizes, int64_t B,
                     int64_t N, int64_t K, int64_t P, int64_t E, float* drhs) {
  std::fill(drhs, drhs + E * K * P, 0.0f);
  auto one = [&](int64_t e) {  // drhs[e] over the rows b, in b order
    for (int64_t b = 0; b < B; ++b) {
      const auto [at, rows] = group_rows(group_sizes + b * E, N, e);
      if (rows > 0)
        matmul(true, false, K, P, rows, 1.0f, lhs + (b * N + at) * K, K, dout + (b * N + at) * P,
               P, 1.0f, drhs + e * K * P, P);
    }
  };
  if (by_groups(group_sizes, B, N, E, true)) {
    default_pool().run(E, one);
  } else {
    for (int64_t e = 0; e < E; ++e) one(e);
  }
}

// ---- embedding ------------------------------------------------------------------------------

void embed_lookup(const float* table, const int32_t* ids, float* out, int64_t N, int64_t V,
                  int64_t E, int64_t offset) {
  parallel_for(N, row_grain(E), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const int64_t id = ids[n] - offset;
      if (id >= 0 && id < V)
        std::memcpy(out + n * E, table + id * E, sizeof(float) * E);
      else
        std::memset(out + n * E, 0, sizeof(float) * E);
    }
  });
}

// Parallel over column slices of the table: every dtable element is summed by one thread in
// the order n = 0, 1, ..., so the result is bitwise the same for any thread count.
void embed_lookup_grad(const int32_t* ids, const float* dy, float* dtable, int64_t N, int64_t V,
                       int64_t E, int64_t offset) {
  parallel_for(V, row_grain(E), [&](int64_t lo, int64_t hi) {
    std::memset(dtable + lo * E, 0, sizeof(float) * (hi - lo) * E);
  });
  const int64_t col_grain = std::max<int64_t>(16, kMinParallelElems / std::max<int64_t>(1, N));
  parallel_for(E, col_grain, [&](int64_t e0, int64_t e1) {
    for (int64_t n = 0; n < N; ++n) {
      const int64_t id = ids[n] - offset;
      if (id < 0 || id >= V) continue;
      float* dst = dtable + id * E;   // (E)
      const float* src = dy + n * E;  // (E)
      for (int64_t e = e0; e < e1; e += kW) {
        Mask m = simd::mask_for(e1 - e);
        simd::store(dst + e, simd::load(dst + e, m) + simd::load(src + e, m), m);
      }
    }
  });
}

void one_hot(const int32_t* ids, float* out, int64_t N, int64_t V) {
  parallel_for(N, row_grain(V), [&](int64_t lo, int64_t hi) {
    std::memset(out + lo * V, 0, sizeof(float) * (hi - lo) * V);
    for (int64_t n = lo; n < hi; ++n)
      if (ids[n] >= 0 && ids[n] < V) out[n * V + ids[n]] = 1.f;
  });
}

// ---- RMSNorm --------------------------------------------------------------------------------

void rmsnorm_forward(const float* x, const float* scale, float* y, float* rstd, int64_t N,
                     int64_t E, float eps) {
  parallel_for(N, row_grain(E), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float* xr = x + n * E;  // (E)
      float* yr = y + n * E;        // (E)
      const float r = 1.f / std::sqrt(simd::dot(xr, xr, E) / static_cast<float>(E) + eps);
      rstd[n] = r;
      const Vec rv = simd::set1(r);
      for (int64_t e = 0; e < E; e += kW) {
        Mask m = simd::mask_for(E - e);
        simd::store(yr + e, simd::load(xr + e, m) * rv * simd::load(scale + e, m), m);
      }
    }
  });
}

// dscale is summed per fixed block of kNormRows rows (partials in the caller's scratch), then
// the blocks are added in order: deterministic for any thread count.
namespace {
constexpr int64_t kNormRows = 32;                      // rmsnorm_backward: rows per partial
thread_local std::vector<float> t_rmsnorm_partials;    // (blocks, E), reserved or grown once
}  // namespace

void rmsnorm_backward(const float* x, const float* scale, const float* rstd, const float* dy,
                      float* dx, float* dscale, int64_t N, int64_t E) {
  const int64_t blocks = (N + kNormRows - 1) / kNormRows;
  if (static_cast<int64_t>(t_rmsnorm_partials.size()) < blocks * E) t_rmsnorm_partials.resize(blocks * E);
  float* partials = t_rmsnorm_partials.data();
  parallel_for(blocks, row_grain(kNormRows * E), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* part = partials + b * E;  // (E)
      std::fill(part, part + E, 0.f);
      for (int64_t n = b * kNormRows; n < std::min(N, (b + 1) * kNormRows); ++n) {
        const float* xr = x + n * E;
        const float* dyr = dy + n * E;
        float* dxr = dx + n * E;
        const float r = rstd[n];
        Vec acc = simd::set1(0.f);  // sum_e dy * s * x
        for (int64_t e = 0; e < E; e += kW) {
          Mask m = simd::mask_for(E - e);
          acc = simd::fma(simd::load(dyr + e, m) * simd::load(scale + e, m), simd::load(xr + e, m), acc);
        }
        const Vec rv = simd::set1(r);
        const Vec cv = simd::set1(r * r * r * simd::reduce_add(acc) / static_cast<float>(E));
        for (int64_t e = 0; e < E; e += kW) {
          Mask m = simd::mask_for(E - e);
          const Vec xv = simd::load(xr + e, m), dyv = simd::load(dyr + e, m);
          simd::store(dxr + e, rv * dyv * simd::load(scale + e, m) - xv * cv, m);
          simd::store(part + e, simd::fma(dyv * xv, rv, simd::load(part + e, m)), m);
        }
      }
    }
  });
  parallel_for(E, std::max<int64_t>(16, kMinParallelElems / std::max<int64_t>(1, blocks)),
               [&](int64_t e0, int64_t e1) {
                 for (int64_t e = e0; e < e1; e += kW) {
                   Mask m = simd::mask_for(e1 - e);
                   Vec acc = simd::set1(0.f);
                   for (int64_t b = 0; b < blocks; ++b) acc = acc + simd::load(partials + b * E + e, m);
                   simd::store(dscale + e, acc, m);
                 }
               });
}

// ---- RoPE -----------------------------------------------------------------------------------
namespace {

constexpr int64_t kRopeMaxCachedPos = 1 << 14;  // table <= 16K x D floats per thread

// cos/sin of pos / timescale_i for positions [0, npos), one per thread, grown on first use:
// row p holds cos for i < D/2 then sin. Angles are computed in double.
struct RopeTable {
  int64_t D = 0;
  float min_ts = 0, max_ts = 0;
  int64_t npos = 0;
  std::vector<float> cs;  // (npos, D)
  bool use_scale = false;  // Llama 3.1's timescales (rope_form.h)
  static constexpr int64_t kMaxPos = kRopeMaxCachedPos;

  bool matches(int64_t d, float lo, float hi, bool scale) const {
    return D == d && min_ts == lo && max_ts == hi && use_scale == scale;
  }
  static void fill_row(float* row, int64_t pos, int64_t D, float min_ts, float max_ts,
                       bool use_scale) {
    const int64_t half = D / 2;
    for (int64_t i = 0; i < half; ++i) {
      const double ts = rope_timescale<double>(i, D, min_ts, max_ts, use_scale);
      const double ang = static_cast<double>(pos) / ts;
      row[i] = static_cast<float>(std::cos(ang));
      row[half + i] = static_cast<float>(std::sin(ang));
    }
  }
  const float* row(int64_t pos) {
    if (pos >= npos) {
      const int64_t want = std::min(std::max<int64_t>(pos + 1, 2 * npos), kMaxPos);
      cs.resize(want * D);
      for (int64_t p = npos; p < want; ++p)
        fill_row(cs.data() + p * D, p, D, min_ts, max_ts, use_scale);
      npos = want;
    }
    return cs.data() + pos * D;
  }
};

thread_local RopeTable t_rope_table;     // this thread's cos/sin rows
thread_local std::vector<float> t_rope_odd;  // a row for positions beyond the table

}  // namespace

// This thread's cos/sin row for position p (cos for i < D/2, then sin), as rope() uses it;
// also for the bf16 rope in kernels_bf16.cpp, which shares the table.
const float* rope_table_row(int64_t p, int64_t D, float min_timescale, float max_timescale,
                            bool use_scale) {
  RopeTable& table = t_rope_table;
  if (!table.matches(D, min_timescale, max_timescale, use_scale))
    table = RopeTable{D, min_timescale, max_timescale, 0, std::move(table.cs), use_scale};
  if (p >= 0 && p < kRopeMaxCachedPos) return table.row(p);
  t_rope_odd.resize(D);
  RopeTable::fill_row(t_rope_odd.data(), p, D, min_timescale, max_timescale, use_scale);
  return t_rope_odd.data();
}

void rope(const float* x, const int32_t* pos, float* y, int64_t B, int64_t T, int64_t H,
          int64_t D, float min_timescale, float max_timescale, bool inverse, RopeForm form) {
  const int64_t half = D / 2;
  const int64_t row = H * D;
  parallel_for(B * T, row_grain(row), [&](int64_t lo, int64_t hi) {
    for (int64_t bt = lo; bt < hi; ++bt) {
      const float* c = rope_table_row(pos[bt], D, min_timescale, max_timescale, form.use_scale);
      const float* s = c + half;
      const float sign = inverse ? -1.f : 1.f;
      for (int64_t h = 0; h < H; ++h) {
        const float* xr = x + bt * row + h * D;  // (D)
        float* yr = y + bt * row + h * D;        // (D)
        if (form.interleave) {  // adjacent pairs (LLaMARotaryEmbedding)
          for (int64_t i = 0; i < half; ++i) {
            const float x1 = xr[2 * i], x2 = xr[2 * i + 1], si = sign * s[i];
            yr[2 * i] = x1 * c[i] - x2 * si;
            yr[2 * i + 1] = x2 * c[i] + x1 * si;
          }
          continue;
        }
        for (int64_t i = 0; i < half; i += kW) {
          Mask m = simd::mask_for(half - i);
          const Vec x1 = simd::load(xr + i, m), x2 = simd::load(xr + half + i, m);
          const Vec ci = simd::load(c + i, m), si = simd::set1(sign) * simd::load(s + i, m);
          simd::store(yr + i, x1 * ci - x2 * si, m);
          simd::store(yr + half + i, x2 * ci + x1 * si, m);
        }
      }
    }
  });
}

// ---- reductions -----------------------------------------------------------------------------
namespace {

// Fixed chunks (independent of the thread count), each summed in a fixed lane order, then
// the chunk sums added in order: the result is bitwise reproducible.
constexpr int64_t kSumChunk = 1 << 14;

template <bool kSquares>
double chunk_sum(const float* x, int64_t n) {
#if ENG_AVX512
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += simd::kW) {
    __m512 v = _mm512_maskz_loadu_ps(simd::mask_for(n - i), x + i);
    __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    if constexpr (kSquares) {
      a0 = _mm512_fmadd_pd(lo, lo, a0);
      a1 = _mm512_fmadd_pd(hi, hi, a1);
    } else {
      a0 = _mm512_add_pd(a0, lo);
      a1 = _mm512_add_pd(a1, hi);
    }
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
#else
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += kSquares ? double(x[i]) * x[i] : double(x[i]);
  return acc;
#endif
}

thread_local std::vector<double> t_sum_partials;  // one per chunk, reserved or grown once

template <bool kSquares>
double chunked_sum(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  if (chunks == 1) return chunk_sum<kSquares>(x, n);
  if (static_cast<int64_t>(t_sum_partials.size()) < chunks) t_sum_partials.resize(chunks);
  double* partials = t_sum_partials.data();
  parallel_for(chunks, 4, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t lo = c * kSumChunk;
      partials[c] = chunk_sum<kSquares>(x + lo, std::min(kSumChunk, n - lo));
    }
  });
  double total = 0;
  for (int64_t c = 0; c < chunks; ++c) total += partials[c];
  return total;
}

}  // namespace

double sum(const float* x, int64_t n) { return chunked_sum<false>(x, n); }
double sum_squares(const float* x, int64_t n) { return chunked_sum<true>(x, n); }

void ScratchNeeds::merge(const ScratchNeeds& o) {
  attention_seq = std::max(attention_seq, o.attention_seq);
  rmsnorm_rows = std::max(rmsnorm_rows, o.rmsnorm_rows);
  rmsnorm_width = std::max(rmsnorm_width, o.rmsnorm_width);
  sum_elements = std::max(sum_elements, o.sum_elements);
  attention_head_dim = std::max(attention_head_dim, o.attention_head_dim);
  bf16_matmul_bytes = std::max(bf16_matmul_bytes, o.bf16_matmul_bytes);
  loss_vocab = std::max(loss_vocab, o.loss_vocab);
  if (o.rope_dim > 0) {
    rope_positions = std::max(rope_positions, o.rope_positions);
    rope_dim = o.rope_dim;
    rope_min_timescale = o.rope_min_timescale;
    rope_max_timescale = o.rope_max_timescale;
    rope_use_scale = o.rope_use_scale;
  }
}

void reserve_attention_scratch(int64_t T);  // attention.cpp
void reserve_bf16_scratch(const ScratchNeeds& n);  // kernels_bf16.cpp
void reserve_loss_scratch(int64_t V);              // loss.cpp

static void reserve_scratch_or_throw(const ScratchNeeds& n) {
  reserve_bf16_scratch(n);
  if (n.loss_vocab > 0) reserve_loss_scratch(n.loss_vocab);
  if (n.attention_seq > 0) reserve_attention_scratch(n.attention_seq);
  const int64_t blocks = (n.rmsnorm_rows + kNormRows - 1) / kNormRows;
  if (static_cast<int64_t>(t_rmsnorm_partials.size()) < blocks * n.rmsnorm_width)
    t_rmsnorm_partials.resize(blocks * n.rmsnorm_width);
  const int64_t chunks = (n.sum_elements + kSumChunk - 1) / kSumChunk;
  if (static_cast<int64_t>(t_sum_partials.size()) < chunks) t_sum_partials.resize(chunks);
  if (n.rope_dim > 0) {
    RopeTable& table = t_rope_table;
    if (!table.matches(n.rope_dim, n.rope_min_timescale, n.rope_max_timescale, n.rope_use_scale))
      table = RopeTable{n.rope_dim, n.rope_min_timescale, n.rope_max_timescale, 0,
                        std::move(table.cs), n.rope_use_scale};
    const int64_t last = std::min(n.rope_positions, kRopeMaxCachedPos) - 1;
    if (last >= 0) table.row(last);  // tabulates every position up to `last`
    if (static_cast<int64_t>(t_rope_odd.size()) < n.rope_dim) t_rope_odd.resize(n.rope_dim);
  }
}

bool reserve_scratch(const ScratchNeeds& n) {
  try {
    reserve_scratch_or_throw(n);
  } catch (const std::bad_alloc&) {
    return false;
  } catch (const std::length_error&) {  // a size over the vector's max_size
    return false;
  }
  return true;
}

}  // namespace eng::kern
