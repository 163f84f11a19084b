// engine/tensor/onednn_matmul.cpp: the only includer of dnnl.hpp; bf16 matmul plans split over
// the engine's pool, each block one single-threaded oneDNN primitive (see onednn_matmul.h).
#include "engine/tensor/onednn_matmul.h"

#include <cpuid.h>
#include <omp.h>  // Debian's oneDNN threads with OpenMP: we pin its thread count to 1

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/base/check.h"
#include "engine/base/thread_pool.h"
#include "engine/tensor/bf16_gemm.h"
#include "engine/tensor/blas.h"
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

// convert+sgemm: C in blocks of up to kConvRows x kConvCols, each one task that widens its rows
// of op(A) and columns of op(B) (and, for a bf16 C it adds to, its block of C) into the running
// thread's scratch and runs one single-threaded sgemm over the whole K. The blocks depend only
// on the shape, so every element of C is the same sgemm sum for any thread count; nothing is
// allocated once the scratch is reserved, and a plan is reentrant.
constexpr int64_t kConvRows = 256, kConvCols = 512;

struct ConvBlocks {
  int64_t mb, nb, row_blocks, col_blocks;
};
ConvBlocks conv_blocks(const Bf16MatmulShape& s) {
  ConvBlocks b{std::min(s.M, kConvRows), std::min(s.N, kConvCols), 0, 0};
  b.row_blocks = (s.M + kConvRows - 1) / kConvRows;
  b.col_blocks = (s.N + kConvCols - 1) / kConvCols;
  return b;
}
int64_t convert_scratch_bytes(const Bf16MatmulShape& s) {
  const ConvBlocks b = conv_blocks(s);
  return 4 * (b.mb * s.K + s.K * b.nb + (s.c_dtype == DType::kBF16 ? b.mb * b.nb : 0));
}

// rows x cols bf16 with row stride ld -> compact f32 (row stride cols).
void widen(const uint16_t* x, int64_t ld, int64_t rows, int64_t cols, float* y) {
  for (int64_t r = 0; r < rows; ++r) convert_bf16_to_f32(x + r * ld, y + r * cols, cols);
}

// Block (rows [i0, i0 + m), columns [j0, j0 + n)) of C, with f32 copies in `buf`.
void convert_block(const Bf16MatmulShape& s, const uint16_t* A, const uint16_t* B, void* C,
                   int64_t i0, int64_t m, int64_t j0, int64_t n, float* buf) {
  const ConvBlocks bl = conv_blocks(s);
  float* a = buf;
  float* b = a + bl.mb * s.K;
  float* c = b + s.K * bl.nb;
  if (s.trans_a) widen(A + i0, s.lda, s.K, m, a); else widen(A + i0 * s.lda, s.lda, m, s.K, a);
  if (s.trans_b) widen(B + j0 * s.ldb, s.ldb, n, s.K, b); else widen(B + j0, s.ldb, s.K, n, b);
  const int64_t lda = s.trans_a ? m : s.K, ldb = s.trans_b ? s.K : n;
  const float beta = s.accumulate ? 1.f : 0.f;
  if (s.c_dtype == DType::kF32) {
    blas::sgemm(s.trans_a, s.trans_b, m, n, s.K, 1.f, a, lda, b, ldb, beta,
                static_cast<float*>(C) + i0 * s.ldc + j0, s.ldc);
    return;
  }
  uint16_t* cb = static_cast<uint16_t*>(C) + i0 * s.ldc + j0;
  if (s.accumulate) widen(cb, s.ldc, m, n, c);
  blas::sgemm(s.trans_a, s.trans_b, m, n, s.K, 1.f, a, lda, b, ldb, beta, c, n);
  for (int64_t r = 0; r < m; ++r) convert_f32_to_bf16(c + r * n, cb + r * s.ldc, n);
}

void run_convert_sgemm(const Bf16MatmulShape& s, int64_t scratch_bytes, const uint16_t* A,
                       const uint16_t* B, void* C) {
  const ConvBlocks bl = conv_blocks(s);
  auto block = [&](int64_t t) {
    const int64_t i0 = (t % bl.row_blocks) * kConvRows, j0 = (t / bl.row_blocks) * kConvCols;
    convert_block(s, A, B, C, i0, std::min(kConvRows, s.M - i0), j0, std::min(kConvCols, s.N - j0),
                  static_cast<float*>(detail::thread_matmul_scratch(scratch_bytes)));
  };
  const int64_t parts = bl.row_blocks * bl.col_blocks;
  if (parts == 1 || ThreadPool::in_parallel_region() || default_pool().num_threads() <= 1) {
    for (int64_t t = 0; t < parts; ++t) block(t);
  } else {
    default_pool().run(parts, block);
  }
}

// Zero products (K == 0): C = 0, or C unchanged when accumulating.
void run_empty_k(const Bf16MatmulShape& s, void* C) {
  if (s.accumulate) return;
  const int64_t es = dtype_size(s.c_dtype);
  for (int64_t i = 0; i < s.M; ++i) std::memset(static_cast<char*>(C) + i * s.ldc * es, 0, s.N * es);
}

}  // namespace

MatmulBackend bf16_matmul_backend_from_env() {
  const char* v = std::getenv("SHARDLAB_BF16_MATMUL");
  const std::string_view s = v ? v : "";
  if (s == "amx") return MatmulBackend::kAmx;
  if (s == "native") return MatmulBackend::kNative;
  if (s == "packed") return MatmulBackend::kPacked;
  if (s == "sgemm") return MatmulBackend::kConvertSgemm;
  if (s == "onednn") return MatmulBackend::kOnednn;
  return MatmulBackend::kAuto;
}

