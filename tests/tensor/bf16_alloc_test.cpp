// tests/tensor/bf16_alloc_test.cpp: heap allocations of the bf16 kernels in steady state. The
// global allocator is replaced by tests/common/alloc_counter.cpp (linked into this binary).
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/alloc_counter.h"

#include "engine/base/thread_pool.h"
#include "engine/tensor/blas.h"
#include "engine/tensor/cpu_info.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/onednn_matmul.h"

namespace eng {
namespace {

using eng::testing::allocations_during;

// Small f32 products (the MoE router's tokens x d x experts, a head's scores) allocate nothing
// either: OpenBLAS 0.3.21's SkylakeX/Cooperlake small-matrix NN sgemm mallocs when the
// column count mod 16 is 1-8 (blas.cpp runs those itself; regression: 4 allocations per MoE
// step on AVX-512 CPUs).
TEST(Bf16Alloc, SmallSgemmsAllocateNothing) {
  blas_info();
  std::vector<float> a(64 * 64, 0.5f), b(64 * 64, 0.25f), c(64 * 64);
  const int64_t n = allocations_during([&] {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int64_t M : {1, 7, 16, 40})
          for (int64_t N : {1, 4, 8, 20, 24, 33})
            for (int64_t K : {8, 32, 64})
              blas::sgemm(ta, tb, M, N, K, 1.f, a.data(), ta ? M : K, b.data(), tb ? K : N, 0.f,
                          c.data(), N);
  });
  EXPECT_EQ(n, 0) << "OpenBLAS core " << blas_info().core;
}

// After reserve_scratch on every pool thread, the fused bf16 kernels allocate nothing, from
// their first call on.
// D = 48: attention's AMX products pack A (D not a multiple of 32), which the reservation covers.
TEST(Bf16Alloc, FusedKernelsAllocateNothingAfterReserve) {
  for (const int64_t D : {32, 48}) {
  const int64_t B = 2, T = 130, H = 2, N = B * T, E = H * D, n = N * E;
  kern::ScratchNeeds needs;
  needs.attention_seq = T;
  needs.attention_head_dim = D;
  needs.rmsnorm_rows = N;
  needs.rmsnorm_width = E;
  needs.rope_positions = T;
  needs.rope_dim = D;
  default_pool().run_on_every_thread([&] { kern::reserve_scratch(needs); });
  blas_info();  // loads OpenBLAS (attention's sgemms), as main() does first
  std::vector<uint16_t> a(n, 0x3f80), b(n, 0x3f00), c(n), d(n), e(n), f(n), g(n);
  std::vector<float> scale(E, 1.f), rstd(N), dscale(E), lse(B * H * T);
  std::vector<int32_t> pos(N), seg(N, 1);
  for (int64_t i = 0; i < N; ++i) pos[i] = static_cast<int32_t>(i % T);
  const int64_t allocs = allocations_during([&] {
    kern::rmsnorm_forward_bf16(a.data(), scale.data(), c.data(), rstd.data(), N, E, 1e-5f);
    kern::rmsnorm_backward_bf16(a.data(), scale.data(), rstd.data(), b.data(), d.data(),
                                dscale.data(), N, E);
    kern::rope_bf16(a.data(), pos.data(), c.data(), B, T, H, D, 1.f, 1e4f, false);
    kern::attention_forward_bf16(a.data(), b.data(), a.data(), seg.data(), c.data(), lse.data(),
                                 B, T, H, D, 0.1f);
    kern::attention_backward_bf16(a.data(), b.data(), a.data(), c.data(), lse.data(), seg.data(),
                                  b.data(), d.data(), e.data(), f.data(), B, T, H, D, 0.1f);
    kern::swiglu_forward_bf16(a.data(), b.data(), c.data(), n);
    kern::swiglu_backward_bf16(a.data(), b.data(), a.data(), d.data(), e.data(), n);
    kern::add_bf16(a.data(), b.data(), g.data(), n);
    kern::mul_bf16(a.data(), b.data(), g.data(), n);
  });
  EXPECT_EQ(allocs, 0) << "D=" << D;
  }
}

// A matmul plan's run() allocates no buffers (scratch reserved per thread). With kAuto (the
// native GEMM on avx512_bf16, convert+sgemm without it: this binary runs again with
// SHARDLAB_DISABLE_AVX512_BF16=1) and with convert+sgemm it allocates nothing at all; through
// oneDNN, its execute() makes a few bookkeeping allocations per block of C (memory handles,
// argument maps), measured here so a change shows up.
TEST(Bf16Alloc, MatmulRunAllocatesNothingNativeAndBookkeepingOnednn) {
  for (kern::MatmulBackend be : {kern::MatmulBackend::kAuto, kern::MatmulBackend::kConvertSgemm,
                                 kern::MatmulBackend::kOnednn, kern::MatmulBackend::kPacked})
    for (int64_t M : {256, 1024}) {
      kern::Bf16MatmulShape s{false, true, M, 512, 256, 256, 256, 512, DType::kBF16};
      auto plan = kern::Bf16MatmulPlan::create(s, be);
      if (be == kern::MatmulBackend::kPacked && !plan.ok()) continue;  // a build without AVX2
      if (be == kern::MatmulBackend::kOnednn && !cpu_info().avx512()) continue;  // no oneDNN bf16
      ASSERT_TRUE(plan.ok());
      const int64_t bytes = (*plan)->scratch_bytes();
      default_pool().run_on_every_thread([&] { kern::reserve_bf16_matmul_scratch(bytes); });
      std::vector<uint16_t> A(M * 256, 0x3f80), B(512 * 256, 0x3f80), C(M * 512);
      (*plan)->run(A.data(), B.data(), C.data());  // warm: first use of a oneDNN primitive
      const int64_t allocs = allocations_during([&] { (*plan)->run(A.data(), B.data(), C.data()); });
      std::printf("M=%lld %s: %lld allocations in one run\n", static_cast<long long>(M),
                  (*plan)->describe().c_str(), static_cast<long long>(allocs));
      if ((*plan)->backend() != kern::MatmulBackend::kOnednn)
        EXPECT_EQ(allocs, 0);
      else
        EXPECT_LE(allocs, 40 * (*plan)->parts());
    }
}

}  // namespace
}  // namespace eng
