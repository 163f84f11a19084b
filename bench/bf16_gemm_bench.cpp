// bench/bf16_gemm_bench.cpp: the bf16 GEMM at llama-small's matmul shapes (forward X W, the
// input gradient dY W^T and the weight gradient X^T dY), side by side in one run:
//   plan    kern::Bf16MatmulPlan with kAuto (the engine's native GEMM on avx512_bf16, else the
//           packed f32 GEMM that widens bf16 while packing) on the pool
//   convert the plan with kConvertSgemm (blocks widened to f32, then sgemm: the fallback the
//           packed GEMM replaced)
//   onednn  oneDNN 2.x used directly: one primitive over the whole shape, plain row-major
//           operands (as the engine holds them), its own OpenMP threads = the pool's threads
//           ("n/a" on CPUs without AVX-512: oneDNN 2.6 has no bf16 matmul there)
//   sgemm   kern::matmul on f32 copies (the fp32 reference at the same shape)
// and the core's vdpbf16ps / vfmadd231ps peaks (12-24 independent accumulators, no memory),
// measured before and after the shapes.
//
//   SHARDLAB_NUM_THREADS=1 build/bench/bf16_gemm_bench [reps]   (default 5 reps, best of)
//
// One thread: times are the thread's CPU time (robust to a loaded machine); more: wall-clock.
//
// Each repetition runs every implementation once per shape, interleaved, so machine load hits
// them alike; GFLOP/s is from the best repetition. Prints one row per shape and the
// FLOP-weighted totals over one llama-small step (the shapes' counts per step in the table).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/base/thread_pool.h"
#include "engine/tensor/blas.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/onednn_matmul.h"
#include "engine/tensor/simd.h"

