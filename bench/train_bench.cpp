// bench/train_bench.cpp: training throughput of a preset (tokens/s, TFLOP/s per device, MFU
// against the sgemm peak and the bf16 matmul peak measured in the same process, and against
// the theoretical f32 FMA peak of the cores in use), as one JSON line plus a summary.
//
// The theoretical peak (FMA units x f32 lanes x 2 x measured clock x pool threads, for the
// vector width of the OpenBLAS core in use; engine/tensor/cpu_info.h) does not depend on the
// kernels: a misdetected BLAS core (Prescott on an AVX-512 CPU) or a throttled clock shows as
// a low sgemm peak over it and a low MFU over it, where MFU over the measured peak looks fine.
//
//   train_bench --model llama-tiny --steps 10 --warmup 3      (synthetic data, one device)
//   train_bench --model llama-small --dtype bfloat16          (MaxText's mixed precision)
//   train_bench --peak-only                                   (just the two matmul peaks)
//   train_bench --dtype bfloat16 --profile 20   (then one more step timed per instruction:
//                                                the 20 costliest op kinds and instructions)
//
// Model FLOPs for MFU use the PyTorch reference's formula, so the numbers compare with
// the PyTorch reference like for like: flops/token = 6 * N_matmul + 12 * L * T * d_model
// (N_matmul counts every projection and the logits matrix; full T x T attention). MaxText's
// per-device TFLOPs (causal attention counted half) is reported too. The default remat policy
// here is `none` (every activation kept, as the PyTorch reference does); MaxText's default
// `full` recomputes each layer in the backward pass (--remat full).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/base/clock.h"
#include "engine/base/thread_pool.h"
#include "engine/compile/executable.h"
#include "engine/runtime/runtime.h"
#include "engine/tensor/blas.h"
#include "engine/tensor/cpu_info.h"
#include "engine/tensor/system_info.h"
#include "engine/tensor/kernels.h"
#include "engine/tensor/onednn_matmul.h"
#include "engine/train/trainer.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median GFLOP/s of kern::matmul (our pool split over single-threaded OpenBLAS) at the
// matmul shapes of a llama LM step; the peak is the best of those medians.
struct PeakShape {
  int64_t M, N, K;
  bool ta, tb;
  const char* name;
};
const PeakShape kPeakShapes[] = {
    {4096, 2048, 512, false, false, "BT=4096 x 512 -> 2048 NN"},
    {4096, 512, 2048, false, false, "BT=4096 x 2048 -> 512 NN"},
    {4096, 8192, 512, false, false, "BT=4096 x 512 -> 8192 NN"},
    {512, 2048, 4096, true, false, "dW 512x2048 over K=4096 TN"},
};

double measure_sgemm_peak(bool verbose) {
  using S = PeakShape;
  double best = 0;
  for (const S& s : kPeakShapes) {
    std::vector<float> A(s.M * s.K), B(s.K * s.N), C(s.M * s.N);
    for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.f - 0.5f;
    for (size_t i = 0; i < B.size(); ++i) B[i] = static_cast<float>((i * 40503u) % 1000) / 1000.f - 0.5f;
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    std::vector<double> g;
    for (int it = 0; it < 9; ++it) {
      double t0 = eng::now_seconds();
      eng::kern::matmul(s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda, B.data(), ldb, 0.f, C.data(), s.N);
      double t = eng::now_seconds() - t0;
      if (it >= 2) g.push_back(2.0 * s.M * s.N * s.K / t * 1e-9);
    }
    double med = median(g);
    if (verbose) fmt::print("sgemm {:<28} median {:6.1f} GFLOP/s\n", s.name, med);
    best = std::max(best, med);
  }
  return best;
}

