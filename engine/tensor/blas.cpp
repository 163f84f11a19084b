// engine/tensor/blas.cpp: the only includer of cblas.h; dlopens OpenBLAS after choosing its core.
#include "engine/tensor/blas.h"

#include <cblas.h>  // enums and prototypes only: symbols are resolved with dlsym
#include <dlfcn.h>

#include <algorithm>
#include <strings.h>
#include <cstdlib>

#include <fmt/format.h>

#include "engine/base/check.h"
#include "engine/tensor/cpu_info.h"
#include "engine/tensor/simd.h"

namespace eng {
namespace {

constexpr const char* kLibName = "libopenblas.so.0";

struct Api {
  decltype(&cblas_sgemm) sgemm = nullptr;
  BlasInfo info;
  bool small_nn_mallocs = false;  // the loaded core's small-matrix NN sgemm mallocs (below)
};

template <typename Fn>
Fn resolve(void* lib, const char* name) {
  void* sym = dlsym(lib, name);
  ENG_CHECK(sym != nullptr, "blas: {} has no symbol {}: {}", kLibName, name, dlerror());
  return reinterpret_cast<Fn>(sym);
}

// OpenBLAS reads these when it loads. The originals are restored once it has loaded, so child
// processes (e.g. the PyTorch reference run side by side) see the user's environment.
constexpr const char* kEnvVars[] = {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS"};

struct SavedEnv {
  std::string value[3];
  bool set[3] = {};
};

SavedEnv save_environment() {
  SavedEnv saved;
  for (int i = 0; i < 3; ++i)
    if (const char* v = std::getenv(kEnvVars[i])) saved.set[i] = true, saved.value[i] = v;
  return saved;
}

void restore_environment(const SavedEnv& saved) {
  for (int i = 0; i < 3; ++i) {
    if (saved.set[i])
      setenv(kEnvVars[i], saved.value[i].c_str(), 1);
    else
      unsetenv(kEnvVars[i]);
  }
}

// Sets OPENBLAS_CORETYPE to the chosen core (cpu_info.h: from CPUID, or the user's when at
// least as strong, or SHARDLAB_OPENBLAS_CORETYPE), drops OPENBLAS_L2_SIZE (a preset cache size
// for another CPU); returns a note for logs.
std::string fix_environment(const SavedEnv& saved, BlasInfo& info) {
  std::string note;
  if (saved.set[1]) {  // OPENBLAS_L2_SIZE
    note += fmt::format("unset {}={}; ", kEnvVars[1], saved.value[1]);
    unsetenv(kEnvVars[1]);
  }
  Result<CoreChoice> choice = choose_openblas_core(
      cpu_info(), saved.set[0] ? saved.value[0].c_str() : nullptr,
      std::getenv("SHARDLAB_OPENBLAS_CORETYPE"));
  ENG_CHECK(choice.ok(), "blas: {} (check_blas_environment() reports this as an error)",
            choice.status().message());
  info.chosen_core = choice->core;
  setenv("OPENBLAS_CORETYPE", choice->core.c_str(), 1);
  note += choice->note + "; ";
  if (choice->replaced_env) info.warnings.push_back(choice->note);
  // Start no OpenBLAS worker threads at all: the engine's pool does the splitting.
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  return note;
}

// After loading: the core OpenBLAS reports against the CPU's best (it can differ when the
// library was loaded before us, or when OpenBLAS itself falls back).
void check_loaded_core(BlasInfo& info) {
  const CpuInfo& cpu = cpu_info();
  const std::string_view best = best_openblas_core(cpu);
  const OpenblasCore* loaded = find_openblas_core(info.core);
  const int best_strength = find_openblas_core(best)->strength;
  info.weaker_than_cpu = loaded == nullptr || loaded->strength < best_strength;
  if (info.weaker_than_cpu)
    info.warnings.push_back(fmt::format(
        "OpenBLAS runs its {} kernels, weaker than this CPU ({}) allows: {}{}", info.core,
        cpu.model_name, best,
        info.preloaded ? " (the library was loaded before shardlab could choose its core)"
        : info.env_note.find("from SHARDLAB_OPENBLAS_CORETYPE") != std::string::npos
            ? " (as SHARDLAB_OPENBLAS_CORETYPE asks)"
            : ""));
  if (!cpu.avx2 || !cpu.fma)
    info.warnings.push_back(fmt::format(
        "this CPU ({}) has no AVX2+FMA: matmuls run OpenBLAS's {} kernels and the engine's scalar "
        "kernels, several times slower than on an AVX2 CPU",
        cpu.model_name, info.core));
}

Api load() {
  Api api;
  api.info.preloaded = dlopen(kLibName, RTLD_NOW | RTLD_NOLOAD) != nullptr;
  const SavedEnv saved = save_environment();
  api.info.env_note = fix_environment(saved, api.info);
  if (api.info.preloaded) api.info.env_note += "library was already loaded: env fix too late; ";
  void* lib = dlopen(kLibName, RTLD_NOW | RTLD_LOCAL);
  restore_environment(saved);  // read by OpenBLAS's constructor during dlopen, not after
  ENG_CHECK(lib != nullptr, "blas: cannot load {} ({}); install libopenblas0-pthread", kLibName,
            dlerror());
  api.sgemm = resolve<decltype(&cblas_sgemm)>(lib, "cblas_sgemm");
  auto set_threads = resolve<decltype(&openblas_set_num_threads)>(lib, "openblas_set_num_threads");
  auto get_threads = resolve<decltype(&openblas_get_num_threads)>(lib, "openblas_get_num_threads");
  auto corename = resolve<decltype(&openblas_get_corename)>(lib, "openblas_get_corename");
  auto config = resolve<decltype(&openblas_get_config)>(lib, "openblas_get_config");
  set_threads(1);
  api.info.num_threads = get_threads();
  api.info.core = corename();
  // OpenBLAS's small-matrix sgemm for these cores mallocs a buffer per call in one case
  // (kernel/x86_64/sgemm_small_kernel_nn_skylakex.c, 0.3.21 to at least 0.3.28; Cooperlake and
  // SapphireRapids use SkylakeX's); blas::sgemm runs that case itself. Dynamic-arch builds name
  // the core "SkylakeX", single-target builds "SKYLAKEX".
  for (const char* c : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    api.small_nn_mallocs = api.small_nn_mallocs || strcasecmp(api.info.core.c_str(), c) == 0;
  api.info.config = config();
  while (!api.info.config.empty() && api.info.config.back() == ' ') api.info.config.pop_back();
  check_loaded_core(api.info);
  // Said once per process, on stderr: a slow run should explain itself.
  for (const std::string& w : api.info.warnings) fmt::print(stderr, "shardlab: {}\n", w);
  return api;
}

const Api& api() {
  static const Api a = load();  // thread-safe, once per process
  return a;
}

}  // namespace

const BlasInfo& blas_info() { return api().info; }

Status check_blas_environment() {
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  return choose_openblas_core(cpu_info(), env, std::getenv("SHARDLAB_OPENBLAS_CORETYPE")).status();
}

namespace blas {
namespace {

// Whether OpenBLAS 0.3.21 would run this row-major sgemm in its SkylakeX small-matrix NN kernel
// with the branch that mallocs (sgemm_small_kernel_permit_skylakex.c: M N K <= 100^3; the NN
// kernel: column-major M mod 16 in [1, 8] and K >= 32). Row-major C = op(A) op(B) is OpenBLAS's
// column-major C^T = op(B)^T op(A)^T, so its M is our N and NN stays NN. A step must allocate
// nothing (tests/train/trainer_alloc_test.cpp: the MoE router's tokens x d x 4 product hit it).
bool openblas_small_nn_mallocs(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K) {
  if (trans_a || trans_b || !api().small_nn_mallocs || K < 32) return false;
  if (static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) > 1e6) return false;
  const int64_t rest = N % 16;
  return rest >= 1 && rest <= 8;
}

// Row-major C = alpha A B + beta C for the shapes above (at most 10^6 products): each row of C
// summed over k in f32 registers, kW columns at a time (simd.h: AVX-512, AVX2 or scalar).
void small_sgemm_nn(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                    const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  using kern::simd::Vec;
  const Vec av = kern::simd::set1(alpha), bv = kern::simd::set1(beta);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; n += kern::simd::kW) {
      const kern::simd::Mask mask = kern::simd::mask_for(N - n);
      Vec acc = kern::simd::set1(0.f);
      for (int64_t k = 0; k < K; ++k)
        acc = kern::simd::fma(kern::simd::set1(A[m * lda + k]), kern::simd::load(B + k * ldb + n, mask), acc);
      float* c = C + m * ldc + n;
      kern::simd::store(c, beta == 0.f ? av * acc : av * acc + bv * kern::simd::load(c, mask), mask);
    }
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  constexpr int64_t kMax = 0x7fffffff;  // blasint is 32-bit in Debian's OpenBLAS
  ENG_CHECK(M <= kMax && N <= kMax && K <= kMax && lda <= kMax && ldb <= kMax && ldc <= kMax,
            "blas: sgemm dims exceed 32-bit BLAS ints: M={} N={} K={}", M, N, K);
  // OpenBLAS reports bad leading dims on stderr and skips the call; make that a loud bug.
  ENG_CHECK(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N,
            "blas: sgemm leading dims too small: M={} N={} K={} lda={} ldb={} ldc={}", M, N, K,
            lda, ldb, ldc);
  if (K <= 0) {  // no products: C = beta * C (OpenBLAS rejects lda < 1 here)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = beta == 0.f ? 0.f : beta * C[m * ldc + n];
    return;
  }
  if (openblas_small_nn_mallocs(trans_a, trans_b, M, N, K))
    return small_sgemm_nn(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  api().sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
              static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}

}  // namespace blas
}  // namespace eng
