// engine/tensor/onednn_matmul.cpp: the only includer of dnnl.hpp; bf16 matmul plans split over
// the engine's pool, each block one single-threaded oneDNN primitive (see onednn_matmul.h).
#include "engine/tensor/onednn_matmul.h"

#include <cpuid.h>
#include <omp.h>  // Debian's oneDNN threads with OpenMP: we pin its thread count to 1

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/base/check.h"
#include "engine/base/thread_pool.h"
#include "engine/tensor/bf16_gemm.h"
#include "engine/tensor/kernels.h"

namespace eng::kern {
namespace {

bool env_disables_bf16() {
  const char* v = std::getenv("SHARDLAB_DISABLE_AVX512_BF16");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

// CPUID.(EAX=7,ECX=1):EAX bit 5 is AVX512_BF16; XGETBV must show the OS saves ZMM state.
bool cpuid_avx512_bf16() {
  unsigned a, b, c, d;
  if (__get_cpuid_count(1, 0, &a, &b, &c, &d) == 0 || !(c & (1u << 27))) return false;  // OSXSAVE
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0xe6u) != 0xe6u) return false;  // XMM, YMM, opmask, ZMM_Hi256, Hi16_ZMM
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0 || !(b & (1u << 16))) return false;  // F
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) == 0) return false;
  return (a & (1u << 5)) != 0;
}

// One oneDNN engine for the process, created on first use, after the ISA cap.
const dnnl::engine& dnnl_engine() {
  static const dnnl::engine e = [] {
    if (env_disables_bf16()) dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx512_core);
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

// A stream per thread: oneDNN streams are not for concurrent use; primitives are (with a
// user-managed scratchpad each).
thread_local dnnl::stream t_dnnl_stream;
const dnnl::stream& dnnl_stream() {
  if (!t_dnnl_stream) t_dnnl_stream = dnnl::stream(dnnl_engine());
  return t_dnnl_stream;
}

// oneDNN (OpenMP build) sizes its work split by omp_get_max_threads() of the calling thread.
void pin_openmp_to_one_thread() {
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
}

// Per-thread oneDNN scratchpad, 64-byte aligned inside a byte vector.
constexpr int64_t kScratchAlign = 64;
thread_local std::vector<uint8_t> t_dnnl_scratch;

void* scratch_for(int64_t bytes) {
  if (static_cast<int64_t>(t_dnnl_scratch.size()) < bytes + kScratchAlign)
    t_dnnl_scratch.resize(bytes + kScratchAlign);
  const auto p = reinterpret_cast<uintptr_t>(t_dnnl_scratch.data());
  return reinterpret_cast<void*>((p + kScratchAlign - 1) / kScratchAlign * kScratchAlign);
}

using dt = dnnl::memory::data_type;

// The same split rule as kern::matmul (kernels.cpp): rows of C when M is large, else columns.
struct Split {
  bool by_rows = true;
  int64_t per = 0;    // rows (or columns) per block, whole 16-wide tiles
  int64_t parts = 1;  // blocks: all of size `per` but the last
};

Split plan_split(int64_t M, int64_t N, int64_t K) {
  const int64_t nt = default_pool().num_threads();
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  Split s;
  s.by_rows = M >= N || M >= 128 * nt;
  const int64_t dim = s.by_rows ? M : N;
  const int64_t want = std::min<int64_t>({std::max<int64_t>(nt, std::min<int64_t>(2 * nt, dim / 256)), dim / 16});
  if (nt <= 1 || want <= 1 || flops < 4e6) {
    s.per = std::max<int64_t>(dim, 1);
    return s;
  }
  s.per = ((dim + want - 1) / want + 15) / 16 * 16;
  s.parts = (dim + s.per - 1) / s.per;
  return s;
}

}  // namespace

bool cpu_has_avx512_bf16() {
  static const bool has = !env_disables_bf16() && cpuid_avx512_bf16();
  return has;
}

// One block shape's primitive and its memory descriptors.
struct Prim {
  dnnl::memory::desc a, b, c, scratch;
  dnnl::matmul prim;
  std::string impl;
};

struct Bf16MatmulPlan::Impl {
  Split split;
  Prim full, last;  // blocks of size split.per, and the last one (if smaller)
  int64_t scratch_bytes = 0;
  // kConvertSgemm only: f32 copies, compact (row length = the operand's stored row).
  mutable std::vector<float> a32, b32, c32;
};