// The same for bf16 matmul plans (Bf16MatmulPlan, onednn_matmul.h) at the same shapes: activations out
// in bf16 (MaxText's dtype), the weight gradient in f32 (grad_dtype). 0 if none can be planned.
double measure_bf16_peak(bool verbose) {
  double best = 0;
  for (const PeakShape& s : kPeakShapes) {
    const eng::DType out = s.ta ? eng::DType::kF32 : eng::DType::kBF16;
    eng::kern::Bf16MatmulShape shape{s.ta, s.tb, s.M, s.N, s.K, s.ta ? s.M : s.K, s.tb ? s.K : s.N, s.N, out};
    auto plan = eng::kern::Bf16MatmulPlan::create(shape);
    if (!plan.ok()) {
      fmt::print("bf16 {:<28} cannot plan: {}\n", s.name, plan.status().message());
      continue;
    }
    std::vector<uint16_t> A(s.M * s.K), B(s.K * s.N);
    std::vector<float> C(s.M * s.N);
    for (size_t i = 0; i < A.size(); ++i) A[i] = eng::f32_to_bf16(static_cast<float>((i * 2654435761u) % 1000) / 1000.f - 0.5f);
    for (size_t i = 0; i < B.size(); ++i) B[i] = eng::f32_to_bf16(static_cast<float>((i * 40503u) % 1000) / 1000.f - 0.5f);
    eng::default_pool().run_on_every_thread([&] { eng::kern::reserve_bf16_matmul_scratch((*plan)->scratch_bytes()); });
    std::vector<double> g;
    for (int it = 0; it < 9; ++it) {
      double t0 = eng::now_seconds();
      (*plan)->run(A.data(), B.data(), C.data());
      double t = eng::now_seconds() - t0;
      if (it >= 2) g.push_back(2.0 * s.M * s.N * s.K / t * 1e-9);
    }
    double med = median(g);
    if (verbose) fmt::print("bf16  {:<28} median {:6.1f} GFLOP/s ({})\n", s.name, med, (*plan)->describe());
    best = std::max(best, med);
  }
  return best;
}

// The theoretical bf16 matmul peak of one core for the backend the trainer's plans use
// (SHARDLAB_BF16_MATMUL, else kAuto): Intel's AMX
// figure (1024 bf16 FLOP per cycle per core: one 16 x 16 x 32 tdpbf16ps every 16 cycles); one
// 512-bit vdpbf16ps per cycle (32 products, 64 FLOP; Zen 4 reaches it, the Xeons with AMX run it
// at half that, bench/bf16_gemm_bench); the f32 FMA rate where bf16 is widened to f32 (packed,
// convert+sgemm).
int bf16_flops_per_cycle(int f32_flops_per_cycle) {
  auto plan = eng::kern::Bf16MatmulPlan::create({false, false, 64, 64, 64, 64, 64, 64},
                                                eng::kern::bf16_matmul_backend_from_env());
  if (!plan.ok()) return f32_flops_per_cycle;
  switch ((*plan)->backend()) {
    case eng::kern::MatmulBackend::kAmx: return 1024;
    case eng::kern::MatmulBackend::kNative: return 64;
    default: return f32_flops_per_cycle;
  }
}

