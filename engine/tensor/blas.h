// engine/tensor/blas.h: OpenBLAS, loaded at run time with the environment fixed first.
//
// Why dlopen and not -lopenblas: OpenBLAS reads OPENBLAS_CORETYPE when it loads, and these
// machines may preset OPENBLAS_CORETYPE=Haswell (AVX2 kernels, half the sgemm speed on an
// AVX-512 CPU). Loading it ourselves lets us remove that variable first, so the engine uses
// the machine fully whatever the environment says. SHARDLAB_OPENBLAS_CORETYPE=<name> (e.g.
// Haswell, SkylakeX) forces a core type instead, to compare like for like with another
// program. OpenBLAS is kept single-threaded (openblas_set_num_threads(1)); kern::matmul
// splits a GEMM over the engine's one pool, so there is never a second pool.
//
// The library loads on the first call to any function here (it briefly edits the process
// environment, then restores it: call blas_info() early in main, before other threads read
// the environment). A missing libopenblas.so.0 is an install bug and aborts with a message.
#pragma once

#include <cstdint>
#include <string>

namespace eng {

struct BlasInfo {
  std::string core;        // openblas_get_corename(), e.g. "Cooperlake"
  std::string config;      // openblas_get_config(), e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
  int num_threads = 0;     // openblas_get_num_threads(): 1, the pool splits GEMMs
  std::string env_note;    // what was done to OPENBLAS_* before loading (for logs)
  bool preloaded = false;  // the library was already in the process: our env fix came too late
};

// Loads OpenBLAS if needed and describes it.
const BlasInfo& blas_info();

namespace blas {

// One single-threaded row-major sgemm on the calling thread (no splitting):
// C[M,N] = alpha * op(A) * op(B) + beta * C. beta == 0 ignores C's old contents.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc);

}  // namespace blas
}  // namespace eng