namespace {

// A block of m x n (rows x cols of C): its primitive, single-threaded, scratchpad in user mode.
Result<Prim> make_prim(const Bf16MatmulShape& s, int64_t m, int64_t n) {
  using dims = dnnl::memory::dims;
  Prim p;
  p.a = dnnl::memory::desc(dims{m, s.K}, dt::bf16, s.trans_a ? dims{1, s.lda} : dims{s.lda, 1});
  p.b = dnnl::memory::desc(dims{s.K, n}, dt::bf16, s.trans_b ? dims{1, s.ldb} : dims{s.ldb, 1});
  p.c = dnnl::memory::desc(dims{m, n}, s.c_dtype == DType::kBF16 ? dt::bf16 : dt::f32,
                           dims{s.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.f);
    attr.set_post_ops(ops);
  }
  pin_openmp_to_one_thread();  // the primitive's work split is fixed now, for one thread
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.a, p.b, p.c), attr, dnnl_engine());
    p.impl = pd.impl_info_str();
    p.scratch = pd.scratchpad_desc();
    p.prim = dnnl::matmul(pd);
  } catch (const dnnl::error& e) {
    return unimplemented("bf16 matmul: oneDNN cannot run ({}, {}) x ({}, {}){}{} -> {}: {}", m,
                         s.K, s.K, n, s.trans_a ? " trans_a" : "", s.trans_b ? " trans_b" : "",
                         dtype_name(s.c_dtype), e.what());
  }
  return p;
}

Status validate(const Bf16MatmulShape& s) {
  if (s.c_dtype != DType::kF32 && s.c_dtype != DType::kBF16)
    return invalid_argument("bf16 matmul: output dtype {} is not f32 or bf16", dtype_name(s.c_dtype));
  if (s.M < 0 || s.N < 0 || s.K < 0)
    return invalid_argument("bf16 matmul: negative size M={} N={} K={}", s.M, s.N, s.K);
  const int64_t a_row = s.trans_a ? s.M : s.K, b_row = s.trans_b ? s.K : s.N;
  if (s.lda < std::max<int64_t>(a_row, 1) || s.ldb < std::max<int64_t>(b_row, 1) ||
      s.ldc < std::max<int64_t>(s.N, 1))
    return invalid_argument(
        "bf16 matmul: leading dims smaller than a row: lda={} (row {}), ldb={} (row {}), ldc={} "
        "(row {})", s.lda, a_row, s.ldb, b_row, s.ldc, s.N);
  return ok_status();
}

// The stored rows of an operand: A is (M, K) or (K, M); B is (K, N) or (N, K).
struct Rows {
  int64_t count, len, ld;
};
Rows a_rows(const Bf16MatmulShape& s) { return s.trans_a ? Rows{s.K, s.M, s.lda} : Rows{s.M, s.K, s.lda}; }
Rows b_rows(const Bf16MatmulShape& s) { return s.trans_b ? Rows{s.N, s.K, s.ldb} : Rows{s.K, s.N, s.ldb}; }

void widen_rows(const uint16_t* x, Rows r, float* y) {
  parallel_for(r.count, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, r.len)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t i = lo; i < hi; ++i) convert_bf16_to_f32(x + i * r.ld, y + i * r.len, r.len);
               });
}

// The fallback's f32 copies of A, B (and of a bf16 C), compact.
struct Widened {
  float *a, *b, *c;
};

void run_convert_sgemm(const Bf16MatmulShape& s, Widened w, const uint16_t* A, const uint16_t* B,
                       void* C) {
  const Rows ar = a_rows(s), br = b_rows(s);
  widen_rows(A, ar, w.a);
  widen_rows(B, br, w.b);
  const float beta = s.accumulate ? 1.f : 0.f;
  if (s.c_dtype == DType::kF32) {
    matmul(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.f, w.a, ar.len, w.b, br.len,
           beta, static_cast<float*>(C), s.ldc);
    return;
  }
  uint16_t* c = static_cast<uint16_t*>(C);
  if (s.accumulate) widen_rows(c, Rows{s.M, s.N, s.ldc}, w.c);
  matmul(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.f, w.a, ar.len, w.b, br.len,
         beta, w.c, s.N);
  parallel_for(s.M, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, s.N)), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) convert_f32_to_bf16(w.c + i * s.N, c + i * s.ldc, s.N);
  });
}

// Zero products (K == 0): C = 0, or C unchanged when accumulating.
void run_empty_k(const Bf16MatmulShape& s, void* C) {
  if (s.accumulate) return;
  const int64_t es = dtype_size(s.c_dtype);
  for (int64_t i = 0; i < s.M; ++i) std::memset(static_cast<char*>(C) + i * s.ldc * es, 0, s.N * es);
}

}  // namespace

Bf16MatmulPlan::Bf16MatmulPlan(const Bf16MatmulShape& shape, MatmulBackend backend,
                               std::unique_ptr<Impl> impl)
    : shape_(shape), backend_(backend), impl_(std::move(impl)) {}
Bf16MatmulPlan::~Bf16MatmulPlan() = default;