// --profile N: one more step with Runtime::set_timing on, then the time per op kind (and dtype
// of its first output), the N largest first, and the N slowest instructions with their shapes.
void print_profile(eng::Trainer& t, int n) {
  std::shared_ptr<const eng::Executable> exe = t.current_executable();
  eng::Runtime* rt = t.runtime();
  if (!exe || !rt || !rt->set_timing(*exe, true).ok() || !t.step_and_wait().ok()) {
    fmt::print("profile: could not time a step\n");
    return;
  }
  std::span<const double> sec = rt->instr_seconds(*exe);
  const eng::Program& p = exe->program();
  const auto& ins = p.instrs();
  auto label = [&](const eng::Instr& in) {
    std::string l(eng::op_name(in.kind));
    if (!in.outputs.empty()) l += fmt::format(" {}", eng::dtype_name(p.value(in.outputs[0]).dtype));
    return l;
  };
  std::map<std::string, std::pair<double, int>> by_kind;
  double total = 0;
  for (size_t i = 0; i < ins.size() && i < sec.size(); ++i) {
    auto& e = by_kind[label(ins[i])];
    e.first += sec[i];
    e.second += 1;
    total += sec[i];
  }
  std::vector<std::pair<double, std::string>> kinds;
  for (auto& [k, v] : by_kind) kinds.push_back({v.first, fmt::format("{} (x{})", k, v.second)});
  std::sort(kinds.rbegin(), kinds.rend());
  fmt::print("profile: {:.1f} ms in {} instructions\n", total * 1e3, ins.size());
  for (int i = 0; i < n && i < static_cast<int>(kinds.size()); ++i)
    fmt::print("  {:8.2f} ms {:5.1f}%  {}\n", kinds[i].first * 1e3, 100 * kinds[i].first / total, kinds[i].second);
  std::vector<std::pair<double, size_t>> slow;
  for (size_t i = 0; i < ins.size() && i < sec.size(); ++i) slow.push_back({sec[i], i});
  std::sort(slow.rbegin(), slow.rend());
  fmt::print("slowest instructions:\n");
  for (int i = 0; i < n && i < static_cast<int>(slow.size()); ++i) {
    const eng::Instr& in = ins[slow[i].second];
    std::string shapes;
    for (eng::ValueId v : in.inputs)
      shapes += fmt::format(" {}{}", eng::dtype_name(p.value(v).dtype), p.value(v).shape.to_string());
    fmt::print("  {:8.2f} ms  {} <-{}\n", slow[i].first * 1e3, label(in), shapes);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "llama-tiny";
  int steps = 10, warmup = 3;
  bool peak_only = false;
  int profile = 0;  // --profile N: after the timed steps, time every instruction of one step
  std::string remat = "none";  // like the PyTorch reference: keep every activation
  std::string dtype = "float32";
  double peak = 0, bf16_peak = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        fmt::print(stderr, "train_bench: {} needs a value\n", a);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model = next();
    else if (a == "--steps") steps = std::atoi(next());
    else if (a == "--warmup") warmup = std::atoi(next());
    else if (a == "--peak-only") peak_only = true;
    else if (a == "--remat") remat = next();
    else if (a == "--peak-gflops") peak = std::atof(next());
    else if (a == "--bf16-peak-gflops") bf16_peak = std::atof(next());
    else if (a == "--dtype") dtype = next();
    else if (a == "--profile") profile = std::atoi(next());
    else {
      fmt::print(stderr, "usage: train_bench [--model NAME] [--steps N] [--warmup N] [--remat POLICY] [--dtype float32|bfloat16] [--peak-only] [--profile N] [--peak-gflops G] [--bf16-peak-gflops G]\n");
      return 2;
    }
  }
  if (eng::Status st = eng::check_blas_environment(); !st.ok()) {
    fmt::print(stderr, "train_bench: {}\n", st.message());
    return 2;
  }
  const eng::BlasInfo& blas = eng::blas_info();
  fmt::print("BLAS: {} ({}; {} BLAS thread, {}); pool threads: {}\n", blas.core, blas.config,
             blas.num_threads, blas.env_note, eng::default_pool().num_threads());
  fmt::print("{}", eng::system_info_text());
  // The independent yardstick: what the cores in use can do at all with this core's vectors.
  const eng::OpenblasCore* core = eng::find_openblas_core(blas.core);
  const int flops_per_cycle = eng::fp32_flops_per_cycle(eng::cpu_info(), core ? core->strength : 1);
  const double ghz = eng::measure_clock_ghz(0.1);
  const int threads = eng::default_pool().num_threads();
  const double theory = threads * flops_per_cycle * ghz;
  fmt::print("theoretical f32 peak: {} threads x {} FLOP/cycle ({} kernels) x {:.2f} GHz (measured) "
             "= {:.1f} GFLOP/s\n", threads, flops_per_cycle, blas.core, ghz, theory);
  if (peak <= 0) peak = measure_sgemm_peak(true);
  fmt::print("sgemm peak (best median): {:.1f} GFLOP/s = {:.0f}% of the theoretical peak\n", peak,
             100 * peak / theory);
  if (bf16_peak <= 0) bf16_peak = measure_bf16_peak(true);
  const int bf16_per_cycle = bf16_flops_per_cycle(flops_per_cycle);
  const double bf16_theory = threads * bf16_per_cycle * ghz;
  fmt::print("bf16 matmul peak (best median; avx512_bf16: {}): {:.1f} GFLOP/s = {:.0f}% of its theoretical "
             "peak ({} threads x {} FLOP/cycle x {:.2f} GHz = {:.1f} GFLOP/s)\n",
             eng::kern::cpu_has_avx512_bf16() ? "yes" : "no", bf16_peak, 100 * bf16_peak / bf16_theory,
             threads, bf16_per_cycle, ghz, bf16_theory);
  if (peak_only) {
    fmt::print("{{\"sgemm_peak_gflops\": {:.1f}, \"bf16_peak_gflops\": {:.1f}, "
               "\"theoretical_peak_gflops\": {:.1f}, \"theoretical_bf16_peak_gflops\": {:.1f}, "
               "\"clock_ghz\": {:.2f}, \"blas_core\": \"{}\", "
               "\"blas_best\": \"{}\", \"cpu\": \"{}\"}}\n",
               peak, bf16_peak, theory, bf16_theory, ghz, blas.core, eng::best_openblas_core(eng::cpu_info()),
               eng::cpu_info().model_name);
    return 0;
  }

  eng::Config c;
  eng::Status s = c.set("model_name", model);
  if (s.ok()) s = c.set("steps", static_cast<int64_t>(steps + warmup));
  if (s.ok()) s = c.set("learning_rate", 3e-4);
  if (s.ok()) s = c.set("remat_policy", remat);
  if (s.ok()) s = c.set("dtype", dtype);
  if (!s.ok()) {
    fmt::print(stderr, "train_bench: {}\n", s.message());
    return 1;
  }
  auto trainer = eng::Trainer::create(c, eng::Mesh());
  if (!trainer.ok()) {
    fmt::print(stderr, "train_bench: {}\n", trainer.status().message());
    return 1;
  }
  auto& t = *trainer;
  auto exe = t->compile();
  if (!exe.ok()) {
    fmt::print(stderr, "train_bench: {}\n", exe.status().message());
    return 1;
  }
  const eng::ResolvedConfig& r = t->config();
  const eng::ModelConfig& m = r.model;
  const double T = static_cast<double>(r.max_target_length), d = static_cast<double>(m.emb_dim);
  const double n_matmul = static_cast<double>(
      m.vocab_size * m.emb_dim + m.num_decoder_layers * (4 * m.emb_dim * m.num_query_heads * m.head_dim +
                                                         3 * m.emb_dim * m.mlp_dim));
  const double flops_per_token = 6 * n_matmul + 12 * m.num_decoder_layers * T * d;
  const double tokens = static_cast<double>(r.global_batch_size) * T;
  std::vector<double> times;
  for (int i = 0; i < warmup + steps; ++i) {
    auto sm = t->step_and_wait();
    if (!sm.ok()) {
      fmt::print(stderr, "train_bench: {}\n", sm.status().message());
      return 1;
    }
    fmt::print("{} {}: loss {:.4f} {:.1f} ms {:.0f} tok/s\n", i < warmup ? "warmup" : "step", i,
               sm->loss, sm->step_time_s * 1e3, tokens / sm->step_time_s);
    if (i >= warmup) times.push_back(sm->step_time_s);
  }
  if (profile > 0) print_profile(*t, profile);
  const double med = median(times);
  const double tps = tokens / med;
  const double gflops = flops_per_token * tps / 1e9;
  const double maxtext_tflops_s = t->tflops().total / med;
  // mfu_theoretical: over the theoretical peak of the run's matmul dtype (the f32 FMA peak for
  // float32 runs, the bf16 matmul path's for bfloat16 runs); the JSON has both peaks.
  const double run_theory = dtype == "bfloat16" ? bf16_theory : theory;
  fmt::print(
      "RESULT model={} dtype={} remat={} median_step_ms={:.1f} tokens_per_s={:.0f} model_GFLOPs={:.1f} "
      "mfu={:.1f}% mfu_theoretical={:.1f}% mfu_bf16_peak={:.1f}% maxtext_TFLOP/s/device={:.3f} "
      "(min_ms={:.1f} max_ms={:.1f} n={})\n",
      model, dtype, remat, med * 1e3, tps, gflops, 100 * gflops / peak, 100 * gflops / run_theory,
      bf16_peak > 0 ? 100 * gflops / bf16_peak : 0.0, maxtext_tflops_s,
      *std::min_element(times.begin(), times.end()) * 1e3,
      *std::max_element(times.begin(), times.end()) * 1e3, times.size());
  fmt::print(
      "{{\"model\": \"{}\", \"dtype\": \"{}\", \"median_step_ms\": {:.2f}, \"tokens_per_s\": {:.1f}, "
      "\"model_gflops\": {:.2f}, \"sgemm_peak_gflops\": {:.1f}, \"bf16_peak_gflops\": {:.1f}, "
      "\"theoretical_peak_gflops\": {:.1f}, \"theoretical_bf16_peak_gflops\": {:.1f}, \"blas_core\": \"{}\", "
      "\"mfu\": {:.4f}, \"mfu_theoretical\": {:.4f}, \"mfu_bf16_peak\": {:.4f}, \"flops_per_token\": {:.0f}, "
      "\"maxtext_tflops_per_s_per_device\": {:.4f}}}\n",
      model, dtype, med * 1e3, tps, gflops, peak, bf16_peak, theory, bf16_theory, blas.core, gflops / peak,
      gflops / run_theory,
      bf16_peak > 0 ? gflops / bf16_peak : 0.0, flops_per_token, maxtext_tflops_s);
  return 0;
}
