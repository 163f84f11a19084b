// engine/tensor/kernels_bf16.cpp: bf16 RMSNorm, RoPE, SwiGLU, add, mul (kernels.h, bf16
// section): f32 math with bf16 rounding at MaxText's points; attention is attention_bf16.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/tensor/bf16_simd.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/onednn_matmul.h"
#include "engine/tensor/simd.h"

namespace eng::kern {

const float* rope_table_row(int64_t p, int64_t D, float min_timescale, float max_timescale,
                            bool use_scale);  // kernels.cpp
void reserve_attention_bf16_scratch(int64_t T, int64_t D);  // attention_bf16.cpp

namespace bf16 {
#if defined(__AVX512BF16__)
const bool g_hw_convert = cpu_has_avx512_bf16();
#else
const bool g_hw_convert = false;
#endif
}  // namespace bf16

namespace {

using simd::kW;
using simd::Mask;
using simd::Vec;

constexpr int64_t kElemGrain = 1 << 15;  // elements per parallel chunk at least
constexpr int64_t kRowElems = 1 << 14;   // row kernels: about this many elements per chunk
constexpr int64_t kNormRows = 32;        // rmsnorm_backward_bf16: rows per dscale partial

int64_t row_grain(int64_t row_len) { return std::max<int64_t>(1, kRowElems / std::max<int64_t>(1, row_len)); }

// body(i, mask) for every kW-wide block of [0, n), in parallel over whole blocks.
template <typename Body>
void for_each_block(int64_t n, Body&& body) {
  const int64_t blocks = (n + kW - 1) / kW;
  parallel_for(blocks, kElemGrain / kW, [&](int64_t b0, int64_t b1) {
    const int64_t hi = std::min(n, b1 * kW);
    for (int64_t i = b0 * kW; i < hi; i += kW) body(i, simd::mask_for(hi - i));
  });
}

thread_local std::vector<float> t_norm_partials;  // (blocks, E) dscale partials

[[gnu::always_inline]] inline Vec sigmoid(Vec g) {
  const Vec one = simd::set1(1.f);
  return one / (one + simd::exp(simd::set1(0.f) - g));
}

}  // namespace

// ---- RMSNorm --------------------------------------------------------------------------------

void rmsnorm_forward_bf16(const uint16_t* x, const float* scale, uint16_t* y, float* rstd,
                          int64_t N, int64_t E, float eps) {
  parallel_for(N, row_grain(E), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const uint16_t* xr = x + n * E;  // (E)
      Vec acc = simd::set1(0.f);
      for (int64_t e = 0; e < E; e += kW) {
        const Vec xv = bf16::load(xr + e, simd::mask_for(E - e));
        acc = simd::fma(xv, xv, acc);
      }
      const float r = 1.f / std::sqrt(simd::reduce_add(acc) / static_cast<float>(E) + eps);
      rstd[n] = r;
      const Vec rv = simd::set1(r);
      for (int64_t e = 0; e < E; e += kW) {
        const Mask m = simd::mask_for(E - e);
        const Vec yn = bf16::round(bf16::load(xr + e, m) * rv);
        bf16::store(y + n * E + e, yn * bf16::round(simd::load(scale + e, m)), m);
      }
    }
  });
}

namespace {

// Rows [n0, n1) of the backward: dx rows, and this block's dscale partial `part` (E).
void rmsnorm_backward_rows(const uint16_t* x, const float* scale, const float* rstd,
                           const uint16_t* dy, uint16_t* dx, float* part, int64_t n0, int64_t n1,
                           int64_t E) {
  std::fill(part, part + E, 0.f);
  for (int64_t n = n0; n < n1; ++n) {
    const uint16_t* xr = x + n * E;    // (E)
    const uint16_t* dyr = dy + n * E;  // (E)
    const Vec rv = simd::set1(rstd[n]);
    Vec acc = simd::set1(0.f);  // sum_e g * x, g = rb(dy * rb(scale))
    for (int64_t e = 0; e < E; e += kW) {
      const Mask m = simd::mask_for(E - e);
      const Vec g = bf16::round(bf16::load(dyr + e, m) * bf16::round(simd::load(scale + e, m)));
      acc = simd::fma(g, bf16::load(xr + e, m), acc);
    }
    const float r = rstd[n];
    const Vec cv = simd::set1(r * r * r * simd::reduce_add(acc) / static_cast<float>(E));
    for (int64_t e = 0; e < E; e += kW) {
      const Mask m = simd::mask_for(E - e);
      const Vec xv = bf16::load(xr + e, m), dyv = bf16::load(dyr + e, m);
      const Vec g = bf16::round(dyv * bf16::round(simd::load(scale + e, m)));
      bf16::store(dx + n * E + e, rv * g - xv * cv, m);
      simd::store(part + e, simd::fma(dyv, bf16::round(xv * rv), simd::load(part + e, m)), m);
    }
  }
}

}  // namespace

