// engine/tensor/blas.h: OpenBLAS, loaded at run time with the environment fixed first.
//
// Why dlopen and not -lopenblas: OpenBLAS reads OPENBLAS_CORETYPE when it loads, and its own
// detection goes by CPU model number: on a model it does not know (Intel family 6 model 207) it
// picks its Prescott (SSE3) kernels, and these machines may preset OPENBLAS_CORETYPE=Haswell
// on AVX-512 CPUs (half the sgemm speed). So the core is chosen here from the CPU's features
// (cpu_info.h, choose_openblas_core) and set before loading: the strongest core the CPU runs;
// a user's OPENBLAS_CORETYPE is kept when at least as strong, else replaced (said on stderr);
// SHARDLAB_OPENBLAS_CORETYPE=<name> (e.g. Haswell, SkylakeX) always wins, to compare like for
// like with another program. After loading, openblas_get_corename() is checked against the
// CPU's best. OpenBLAS is kept single-threaded (openblas_set_num_threads(1)); kern::matmul
// splits a GEMM over the engine's one pool, so there is never a second pool.
//
// The library loads on the first call to any function here (it briefly edits the process
// environment, then restores it: call blas_info() early in main, before other threads read
// the environment). A missing libopenblas.so.0 is an install bug and aborts with a message; so
// does a bad SHARDLAB_OPENBLAS_CORETYPE when main did not call check_blas_environment() first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/base/status.h"

namespace eng {

struct BlasInfo {
  std::string core;        // openblas_get_corename(), e.g. "Cooperlake"
  std::string config;      // openblas_get_config(), e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
  int num_threads = 0;     // openblas_get_num_threads(): 1, the pool splits GEMMs
  std::string env_note;    // what was done to OPENBLAS_* before loading (for logs)
  bool preloaded = false;  // the library was already in the process: our env fix came too late
  std::string chosen_core;   // the OPENBLAS_CORETYPE set before loading (choose_openblas_core)
  bool weaker_than_cpu = false;        // `core` is weaker than best_openblas_core(cpu_info())
  std::vector<std::string> warnings;   // printed once on stderr when loading (replaced env, ...)
};

// The environment's OPENBLAS_CORETYPE / SHARDLAB_OPENBLAS_CORETYPE as choose_openblas_core
// judges them: an error for an unknown SHARDLAB_OPENBLAS_CORETYPE (naming the accepted core
// types) or one this CPU cannot run. main() calls it before anything loads OpenBLAS.
Status check_blas_environment();

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
