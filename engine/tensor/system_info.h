// engine/tensor/system_info.h: the CPU, the BLAS core and the kernel paths this process uses, as
// (key, value) pairs: printed by `shardlab --version` and train_bench, returned by sl.system(),
// and recorded with every run (tags shardlab.cpu, shardlab.blas_core, ...) so that a slow run
// can be explained from the store.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace eng {

// Loads OpenBLAS if needed. Keys, in order:
//   cpu          "AMD EPYC (AuthenticAMD family 25 model 1)"
//   cpu_flags    "sse3 avx avx2 fma f16c" (cpu_info.h CpuInfo::flags)
//   blas_core    OpenBLAS's core as loaded, e.g. "Zen"
//   blas_best    the strongest core this CPU runs (best_openblas_core)
//   blas_env     what was done to OPENBLAS_* before loading (BlasInfo::env_note)
//   simd         the engine's own kernels' vectors: "avx512", "avx2" or "scalar" (the build's)
//   matmul_f32   "openblas <core> sgemm"
//   matmul_bf16  the bf16 matmul kAuto picks (Bf16MatmulPlan::describe)
//   attention_bf16  what bf16 attention's block products run on
std::vector<std::pair<std::string, std::string>> system_info();

// The same, one "key: value" per line.
std::string system_info_text();

}  // namespace eng
