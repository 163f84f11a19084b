// bench/kernels_bench.cpp: kernel throughput at LM shapes: sgemm split over the pool vs one
// call, flash attention forward/backward, fused cross-entropy, a few elementwise kernels; and
// the bf16 twins: oneDNN bf16 matmul plans (onednn_matmul.h) beside sgemm at the same shapes,
// and each fused bf16 kernel (kernels.h, bf16 section) beside its f32 kernel.
//
//   kernels_bench --benchmark_filter='Bf16Matmul|Sgemm/pool' (bf16 vs fp32 matmul peak)
//   kernels_bench --benchmark_filter=RaggedDot (grouped vs dense matmul, issue 25)
//
//   kernels_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Times are wall-clock per iteration (manual timing); GFLOP/s counters use them. Attention
// GFLOP/s count the causal half only (fwd 2 matmuls, bwd 5, each B*H*T*T*D/2 MACs), so they are
// comparable with sgemm peak; torch_llama.py's model FLOPs count the full T x T square.
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "engine/base/thread_pool.h"
#include "engine/tensor/blas.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/onednn_matmul.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Runs fn once per iteration, timing each with a steady clock.
template <typename Fn>
void timed_loop(benchmark::State& state, double flops, Fn&& fn) {
  fn();  // warm-up: scratch, page faults, OpenBLAS buffers
  for (auto _ : state) {
    auto t0 = Clock::now();
    fn();
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  if (flops > 0)
    state.counters["GFLOP/s"] =
        benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- sgemm: C(M,N) = A(M,K) B(K,N), the layouts a linear layer's forward uses ---------------

void BM_Sgemm(benchmark::State& state, bool split, bool trans_b) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  auto A = random_floats(M * K, 1), B = random_floats(K * N, 2);
  std::vector<float> C(M * N);
  const int64_t ldb = trans_b ? K : N;
  timed_loop(state, 2.0 * M * N * K, [&] {
    if (split)
      eng::kern::matmul(false, trans_b, M, N, K, 1.f, A.data(), K, B.data(), ldb, 0.f, C.data(), N);
    else
      eng::blas::sgemm(false, trans_b, M, N, K, 1.f, A.data(), K, B.data(), ldb, 0.f, C.data(), N);
  });
}

void sgemm_shapes(benchmark::internal::Benchmark* b) {
  b->Args({2048, 704, 256})->Args({4096, 1408, 512})->Args({4096, 8192, 512})->Args({512, 1408, 4096});
  b->ArgNames({"M", "N", "K"})->UseManualTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK_CAPTURE(BM_Sgemm, pool_split_nn, true, false)->Apply(sgemm_shapes);
BENCHMARK_CAPTURE(BM_Sgemm, pool_split_nt, true, true)->Apply(sgemm_shapes);
BENCHMARK_CAPTURE(BM_Sgemm, single_call_1thread_nn, false, false)->Apply(sgemm_shapes);

// ---- bf16 matmul (oneDNN plans): the same shapes and layouts, bf16 A and B, f32 or bf16 C -----

std::vector<uint16_t> random_bf16(int64_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  auto f = random_floats(n, seed, lo, hi);
  std::vector<uint16_t> b(n);
  eng::kern::convert_f32_to_bf16(f.data(), b.data(), n);
  return b;
}

void BM_Bf16Matmul(benchmark::State& state, bool trans_b, eng::DType c_dtype,
                   eng::kern::MatmulBackend backend) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  eng::kern::Bf16MatmulShape s{false, trans_b, M, N, K, K, trans_b ? K : N, N, c_dtype};
  auto plan = eng::kern::Bf16MatmulPlan::create(s, backend);
  if (!plan.ok()) return state.SkipWithError(plan.status().message().c_str());
  auto A = random_bf16(M * K, 1), B = random_bf16(K * N, 2);
  std::vector<float> C(M * N);  // large enough for either output dtype
  eng::default_pool().run_on_every_thread(
      [&] { eng::kern::reserve_bf16_matmul_scratch((*plan)->scratch_bytes()); });
  timed_loop(state, 2.0 * M * N * K, [&] { (*plan)->run(A.data(), B.data(), C.data()); });
  state.SetLabel((*plan)->describe());
}
using eng::kern::MatmulBackend;
BENCHMARK_CAPTURE(BM_Bf16Matmul, nn_f32out, false, eng::DType::kF32, MatmulBackend::kAuto)->Apply(sgemm_shapes);
BENCHMARK_CAPTURE(BM_Bf16Matmul, nt_f32out, true, eng::DType::kF32, MatmulBackend::kAuto)->Apply(sgemm_shapes);
BENCHMARK_CAPTURE(BM_Bf16Matmul, nn_bf16out, false, eng::DType::kBF16, MatmulBackend::kAuto)->Apply(sgemm_shapes);
BENCHMARK_CAPTURE(BM_Bf16Matmul, onednn_nn_f32out, false, eng::DType::kF32, MatmulBackend::kOnednn)->Apply(sgemm_shapes);
BENCHMARK_CAPTURE(BM_Bf16Matmul, onednn_nt_f32out, true, eng::DType::kF32, MatmulBackend::kOnednn)->Apply(sgemm_shapes);

// ---- grouped matmul (ragged_dot, the dropless MoE's expert GEMMs) beside one dense matmul ----
// The same N rows x K times (K, P): ragged_dot cuts the rows into E equal groups and multiplies
// each by its own expert (one sgemm per group); dense is one matmul of all rows by one weight.
// Issue 25 asks ragged >= 70% of dense GFLOP/s. mixtral-tiny's experts (8 x 128 tokens, top-2:
// 2048 rows; emb 256, mlp 704) with its 4 experts, then more and smaller groups.

void BM_RaggedDot(benchmark::State& state, bool dense) {
  const int64_t N = state.range(0), K = state.range(1), P = state.range(2), E = state.range(3);
  auto A = random_floats(N * K, 1), W = random_floats((dense ? 1 : E) * K * P, 2);
  std::vector<float> C(N * P);
  std::vector<int32_t> groups(E, static_cast<int32_t>(N / E));
  timed_loop(state, 2.0 * N * K * P, [&] {
    if (dense)
      eng::kern::matmul(false, false, N, P, K, 1.f, A.data(), K, W.data(), P, 0.f, C.data(), P);
    else
      eng::kern::ragged_dot(A.data(), W.data(), groups.data(), 1, N, K, P, E, false, C.data());
  });
}

void ragged_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t e : {4, 16, 64}) b->Args({2048, 256, 704, e})->Args({2048, 704, 256, e});
  b->Args({8192, 512, 1408, 8})->Args({8192, 512, 1408, 128});
  b->ArgNames({"N", "K", "P", "E"})->UseManualTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK_CAPTURE(BM_RaggedDot, ragged, false)->Apply(ragged_shapes);