Result<std::unique_ptr<Bf16MatmulPlan>> Bf16MatmulPlan::create(const Bf16MatmulShape& s,
                                                               MatmulBackend backend) {
  ENG_RETURN_IF_ERROR(validate(s));
  auto im = std::make_unique<Impl>();
  const bool empty = s.M == 0 || s.N == 0 || s.K == 0;
  const bool native = detail::native_bf16_gemm_available();
  if (backend == MatmulBackend::kNative && !native)
    return unimplemented("bf16 matmul: the native backend needs avx512_bf16 (this CPU or build has none)");
  if ((backend == MatmulBackend::kNative || backend == MatmulBackend::kAuto) && native) {
    im->scratch_bytes = detail::native_gemm_scratch_bytes(s);
    return std::unique_ptr<Bf16MatmulPlan>(new Bf16MatmulPlan(s, MatmulBackend::kNative, std::move(im)));
  }
  if (backend != MatmulBackend::kConvertSgemm && !empty) {
    im->split = plan_split(s.M, s.N, s.K);
    const Split& sp = im->split;
    const int64_t dim = sp.by_rows ? s.M : s.N;
    const int64_t last = dim - (sp.parts - 1) * sp.per;
    Result<Prim> full = sp.by_rows ? make_prim(s, sp.per, s.N) : make_prim(s, s.M, sp.per);
    Result<Prim> tail = full;
    if (full.ok() && last != sp.per) tail = sp.by_rows ? make_prim(s, last, s.N) : make_prim(s, s.M, last);
    if (full.ok() && tail.ok()) {
      im->full = std::move(full).value();
      im->last = std::move(tail).value();
      im->scratch_bytes = static_cast<int64_t>(
          std::max(im->full.scratch.get_size(), im->last.scratch.get_size()));
      return std::unique_ptr<Bf16MatmulPlan>(new Bf16MatmulPlan(s, MatmulBackend::kOnednn, std::move(im)));
    }
    if (backend == MatmulBackend::kOnednn) return full.ok() ? tail.status() : full.status();
  }
  if (!empty) {
    const Rows ar = a_rows(s), br = b_rows(s);
    im->a32.resize(ar.count * ar.len);
    im->b32.resize(br.count * br.len);
    if (s.c_dtype == DType::kBF16) im->c32.resize(s.M * s.N);
  }
  return std::unique_ptr<Bf16MatmulPlan>(new Bf16MatmulPlan(s, MatmulBackend::kConvertSgemm, std::move(im)));
}

int64_t Bf16MatmulPlan::parts() const {
  if (backend_ == MatmulBackend::kNative) return (shape_.M + 63) / 64;
  return backend_ == MatmulBackend::kOnednn ? impl_->split.parts : 1;
}
int64_t Bf16MatmulPlan::scratch_bytes() const { return impl_->scratch_bytes; }

std::string Bf16MatmulPlan::describe() const {
  if (backend_ == MatmulBackend::kNative) return "native avx512_bf16 (vdpbf16ps 8x32)";
  if (backend_ != MatmulBackend::kOnednn) return "convert+sgemm";
  return fmt::format("onednn {} x{} ({})", impl_->full.impl, impl_->split.parts,
                     impl_->split.by_rows ? "rows" : "columns");
}

void Bf16MatmulPlan::run(const uint16_t* A, const uint16_t* B, void* C) const {
  const Bf16MatmulShape& s = shape_;
  if (s.M == 0 || s.N == 0) return;
  if (s.K == 0) return run_empty_k(s, C);
  if (backend_ == MatmulBackend::kNative) return detail::native_gemm(s, A, B, C);
  if (backend_ == MatmulBackend::kConvertSgemm) return run_convert_sgemm(s, {impl_->a32.data(), impl_->b32.data(), impl_->c32.data()}, A, B, C);
  const Split& sp = impl_->split;
  const int64_t dim = sp.by_rows ? s.M : s.N;
  const int64_t c_size = dtype_size(s.c_dtype);
  const dnnl::engine& eng = dnnl_engine();
  auto block = [&](int64_t p) {
    const int64_t lo = p * sp.per;
    const Prim& pr = lo + sp.per >= dim ? impl_->last : impl_->full;
    const uint16_t* a = A;
    const uint16_t* b = B;
    char* c = static_cast<char*>(C);
    if (sp.by_rows) {
      a += s.trans_a ? lo : lo * s.lda;
      c += lo * s.ldc * c_size;
    } else {
      b += s.trans_b ? lo * s.ldb : lo;
      c += lo * c_size;
    }
    pin_openmp_to_one_thread();
    void* scratch = scratch_for(impl_->scratch_bytes);
    try {
      dnnl::memory am(pr.a, eng, const_cast<uint16_t*>(a));
      dnnl::memory bm(pr.b, eng, const_cast<uint16_t*>(b));
      dnnl::memory cm(pr.c, eng, c);
      dnnl::memory sm(pr.scratch, eng, scratch);
      pr.prim.execute(dnnl_stream(), {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm},
                                 {DNNL_ARG_SCRATCHPAD, sm}});
    } catch (const dnnl::error& e) {
      ENG_CHECK(false, "bf16 matmul: oneDNN execute failed on a planned shape: {}", e.what());
    }
  };
  if (sp.parts == 1 || ThreadPool::in_parallel_region()) {
    for (int64_t p = 0; p < sp.parts; ++p) block(p);
  } else {
    default_pool().run(sp.parts, block);
  }
}

void reserve_bf16_matmul_scratch(int64_t bytes) {
  if (detail::native_bf16_gemm_available()) return detail::reserve_native_gemm_scratch(bytes);
  pin_openmp_to_one_thread();
  dnnl_stream();
  if (bytes > 0) scratch_for(bytes);
}

}  // namespace eng::kern
