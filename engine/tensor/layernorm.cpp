// engine/tensor/layernorm.cpp: MaxText's Gpt3LayerNorm (zero-centred scale, bias) and the
// bias add of DenseGeneral(use_bias=True), forward and backward (kernels.h), f32 on the pool.
#include <algorithm>
#include <cmath>

#include "engine/base/thread_pool.h"
#include "engine/tensor/kernels.h"

namespace eng::kern {
namespace {

constexpr int64_t kMinParallelElems = 1 << 14;
int64_t rows_grain(int64_t row_len) {
  return std::max<int64_t>(1, kMinParallelElems / std::max<int64_t>(1, row_len));
}
constexpr int64_t kColumnBlock = 64;  // columns per task of the row sums

// out[f] = sum_r a[r, f] * w(r) for f in [f0, f1): rows in order, so the result does not
// depend on the thread count.
template <typename RowWeight>
void column_sums(const float* a, float* out, int64_t rows, int64_t F, RowWeight w) {
  const int64_t blocks = (F + kColumnBlock - 1) / kColumnBlock;
  parallel_for(blocks, std::max<int64_t>(1, rows_grain(rows * kColumnBlock)),
               [&](int64_t b0, int64_t b1) {
                 for (int64_t b = b0; b < b1; ++b) {
                   const int64_t f0 = b * kColumnBlock, f1 = std::min(F, f0 + kColumnBlock);
                   double acc[kColumnBlock] = {};
                   for (int64_t r = 0; r < rows; ++r) {
                     const float* row = a + r * F;
                     const double wr = w(r);
                     for (int64_t f = f0; f < f1; ++f) acc[f - f0] += wr * row[f];
                   }
                   for (int64_t f = f0; f < f1; ++f) out[f] = static_cast<float>(acc[f - f0]);
                 }
               });
}

}  // namespace

void layernorm_forward(const float* x, const float* scale, const float* bias, float* y,
                       float* mean, float* rstd, int64_t N, int64_t E, float eps) {
  parallel_for(N, rows_grain(E), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float* xr = x + n * E;
      double s = 0, v = 0;
      for (int64_t e = 0; e < E; ++e) s += xr[e];
      const double m = s / static_cast<double>(E);
      for (int64_t e = 0; e < E; ++e) v += (xr[e] - m) * (xr[e] - m);
      const double r = 1.0 / std::sqrt(v / static_cast<double>(E) + eps);
      mean[n] = static_cast<float>(m);
      rstd[n] = static_cast<float>(r);
      const float mf = static_cast<float>(m), rf = static_cast<float>(r);
      float* yr = y + n * E;
      for (int64_t e = 0; e < E; ++e) yr[e] = (xr[e] - mf) * rf * (1.f + scale[e]) + bias[e];
    }
  });
}

void layernorm_backward(const float* x, const float* scale, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dscale, float* dbias, int64_t N,
                        int64_t E) {
  parallel_for(N, rows_grain(E), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float m = mean[n], r = rstd[n];
      const float* xr = x + n * E;
      const float* dyr = dy + n * E;
      double mg = 0, mgx = 0;
      for (int64_t e = 0; e < E; ++e) {
        const double g = dyr[e] * (1.0 + scale[e]), xh = (xr[e] - m) * r;
        mg += g;
        mgx += g * xh;
      }
      const float a = static_cast<float>(mg / static_cast<double>(E));
      const float c = static_cast<float>(mgx / static_cast<double>(E));
      float* dxr = dx + n * E;
      for (int64_t e = 0; e < E; ++e) {
        const float g = dyr[e] * (1.f + scale[e]), xh = (xr[e] - m) * r;
        dxr[e] = r * (g - a - xh * c);
      }
    }
  });
  column_sums(dy, dbias, N, E, [](int64_t) { return 1.0; });
  // dscale[e] = sum_n dy[n, e] (x[n, e] - mean[n]) rstd[n], rows in order.
  const int64_t blocks = (E + kColumnBlock - 1) / kColumnBlock;
  parallel_for(blocks, std::max<int64_t>(1, rows_grain(N * kColumnBlock)),
               [&](int64_t b0, int64_t b1) {
                 for (int64_t b = b0; b < b1; ++b) {
                   const int64_t e0 = b * kColumnBlock, e1 = std::min(E, e0 + kColumnBlock);
                   double acc[kColumnBlock] = {};
                   for (int64_t n = 0; n < N; ++n) {
                     const float m = mean[n], r = rstd[n];
                     for (int64_t e = e0; e < e1; ++e)
                       acc[e - e0] += static_cast<double>(dy[n * E + e]) * ((x[n * E + e] - m) * r);
                   }
                   for (int64_t e = e0; e < e1; ++e) dscale[e] = static_cast<float>(acc[e - e0]);
                 }
               });
}

void bias_add(const float* x, const float* bias, float* y, int64_t rows, int64_t F) {
  parallel_for(rows, rows_grain(F), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      for (int64_t f = 0; f < F; ++f) y[r * F + f] = x[r * F + f] + bias[f];
  });
}

void bias_add_grad(const float* dy, float* dbias, int64_t rows, int64_t F) {
  column_sums(dy, dbias, rows, F, [](int64_t) { return 1.0; });
}

}  // namespace eng::kern
