// engine/tensor/onednn_matmul.h: bf16 matmuls (f32 accumulation) through the engine's own
// avx512_bf16 GEMM or oneDNN, planned once.
//
//   Bf16MatmulShape s{.trans_b = true, .M = 4096, .N = 1408, .K = 512, .lda = 512,
//                     .ldb = 512, .ldc = 1408, .c_dtype = DType::kBF16};
//   ENG_ASSIGN_OR_RETURN(auto plan, Bf16MatmulPlan::create(s));   // when preparing
//   plan->run(A, B, C);                                              // every step
//
// C[M,N] = op(A) * op(B) (+ C when accumulating), A and B bf16 (uint16_t storage), C f32 or
// bf16, products summed in f32, C rounded to bf16 once at the end. Row-major with leading
// dims (row strides) and trans_a / trans_b exactly as kern::matmul (kernels.h).
//
// Threads: the plan splits C into row (or column) blocks at create() time, one single-threaded
// oneDNN primitive per block size, and run() hands the blocks to the engine's one pool
// (engine/base/thread_pool.h), as kern::matmul does with sgemm. Debian's oneDNN uses OpenMP;
// every thread that creates or runs a primitive has its OpenMP thread count set to 1, so
// oneDNN never starts a second pool. The split depends only on the shape and the pool's
// thread count: run() inside a parallel region does the same blocks inline, bitwise equal.
//
// Memory: primitives are built by create(). run() allocates no buffers: oneDNN's scratchpad,
// the native GEMM's packing buffers and convert+sgemm's f32 blocks are per thread
// (reserve_bf16_matmul_scratch, grown on first use otherwise). oneDNN's own execute() still
// makes 32 small bookkeeping allocations per block of C per call (its memory handles and
// argument maps; its public API has no way around that), which is why kAuto never picks it:
// with kAuto a step allocates nothing on any CPU (tests/tensor/bf16_alloc_test.cpp,
// tests/train/trainer_alloc_test.cpp, both also run with SHARDLAB_DISABLE_AVX512_BF16=1).
//
// CPUs without avx512_bf16: kAuto runs kPacked (bf16_packed_gemm.cpp): a GotoBLAS-style GEMM
// that widens bf16 to f32 while packing its panels (the operands stay bf16 in memory) and runs
// an f32 FMA micro-kernel, as fast as sgemm on the same shapes. kConvertSgemm, the fallback of
// builds with neither AVX2 nor AVX-512 (and the oracle it replaced): blocks of C (256 x 512), each a pool
// task that widens its rows of A and columns of B to f32 (exact) in the thread's scratch and
// runs one single-threaded sgemm over the whole K. kOnednn (SHARDLAB_BF16_MATMUL=onednn) runs
// oneDNN's bf16 matmul (its avx512_core emulation there). Every backend gives the
// f32-accumulated product of the same bf16 values; they differ only in summation order (last
// bits of f32), i.e. not bitwise.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/base/status.h"
#include "engine/tensor/dtype.h"

namespace eng::kern {

// True when this CPU (CPUID) has AVX512_BF16 (vcvtneps2bf16, vdpbf16ps) and the OS saves
// AVX-512 state. SHARDLAB_DISABLE_AVX512_BF16=1 in the environment makes it false, and caps
// oneDNN at avx512_core, so the fallback paths can be tested on any machine (read once).
bool cpu_has_avx512_bf16();

enum class MatmulBackend : uint8_t {
  kAuto,          // kAmx on AMX-BF16, else kNative on avx512_bf16, else kPacked (AVX2+FMA or
                  // AVX-512F builds), else kConvertSgemm (all four allocate nothing in run())
  kNative,        // the engine's vdpbf16ps GEMM (bf16_gemm.cpp): allocates nothing in run()
  kAmx,           // the engine's AMX GEMM (bf16_amx_gemm.cpp, tdpbf16ps): allocates nothing
  kPacked,        // bf16 widened to f32 while packing, f32 FMA micro-kernel (bf16_packed_gemm.cpp)
  kOnednn,        // oneDNN or an error from create()
  kConvertSgemm,  // blocks of A and B widened to f32 in per-thread scratch, then sgemm
};

// SHARDLAB_BF16_MATMUL=amx|native|packed|sgemm|onednn forces a backend (the runtime's plans and
// train_bench read it); unset or anything else: kAuto.
MatmulBackend bf16_matmul_backend_from_env();

struct Bf16MatmulShape {
  bool trans_a = false;  // A is (K, M) with row stride lda
  bool trans_b = false;  // B is (N, K) with row stride ldb
  int64_t M = 0, N = 0, K = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;  // row strides, in elements
  DType c_dtype = DType::kF32;        // kF32 or kBF16
  bool accumulate = false;            // C = op(A) op(B) + C (a bf16 C is read, summed in f32)
};

class Bf16MatmulPlan {
 public:
  // Builds the primitives (or the fallback's buffers). Errors name the shape: a C dtype other
  // than f32/bf16, negative sizes, leading dims smaller than a row, or a backend oneDNN
  // cannot build for this shape (kOnednn only).
  static Result<std::unique_ptr<Bf16MatmulPlan>> create(const Bf16MatmulShape& shape,
                                                       MatmulBackend backend = MatmulBackend::kAuto);
  ~Bf16MatmulPlan();
  Bf16MatmulPlan(const Bf16MatmulPlan&) = delete;
  Bf16MatmulPlan& operator=(const Bf16MatmulPlan&) = delete;

  // C (f32 or bf16, as planned) = op(A) op(B) [+ C]. Reentrant (device-parallel callers may
  // share a plan): every backend's buffers are per thread.
  void run(const uint16_t* A, const uint16_t* B, void* C) const;

  const Bf16MatmulShape& shape() const { return shape_; }
  MatmulBackend backend() const { return backend_; }
  int64_t parts() const;          // blocks of C handed to the pool (oneDNN, convert+sgemm), row tiles (native)
  int64_t scratch_bytes() const;  // per-thread scratch that run() needs
  // e.g. "onednn brg:avx512_core_bf16 x2 (rows)" or "convert+sgemm": for logs and benchmarks.
  std::string describe() const;

 private:
  struct Impl;
  Bf16MatmulPlan(const Bf16MatmulShape& shape, MatmulBackend backend, std::unique_ptr<Impl> impl);
  Bf16MatmulShape shape_;
  MatmulBackend backend_;
  std::unique_ptr<Impl> impl_;
};

// Grows the calling thread's one scratch buffer, shared by every backend (the native GEMM's
// packing, oneDNN's scratchpad, convert+sgemm's f32 blocks), to `bytes` (without avx512_bf16 it
// also makes the thread's oneDNN stream and sets its OpenMP thread count to 1);
// allocates nothing when already large enough. The runtime calls it on every pool thread with
// the largest scratch_bytes() of an executable's plans, as with kern::reserve_scratch (field
// ScratchNeeds::bf16_matmul_bytes does it through reserve_scratch).
void reserve_bf16_matmul_scratch(int64_t bytes);

}  // namespace eng::kern