BENCHMARK_CAPTURE(BM_RaggedDot, dense, true)->Apply(ragged_shapes);

// ---- attention ------------------------------------------------------------------------------

struct AttnBuffers {
  int64_t B, T, H, D;
  std::vector<float> q, k, v, o, lse, dout, dq, dk, dv;
  AttnBuffers(int64_t b, int64_t t, int64_t h, int64_t d) : B(b), T(t), H(h), D(d) {
    const int64_t n = B * T * H * D;
    q = random_floats(n, 1), k = random_floats(n, 2), v = random_floats(n, 3);
    dout = random_floats(n, 4);
    o.resize(n), dq.resize(n), dk.resize(n), dv.resize(n), lse.resize(B * H * T);
  }
  void forward() {
    eng::kern::attention_forward(q.data(), k.data(), v.data(), o.data(), lse.data(), B, T, H, D,
                                 1.f / std::sqrt(float(D)));
  }
  void backward() {
    eng::kern::attention_backward(q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(),
                                  dq.data(), dk.data(), dv.data(), B, T, H, D,
                                  1.f / std::sqrt(float(D)));
  }
  double causal_matmul_flops() const { return 2.0 * B * H * T * T * D / 2; }  // one T x T x D
};

// mode: 0 forward, 1 backward, 2 both.
void BM_Attention(benchmark::State& state, int mode) {
  AttnBuffers a(state.range(0), state.range(1), state.range(2), state.range(3));
  a.forward();
  const double mm = a.causal_matmul_flops();
  const double flops = mode == 0 ? 2 * mm : mode == 1 ? 5 * mm : 7 * mm;
  timed_loop(state, flops, [&] {
    if (mode != 1) a.forward();
    if (mode != 0) a.backward();
  });
}