Bf16MatmulPlan::Bf16MatmulPlan(const Bf16MatmulShape& shape, MatmulBackend backend,
                               std::unique_ptr<Impl> impl)
    : shape_(shape), backend_(backend), impl_(std::move(impl)) {}
Bf16MatmulPlan::~Bf16MatmulPlan() = default;

Result<std::unique_ptr<Bf16MatmulPlan>> Bf16MatmulPlan::create(const Bf16MatmulShape& s,
                                                               MatmulBackend backend) {
  ENG_RETURN_IF_ERROR(validate(s));
  auto im = std::make_unique<Impl>();
  const bool empty = s.M == 0 || s.N == 0 || s.K == 0;
  const bool amx = detail::amx_bf16_gemm_available();
  if (backend == MatmulBackend::kAmx && !amx)
    return unimplemented("bf16 matmul: the AMX backend needs AMX-BF16 and avx512_bf16 (this CPU or build has "
                         "none, or SHARDLAB_DISABLE_AMX is set)");
  if (backend == MatmulBackend::kAmx || (backend == MatmulBackend::kAuto && amx)) {
    im->scratch_bytes = detail::amx_gemm_scratch_bytes(s);
    return std::unique_ptr<Bf16MatmulPlan>(new Bf16MatmulPlan(s, MatmulBackend::kAmx, std::move(im)));
  }
  const bool native = detail::native_bf16_gemm_available();
  if (backend == MatmulBackend::kNative && !native)
    return unimplemented("bf16 matmul: the native backend needs avx512_bf16 (this CPU or build has none)");
  if ((backend == MatmulBackend::kNative || backend == MatmulBackend::kAuto) && native) {
    im->scratch_bytes = detail::native_gemm_scratch_bytes(s);
    return std::unique_ptr<Bf16MatmulPlan>(new Bf16MatmulPlan(s, MatmulBackend::kNative, std::move(im)));
  }
  const bool packed = detail::packed_bf16_gemm_available();
  if (backend == MatmulBackend::kPacked && !packed)
    return unimplemented("bf16 matmul: the packed backend needs a build with AVX2+FMA or AVX-512F");
  if (backend == MatmulBackend::kPacked || (backend == MatmulBackend::kAuto && packed)) {
    if (!empty) im->scratch_bytes = detail::packed_gemm_scratch_bytes(s);
    return std::unique_ptr<Bf16MatmulPlan>(new Bf16MatmulPlan(s, MatmulBackend::kPacked, std::move(im)));
  }
  if (backend == MatmulBackend::kOnednn && !empty) {
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
    return full.ok() ? tail.status() : full.status();
  }
  if (!empty) im->scratch_bytes = convert_scratch_bytes(s);
  return std::unique_ptr<Bf16MatmulPlan>(new Bf16MatmulPlan(s, MatmulBackend::kConvertSgemm, std::move(im)));
}

int64_t Bf16MatmulPlan::parts() const {
  if (backend_ == MatmulBackend::kAmx) return detail::amx_gemm_tasks(shape_);
  if (backend_ == MatmulBackend::kNative)
    return (shape_.M + detail::kNativeTaskRows - 1) / detail::kNativeTaskRows;
  if (backend_ == MatmulBackend::kOnednn) return impl_->split.parts;
  if (backend_ == MatmulBackend::kPacked)
    return detail::packed_gemm_tasks(shape_);
  const ConvBlocks b = conv_blocks(shape_);
  return b.row_blocks * b.col_blocks;
}
int64_t Bf16MatmulPlan::scratch_bytes() const { return impl_->scratch_bytes; }

std::string Bf16MatmulPlan::describe() const {
  if (backend_ == MatmulBackend::kAmx) return "native amx_bf16 (tdpbf16ps 32x32)";
  if (backend_ == MatmulBackend::kNative)
    return fmt::format("native avx512_bf16 (vdpbf16ps {}x{})", detail::kNativeKernelRows,
                       detail::kNativeKernelCols);
  if (backend_ == MatmulBackend::kPacked)
    return fmt::format("packed {} (bf16 widened in packing, f32 FMA {}x{})", detail::packed_bf16_gemm_isa(),
                       detail::packed_gemm_kernel_rows(), detail::packed_gemm_kernel_cols());
  if (backend_ != MatmulBackend::kOnednn) return "convert+sgemm";
  return fmt::format("onednn {} x{} ({})", impl_->full.impl, impl_->split.parts,
                     impl_->split.by_rows ? "rows" : "columns");
}

void Bf16MatmulPlan::run(const uint16_t* A, const uint16_t* B, void* C) const {
  const Bf16MatmulShape& s = shape_;
  if (s.M == 0 || s.N == 0) return;
  if (s.K == 0) return run_empty_k(s, C);
  if (backend_ == MatmulBackend::kNative) return detail::native_gemm(s, A, B, C);
  if (backend_ == MatmulBackend::kAmx) return detail::amx_gemm(s, A, B, C);
  if (backend_ == MatmulBackend::kPacked) return detail::packed_gemm(s, A, B, C);
  if (backend_ == MatmulBackend::kConvertSgemm) return run_convert_sgemm(s, impl_->scratch_bytes, A, B, C);
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
    void* scratch = detail::thread_matmul_scratch(impl_->scratch_bytes);
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
  if (!detail::native_bf16_gemm_available()) {  // where kOnednn may be asked for: its stream
    pin_openmp_to_one_thread();
    dnnl_stream();
  }
  if (bytes > 0) detail::thread_matmul_scratch(bytes);
}

}  // namespace eng::kern