// dscale: partials per fixed block of kNormRows rows, added in block order: deterministic.
void rmsnorm_backward_bf16(const uint16_t* x, const float* scale, const float* rstd,
                           const uint16_t* dy, uint16_t* dx, float* dscale, int64_t N, int64_t E) {
  const int64_t blocks = (N + kNormRows - 1) / kNormRows;
  if (static_cast<int64_t>(t_norm_partials.size()) < blocks * E) t_norm_partials.resize(blocks * E);
  float* partials = t_norm_partials.data();
  parallel_for(blocks, row_grain(kNormRows * E), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      rmsnorm_backward_rows(x, scale, rstd, dy, dx, partials + b * E, b * kNormRows,
                            std::min(N, (b + 1) * kNormRows), E);
  });
  parallel_for(E, std::max<int64_t>(16, kRowElems / std::max<int64_t>(1, blocks)),
               [&](int64_t e0, int64_t e1) {
                 for (int64_t e = e0; e < e1; e += kW) {
                   const Mask m = simd::mask_for(e1 - e);
                   Vec acc = simd::set1(0.f);
                   for (int64_t b = 0; b < blocks; ++b) acc = acc + simd::load(partials + b * E + e, m);
                   simd::store(dscale + e, bf16::round(acc), m);
                 }
               });
}

// ---- RoPE -----------------------------------------------------------------------------------

void rope_bf16(const uint16_t* x, const int32_t* pos, uint16_t* y, int64_t B, int64_t T, int64_t H,
               int64_t D, float min_timescale, float max_timescale, bool inverse,
               RopeForm form) {
  const int64_t half = D / 2, row = H * D;
  const Vec sign = simd::set1(inverse ? -1.f : 1.f);
  parallel_for(B * T, row_grain(row), [&](int64_t lo, int64_t hi) {
    for (int64_t bt = lo; bt < hi; ++bt) {
      const float* cs = rope_table_row(pos[bt], D, min_timescale, max_timescale,
                                       form.use_scale);  // cos | sin
      if (form.interleave) {  // LLaMARotaryEmbedding: f32 math, the result rounded once
        const float sg = inverse ? -1.f : 1.f;
        for (int64_t h = 0; h < H; ++h) {
          const uint16_t* xr = x + bt * row + h * D;  // (D)
          uint16_t* yr = y + bt * row + h * D;        // (D)
          for (int64_t i = 0; i < half; ++i) {
            const float x1 = bf16_to_f32(xr[2 * i]), x2 = bf16_to_f32(xr[2 * i + 1]);
            const float c = cs[i], sn = sg * cs[half + i];
            yr[2 * i] = f32_to_bf16(x1 * c - x2 * sn);
            yr[2 * i + 1] = f32_to_bf16(x2 * c + x1 * sn);
          }
        }
        continue;
      }
      for (int64_t i = 0; i < half; i += kW) {  // c, s rounded once per position, for all heads
        const Mask m = simd::mask_for(half - i);
        const Vec c = bf16::round(simd::load(cs + i, m));
        const Vec s = sign * bf16::round(simd::load(cs + half + i, m));
        for (int64_t h = 0; h < H; ++h) {
          const uint16_t* xr = x + bt * row + h * D;  // (D)
          uint16_t* yr = y + bt * row + h * D;        // (D)
          const Vec x1 = bf16::load(xr + i, m), x2 = bf16::load(xr + half + i, m);
          bf16::store(yr + i, bf16::round(x1 * c) - bf16::round(x2 * s), m);
          bf16::store(yr + half + i, bf16::round(x2 * c) + bf16::round(x1 * s), m);
        }
      }
    }
  });
}

// ---- elementwise ----------------------------------------------------------------------------

void swiglu_forward_bf16(const uint16_t* g, const uint16_t* u, uint16_t* y, int64_t n) {
  for_each_block(n, [&](int64_t i, Mask m) {
    const Vec gv = bf16::load(g + i, m);
    const Vec a = bf16::round(gv * bf16::round(sigmoid(gv)));
    bf16::store(y + i, a * bf16::load(u + i, m), m);
  });
}

void swiglu_backward_bf16(const uint16_t* g, const uint16_t* u, const uint16_t* dy, uint16_t* dg,
                          uint16_t* du, int64_t n) {
  const Vec one = simd::set1(1.f);
  for_each_block(n, [&](int64_t i, Mask m) {
    const Vec gv = bf16::load(g + i, m), uv = bf16::load(u + i, m), dyv = bf16::load(dy + i, m);
    const Vec sg = bf16::round(sigmoid(gv));
    const Vec a = bf16::round(gv * sg);
    bf16::store(du + i, dyv * a, m);
    const Vec da = bf16::round(dyv * uv);
    const Vec dsg = bf16::round(da * gv);
    const Vec dlogistic = bf16::round(sg * bf16::round(one - sg));
    bf16::store(dg + i, bf16::round(da * sg) + bf16::round(dsg * dlogistic), m);
  });
}

void add_bf16(const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n) {
  for_each_block(n, [&](int64_t i, Mask m) {
    bf16::store(y + i, bf16::load(a + i, m) + bf16::load(b + i, m), m);
  });
}

void mul_bf16(const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n) {
  for_each_block(n, [&](int64_t i, Mask m) {
    bf16::store(y + i, bf16::load(a + i, m) * bf16::load(b + i, m), m);
  });
}

// ---- scratch --------------------------------------------------------------------------------

// kernels.cpp's reserve_scratch calls this for the bf16 kernels' per-thread buffers.
void reserve_bf16_scratch(const ScratchNeeds& n) {
  const int64_t blocks = (n.rmsnorm_rows + kNormRows - 1) / kNormRows;
  if (static_cast<int64_t>(t_norm_partials.size()) < blocks * n.rmsnorm_width)
    t_norm_partials.resize(blocks * n.rmsnorm_width);
  if (n.attention_seq > 0 && n.attention_head_dim > 0)
    reserve_attention_bf16_scratch(n.attention_seq, n.attention_head_dim);
  if (n.bf16_matmul_bytes > 0) reserve_bf16_matmul_scratch(n.bf16_matmul_bytes);
}

}  // namespace eng::kern