void attention_shapes(benchmark::internal::Benchmark* b) {
  b->Args({8, 256, 4, 64})->Args({8, 512, 8, 64});
  b->ArgNames({"B", "T", "H", "D"})->UseManualTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK_CAPTURE(BM_Attention, fwd, 0)->Apply(attention_shapes);
BENCHMARK_CAPTURE(BM_Attention, bwd, 1)->Apply(attention_shapes);
BENCHMARK_CAPTURE(BM_Attention, fwd_bwd, 2)->Apply(attention_shapes);

// bf16 attention (exact softmax per 64-query block, MaxText's bf16 roundings; packed segments
// cost the same work): GFLOP/s counted as for the f32 kernel above.
struct AttnBuffersBf16 {
  int64_t B, T, H, D;
  std::vector<uint16_t> q, k, v, o, dout, dq, dk, dv;
  std::vector<float> lse;
  AttnBuffersBf16(int64_t b, int64_t t, int64_t h, int64_t d) : B(b), T(t), H(h), D(d) {
    const int64_t n = B * T * H * D;
    q = random_bf16(n, 1), k = random_bf16(n, 2), v = random_bf16(n, 3), dout = random_bf16(n, 4);
    o.resize(n), dq.resize(n), dk.resize(n), dv.resize(n), lse.resize(B * H * T);
  }
  void forward() {
    eng::kern::attention_forward_bf16(q.data(), k.data(), v.data(), nullptr, o.data(), lse.data(),
                                      B, T, H, D, 1.f / std::sqrt(float(D)));
  }
  void backward() {
    eng::kern::attention_backward_bf16(q.data(), k.data(), v.data(), o.data(), lse.data(), nullptr,
                                       dout.data(), dq.data(), dk.data(), dv.data(), B, T, H, D,
                                       1.f / std::sqrt(float(D)));
  }
};

void BM_AttentionBf16(benchmark::State& state, int mode) {
  AttnBuffersBf16 a(state.range(0), state.range(1), state.range(2), state.range(3));
  a.forward();
  const double mm = 2.0 * a.B * a.H * a.T * a.T * a.D / 2;
  const double flops = mode == 0 ? 2 * mm : mode == 1 ? 5 * mm : 7 * mm;
  timed_loop(state, flops, [&] {
    if (mode != 1) a.forward();
    if (mode != 0) a.backward();
  });
}
BENCHMARK_CAPTURE(BM_AttentionBf16, fwd, 0)->Apply(attention_shapes);
BENCHMARK_CAPTURE(BM_AttentionBf16, bwd, 1)->Apply(attention_shapes);
BENCHMARK_CAPTURE(BM_AttentionBf16, fwd_bwd, 2)->Apply(attention_shapes);

// ---- cross-entropy and elementwise ------------------------------------------------------------

void BM_CrossEntropy(benchmark::State& state) {
  const int64_t N = state.range(0), V = state.range(1);
  auto logits = random_floats(N * V, 5, -5.f, 5.f);
  std::vector<int32_t> targets(N);
  for (int64_t n = 0; n < N; ++n) targets[n] = static_cast<int32_t>((n * 7919) % V);
  std::vector<float> xent(N), lse(N), dxent(N, 1.f / N), dlogits(N * V);
  timed_loop(state, 0, [&] {
    eng::kern::softmax_cross_entropy_forward(logits.data(), targets.data(), xent.data(), lse.data(), N, V);
    eng::kern::softmax_cross_entropy_backward(logits.data(), targets.data(), lse.data(),
                                              dxent.data(), dlogits.data(), N, V);
  });
  state.counters["GB/s"] = benchmark::Counter(3.0 * N * V * 4 * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_CrossEntropy)->Args({4096, 8192})->ArgNames({"N", "V"})->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_Swiglu(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto g = random_floats(n, 6), u = random_floats(n, 7), dy = random_floats(n, 8);
  std::vector<float> y(n), dg(n), du(n);
  timed_loop(state, 0, [&] {
    eng::kern::swiglu_forward(g.data(), u.data(), y.data(), n);
    eng::kern::swiglu_backward(g.data(), u.data(), dy.data(), dg.data(), du.data(), n);
  });
}
BENCHMARK(BM_Swiglu)->Arg(4096 * 1408)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_RmsNorm(benchmark::State& state) {
  const int64_t N = state.range(0), E = state.range(1);
  auto x = random_floats(N * E, 9), s = random_floats(E, 10), dy = random_floats(N * E, 11);
  std::vector<float> y(N * E), r(N), dx(N * E), ds(E);
  timed_loop(state, 0, [&] {
    eng::kern::rmsnorm_forward(x.data(), s.data(), y.data(), r.data(), N, E, 1e-5f);
    eng::kern::rmsnorm_backward(x.data(), s.data(), r.data(), dy.data(), dx.data(), ds.data(), N, E);
  });
}
BENCHMARK(BM_RmsNorm)->Args({4096, 512})->ArgNames({"N", "E"})->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_Rope(benchmark::State& state) {
  const int64_t B = 8, T = 512, H = 8, D = 64;
  auto x = random_floats(B * T * H * D, 12);
  std::vector<float> y(x.size());
  std::vector<int32_t> pos(B * T);
  for (int64_t i = 0; i < B * T; ++i) pos[i] = static_cast<int32_t>(i % T);
  timed_loop(state, 0, [&] {
    eng::kern::rope(x.data(), pos.data(), y.data(), B, T, H, D, 1.f, 10000.f, false);
  });
}
BENCHMARK(BM_Rope)->UseManualTime()->Unit(benchmark::kMillisecond);

// The bf16 twins of the three kernels above, same sizes.
void BM_SwigluBf16(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto g = random_bf16(n, 6), u = random_bf16(n, 7), dy = random_bf16(n, 8);
  std::vector<uint16_t> y(n), dg(n), du(n);
  timed_loop(state, 0, [&] {
    eng::kern::swiglu_forward_bf16(g.data(), u.data(), y.data(), n);
    eng::kern::swiglu_backward_bf16(g.data(), u.data(), dy.data(), dg.data(), du.data(), n);
  });
}
BENCHMARK(BM_SwigluBf16)->Arg(4096 * 1408)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_RmsNormBf16(benchmark::State& state) {
  const int64_t N = state.range(0), E = state.range(1);
  auto x = random_bf16(N * E, 9), dy = random_bf16(N * E, 11);
  auto s = random_floats(E, 10);
  std::vector<uint16_t> y(N * E), dx(N * E);
  std::vector<float> r(N), ds(E);
  timed_loop(state, 0, [&] {
    eng::kern::rmsnorm_forward_bf16(x.data(), s.data(), y.data(), r.data(), N, E, 1e-5f);
    eng::kern::rmsnorm_backward_bf16(x.data(), s.data(), r.data(), dy.data(), dx.data(), ds.data(), N, E);
  });
}
BENCHMARK(BM_RmsNormBf16)->Args({4096, 512})->ArgNames({"N", "E"})->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_RopeBf16(benchmark::State& state) {
  const int64_t B = 8, T = 512, H = 8, D = 64;
  auto x = random_bf16(B * T * H * D, 12);
  std::vector<uint16_t> y(x.size());
  std::vector<int32_t> pos(B * T);
  for (int64_t i = 0; i < B * T; ++i) pos[i] = static_cast<int32_t>(i % T);
  timed_loop(state, 0, [&] {
    eng::kern::rope_bf16(x.data(), pos.data(), y.data(), B, T, H, D, 1.f, 10000.f, false);
  });
}
BENCHMARK(BM_RopeBf16)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_AdamW(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto p = random_floats(n, 13), g = random_floats(n, 14);
  std::vector<float> mu(n), nu(n);
  int64_t count = 0;
  timed_loop(state, 0, [&] {
    eng::kern::adamw_update(p.data(), g.data(), mu.data(), nu.data(), n, 1e-4f, 1.f, 0.9f, 0.95f,
                            1e-8f, 0.1f, ++count);
  });
}
BENCHMARK(BM_AdamW)->Arg(1 << 24)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  const eng::BlasInfo& info = eng::blas_info();
  benchmark::AddCustomContext("openblas_core", info.core);
  benchmark::AddCustomContext("openblas_threads", fmt::format("{}", info.num_threads));
  benchmark::AddCustomContext("openblas_env", info.env_note);
  benchmark::AddCustomContext("pool_threads", fmt::format("{}", eng::default_pool().num_threads()));
  benchmark::AddCustomContext("avx512_bf16", eng::kern::cpu_has_avx512_bf16() ? "yes" : "no");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
