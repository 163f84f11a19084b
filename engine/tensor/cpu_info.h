// engine/tensor/cpu_info.h: what this x86 CPU can run (CPUID), the OpenBLAS core that fits it,
// and its theoretical f32 FMA peak: the facts behind blas.cpp's choice of kernels and a
// yardstick for MFU that the kernels themselves cannot bias.
//
//   const CpuInfo& cpu = cpu_info();                 // e.g. "AMD EPYC", avx2 fma, no avx512f
//   std::string_view best = best_openblas_core(cpu); // "Zen"
//   Result<CoreChoice> c = choose_openblas_core(cpu, getenv("OPENBLAS_CORETYPE"),
//                                               getenv("SHARDLAB_OPENBLAS_CORETYPE"));
//
// Why not OpenBLAS's own detection: OpenBLAS 0.3.21 detects by CPU model number, and on a
// model it does not know (e.g. Intel family 6 model 207) it falls back to its Prescott (SSE3)
// kernels, a quarter of the speed. The features decide here, never the model number.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "engine/base/status.h"

namespace eng {

struct CpuInfo {
  std::string vendor;      // "GenuineIntel", "AuthenticAMD", ...
  std::string model_name;  // CPUID brand string, e.g. "AMD EPYC 9B14"
  int family = 0, model = 0;  // display family and model (extended fields folded in)
  // Features usable by this process: CPUID bits AND the OS saving the register state (XGETBV).
  bool sse3 = false, avx = false, avx2 = false, fma = false, fma4 = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, amx_bf16 = false;

  bool avx512() const { return avx512f && avx512bw && avx512vl && avx512dq; }
  // "avx2 fma f16c avx512f ..." (the flags that matter for the kernels, present ones only).
  std::string flags() const;
};

// This CPU, read once.
const CpuInfo& cpu_info();

// An OpenBLAS 0.3.21 x86-64 core type (the OPENBLAS_CORETYPE names its DYNAMIC_ARCH build
// accepts). `strength` orders the kernels' instruction sets: 1 SSE, 2 AVX (or FMA4), 3 AVX2+FMA,
// 4 AVX-512, 5 AVX-512 with avx512_bf16 (sbgemm). Cores of one strength run sgemm alike.
struct OpenblasCore {
  std::string_view name;
  int strength;
  bool (*runs_on)(const CpuInfo&);  // the CPU has every instruction the kernels use
  std::string_view needs;           // those instructions, for messages
};
std::span<const OpenblasCore> openblas_cores();
// The table's entry for `name` (case-insensitive, as OpenBLAS compares), or nullptr.
const OpenblasCore* find_openblas_core(std::string_view name);
// "Prescott, Nehalem, ..., Cooperlake": the names accepted, for error messages.
std::string openblas_core_names();

// The strongest core this CPU runs: Cooperlake (avx512_bf16), SkylakeX (AVX-512 F/BW/VL/DQ),
// Zen (AMD) or Haswell (others) with AVX2+FMA, Sandybridge with AVX, else Prescott.
std::string_view best_openblas_core(const CpuInfo& cpu);

struct CoreChoice {
  std::string core;  // the OPENBLAS_CORETYPE to load with
  std::string note;  // what was decided and why, for logs ("" when nothing to say)
  bool replaced_env = false;  // the user's OPENBLAS_CORETYPE was weaker (or unknown): replaced
};

// The core OpenBLAS should load (a pure function of its arguments; null or "" = unset):
// SHARDLAB_OPENBLAS_CORETYPE wins, and is an error when unknown (naming the accepted ones) or
// when this CPU lacks its instructions (it would die of SIGILL); else OPENBLAS_CORETYPE when it
// is a core this CPU runs and at least as strong as its best; else the best, with a note
// saying which value was replaced.
Result<CoreChoice> choose_openblas_core(const CpuInfo& cpu, const char* openblas_coretype,
                                        const char* shardlab_coretype);

// Theoretical f32 peak of one core running kernels of `strength` (the loaded core's): FMA
// units x f32 lanes x 2 FLOP per cycle, from the CPU's family (Zen 4 runs 512-bit FMAs as two
// 256-bit halves; Intel AVX-512 server parts are assumed to have two 512-bit FMA units; SSE
// kernels count a multiply and an add per lane).
int fp32_flops_per_cycle(const CpuInfo& cpu, int strength);

// The clock of the calling thread's core while busy, in GHz: a chain of dependent 3-cycle
// integer multiplies timed for about `seconds` (the VM's clock as it runs, turbo included).
double measure_clock_ghz(double seconds = 0.05);

}  // namespace eng
