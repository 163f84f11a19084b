// engine/tensor/repeat_kv.cpp: grouped-query attention's kv-head repeat and its transpose
// (kernels.h), split over the pool by rows.
#include <cstring>

#include "engine/base/thread_pool.h"
#include "engine/tensor/kernels.h"

namespace eng::kern {

namespace {
// Rows (tokens) per parallel chunk at least, for about kElemGrain elements of work a chunk.
int64_t row_grain(int64_t elems_per_row) {
  constexpr int64_t kElemGrain = 1 << 15;
  return elems_per_row >= kElemGrain ? 1 : kElemGrain / (elems_per_row > 0 ? elems_per_row : 1);
}
}  // namespace

void repeat_kv(const void* x, void* y, int64_t N, int64_t Hkv, int64_t D, int64_t R,
               int64_t elem_bytes) {
  const int64_t H = Hkv * R, head = D * elem_bytes;
  const char* xs = static_cast<const char*>(x);
  char* ys = static_cast<char*>(y);
  parallel_for(N, row_grain(H * D), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t h = 0; h < H; ++h)
        std::memcpy(ys + (n * H + h) * head, xs + (n * Hkv + h / R) * head, head);
  });
}

void repeat_kv_grad(const float* dy, float* dx, int64_t N, int64_t Hkv, int64_t D, int64_t R) {
  const int64_t H = Hkv * R;
  parallel_for(N, row_grain(H * D), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t j = 0; j < Hkv; ++j) {
        float* out = dx + (n * Hkv + j) * D;
        const float* in = dy + (n * H + j * R) * D;
        std::memcpy(out, in, D * sizeof(float));
        for (int64_t r = 1; r < R; ++r)
          for (int64_t d = 0; d < D; ++d) out[d] += in[r * D + d];
      }
  });
}

}  // namespace eng::kern
