// engine/tensor/system_info.cpp: system_info() (see system_info.h).
#include "engine/tensor/system_info.h"

#include <fmt/format.h>

#include "engine/tensor/bf16_gemm.h"
#include "engine/tensor/blas.h"
#include "engine/tensor/cpu_info.h"
#include "engine/tensor/onednn_matmul.h"
#include "engine/tensor/simd.h"

namespace eng {

std::vector<std::pair<std::string, std::string>> system_info() {
  const CpuInfo& cpu = cpu_info();
  const BlasInfo& blas = blas_info();
  std::string bf16 = "?";
  kern::Bf16MatmulShape s{.M = 64, .N = 64, .K = 64, .lda = 64, .ldb = 64, .ldc = 64};
  if (auto plan = kern::Bf16MatmulPlan::create(s); plan.ok()) bf16 = (*plan)->describe();
  std::string blas_env = blas.env_note;
  while (!blas_env.empty() && (blas_env.back() == ' ' || blas_env.back() == ';')) blas_env.pop_back();
  return {
      {"cpu", fmt::format("{} ({} family {} model {})", cpu.model_name, cpu.vendor, cpu.family,
                          cpu.model)},
      {"cpu_flags", cpu.flags()},
      {"blas_core", blas.core},
      {"blas_best", std::string(best_openblas_core(cpu))},
      {"blas_env", blas_env},
      {"simd", kern::simd::kSimdPath},
      {"matmul_f32", fmt::format("openblas {} sgemm", blas.core)},
      {"matmul_bf16", bf16},
      {"attention_bf16", kern::detail::amx_bf16_gemm_available()
                             ? "AMX GEMM (bf16 operands), sgemm (f32 p, ds)"
                             : kern::detail::native_bf16_gemm_available()
                                   ? "vdpbf16ps GEMM (bf16 operands), sgemm (f32 p, ds)"
                                   : "sgemm on f32 copies"},
  };
}

std::string system_info_text() {
  std::string out;
  for (const auto& [k, v] : system_info()) out += fmt::format("{}: {}\n", k, v);
  return out;
}

}  // namespace eng