namespace {

using eng::kern::Bf16MatmulShape;

struct Case {
  const char* name;
  bool ta, tb;
  int64_t M, N, K;
  int per_step;  // how many times a llama-small step (8 layers) runs this shape
};

// llama-small: tokens 4096 (B 8 x T 512), d_model 512, mlp 1408, vocab 8192, 8 layers.
const Case kCases[] = {
    {"in-cache    ", false, false, 96, 128, 256, 0},  // A, B in L1/L2: the micro-kernel's own rate
    {"fwd  qkvo   ", false, false, 4096, 512, 512, 32},
    {"fwd  mlp in ", false, false, 4096, 1408, 512, 16},
    {"fwd  mlp out", false, false, 4096, 512, 1408, 8},
    {"fwd  logits ", false, false, 4096, 8192, 512, 1},
    {"dX   qkvo   ", false, true, 4096, 512, 512, 32},
    {"dX   mlp in ", false, true, 4096, 512, 1408, 16},
    {"dX   mlp out", false, true, 4096, 1408, 512, 8},
    {"dX   logits ", false, true, 4096, 512, 8192, 1},
    {"dW   qkvo   ", true, false, 512, 512, 4096, 32},
    {"dW   mlp in ", true, false, 512, 1408, 4096, 16},
    {"dW   mlp out", true, false, 1408, 512, 4096, 8},
    {"dW   logits ", true, false, 512, 8192, 4096, 1},
};

constexpr int kInCacheRuns = 2000;  // products per timing of the in-cache case

// With one thread, times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID): on a shared,
// loaded machine the time slices other processes take do not count. Else wall-clock.
bool g_cpu_time = false;
struct Clock {
  using time_point = double;
  static double now() {
    if (!g_cpu_time) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
};
double seconds(double t0) { return Clock::now() - t0; }

std::vector<uint16_t> random_bf16(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = eng::f32_to_bf16(d(rng));
  return v;
}

// oneDNN as a user would call it at its best: one primitive for the whole product, OpenMP
// threads = `threads`, library-managed scratchpad, created once.
struct Onednn {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul prim;
  dnnl::memory a, b, c;
  std::string impl;
  bool ok = false;
  Onednn(const Case& k, uint16_t* A, uint16_t* B, uint16_t* C) {
    try {
      make(k, A, B, C);
    } catch (const dnnl::error& e) {  // e.g. no bf16 matmul below avx512_core
      impl = std::string("oneDNN: ") + e.what();
    }
  }
  void make(const Case& k, uint16_t* A, uint16_t* B, uint16_t* C) {
    using dims = dnnl::memory::dims;
    using dt = dnnl::memory::data_type;
    const int64_t lda = k.ta ? k.M : k.K, ldb = k.tb ? k.K : k.N;
    dnnl::memory::desc ad(dims{k.M, k.K}, dt::bf16, k.ta ? dims{1, lda} : dims{lda, 1});
    dnnl::memory::desc bd(dims{k.K, k.N}, dt::bf16, k.tb ? dims{1, ldb} : dims{ldb, 1});
    dnnl::memory::desc cd(dims{k.M, k.N}, dt::bf16, dims{k.N, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), eng);
    impl = pd.impl_info_str();
    prim = dnnl::matmul(pd);
    a = dnnl::memory(ad, eng, A);
    b = dnnl::memory(bd, eng, B);
    c = dnnl::memory(cd, eng, C);
    ok = true;
  }
  void run() {
    if (!ok) return;
    prim.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    strm.wait();
  }
};

#if ENG_AVX512
// GFLOP/s of kChains independent accumulator chains of one instruction (64 flops each), from
// registers only (no loads).
template <int kChains, typename Step>
double peak(Step step, int64_t iters = 10'000'000) {
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 32
    for (int j = 0; j < kChains; ++j) acc[j] = step(acc[j]);
  const double s = seconds(t0);
  float sink = 0;
  for (auto& x : acc) sink += _mm512_reduce_add_ps(x);
  if (sink == 12345.f) std::printf(" ");
  return static_cast<double>(iters) * kChains * 64 / s * 1e-9;
}

// Prints both peaks; returns the vdpbf16ps one (0 without avx512_bf16 in the build).
double print_peaks() {
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.5f);
  double f32 = 0, bf = 0;
  for (int r = 0; r < 3; ++r) {
    // Two f32 FMA instructions (2 x 16 lanes x 2 flops) = 64 flops, as one vdpbf16ps.
    f32 = std::max(f32, peak<12>([&](__m512 a) { return _mm512_fmadd_ps(_mm512_fmadd_ps(a, x, y), x, y); }) );
#if defined(__AVX512BF16__)
    const __m512bh bx = (__m512bh)_mm512_set1_epi32(0x3f803f80);
    bf = std::max(bf, peak<24>([&](__m512 a) { return _mm512_dpbf16_ps(a, bx, bx); }));
#endif
  }
  std::printf("core peak, 1 thread: f32 FMA %.0f GFLOP/s, vdpbf16ps %.0f GFLOP/s\n", f32, bf);
  return bf;
}
#else
double print_peaks() { return 0; }
#endif

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  eng::blas_info();
  const int threads = eng::default_pool().num_threads();
  g_cpu_time = threads == 1;
  std::printf("threads %d (pool; oneDNN's OpenMP set to the same)\n", threads);
  double best_peak = print_peaks();
  double t_plan = 0, t_conv = 0, t_dnnl = 0, t_sgemm = 0, step_flops = 0;
  std::printf("%-13s %5s %5s %5s  %8s %8s %8s %8s  %s\n", "shape", "M", "N", "K", "plan", "convert",
              "onednn", "sgemm", "(GFLOP/s, best of reps; plan; oneDNN impl)");
  for (const Case& k : kCases) {
    auto A = random_bf16(k.M * k.K, 1), B = random_bf16(k.K * k.N, 2);
    std::vector<uint16_t> C(k.M * k.N);
    std::vector<float> A32(A.size()), B32(B.size()), C32(C.size());
    eng::kern::convert_bf16_to_f32(A.data(), A32.data(), A32.size());
    eng::kern::convert_bf16_to_f32(B.data(), B32.data(), B32.size());
    const int64_t lda = k.ta ? k.M : k.K, ldb = k.tb ? k.K : k.N;
    Bf16MatmulShape s{k.ta, k.tb, k.M, k.N, k.K, lda, ldb, k.N, eng::DType::kBF16};
    auto plan = eng::kern::Bf16MatmulPlan::create(s).value();
    auto conv = eng::kern::Bf16MatmulPlan::create(s, eng::kern::MatmulBackend::kConvertSgemm).value();
    const int64_t bytes = std::max(plan->scratch_bytes(), conv->scratch_bytes());
    eng::default_pool().run_on_every_thread([&] { eng::kern::reserve_bf16_matmul_scratch(bytes); });
    omp_set_num_threads(threads);
    Onednn dn(k, A.data(), B.data(), C.data());
    double bp = 1e9, bc = 1e9, bd = 1e9, bs = 1e9;
    for (int r = 0; r <= reps; ++r) {  // r == 0 warms up
      const int runs = k.per_step == 0 ? kInCacheRuns : 1;
      auto t0 = Clock::now();
      for (int i = 0; i < runs; ++i) plan->run(A.data(), B.data(), C.data());
      const double tp = seconds(t0);
      t0 = Clock::now();
      for (int i = 0; i < runs; ++i) conv->run(A.data(), B.data(), C.data());
      const double tc = seconds(t0);
      omp_set_num_threads(threads);
      t0 = Clock::now();
      for (int i = 0; i < runs; ++i) dn.run();
      const double td = seconds(t0);
      t0 = Clock::now();
      for (int i = 0; i < runs; ++i)
        eng::kern::matmul(k.ta, k.tb, k.M, k.N, k.K, 1.f, A32.data(), lda, B32.data(), ldb, 0.f,
                          C32.data(), k.N);
      const double ts = seconds(t0);
      if (r > 0) bp = std::min(bp, tp), bc = std::min(bc, tc), bd = std::min(bd, td), bs = std::min(bs, ts);
    }
    const double f = 2.0 * k.M * k.N * k.K * (k.per_step == 0 ? kInCacheRuns : 1);
    std::printf("%-13s %5lld %5lld %5lld  %8.0f %8.0f %8.0f %8.0f  %s; %s\n", k.name,
                static_cast<long long>(k.M), static_cast<long long>(k.N),
                static_cast<long long>(k.K), f / bp * 1e-9, f / bc * 1e-9, dn.ok ? f / bd * 1e-9 : 0.0,
                f / bs * 1e-9, plan->describe().c_str(), dn.impl.c_str());
    t_plan += bp * k.per_step, t_conv += bc * k.per_step, t_dnnl += bd * k.per_step;
    t_sgemm += bs * k.per_step;
    step_flops += f * k.per_step;
  }
  std::printf("one step's matmuls (%.0f GFLOP): plan %.3f s (%.0f GFLOP/s), convert+sgemm %.3f s "
              "(%.0f), onednn %.3f s (%.0f), sgemm %.3f s (%.0f); plan/onednn time %.2f, "
              "plan/sgemm time %.2f\n",
              step_flops * 1e-9, t_plan, step_flops / t_plan * 1e-9, t_conv,
              step_flops / t_conv * 1e-9, t_dnnl, t_dnnl > 0 ? step_flops / t_dnnl * 1e-9 : 0.0,
              t_sgemm, step_flops / t_sgemm * 1e-9, t_dnnl > 0 ? t_plan / t_dnnl : 0.0,
              t_plan / t_sgemm);
  best_peak = std::max(best_peak, print_peaks());  // again after the shapes: the better of two
  // The register-only loop runs on one thread: with more threads, the plan's rate per thread.
  const double per_thread = step_flops / t_plan * 1e-9 / threads;
  std::printf("vdpbf16ps peak (best of both) %.0f GFLOP/s; plan per thread "
              "%.0f = %.0f%% of it; onednn %.0f%%\n", best_peak, per_thread,
              100 * per_thread / best_peak, 100 * step_flops / t_dnnl * 1e-9 / threads / best_peak);
  return 0;
}
