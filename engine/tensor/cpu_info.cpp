// engine/tensor/cpu_info.cpp: CPUID features, the OpenBLAS core table and its choice, the
// theoretical FMA peak and a measured clock (see cpu_info.h).
#include "engine/tensor/cpu_info.h"

#include <cpuid.h>
#include <strings.h>
#include <time.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>


namespace eng {
namespace {

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};
Regs cpuid(unsigned leaf, unsigned sub) {
  Regs r;
  if (__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d) == 0) return Regs{};
  return r;
}
bool bit(unsigned v, int i) { return (v >> i) & 1u; }

CpuInfo detect() {
  CpuInfo cpu;
  const Regs v = cpuid(0, 0);
  char vendor[13] = {};
  std::memcpy(vendor, &v.b, 4), std::memcpy(vendor + 4, &v.d, 4), std::memcpy(vendor + 8, &v.c, 4);
  cpu.vendor = vendor;
  const Regs l1 = cpuid(1, 0);
  const int base_family = (l1.a >> 8) & 0xf, base_model = (l1.a >> 4) & 0xf;
  cpu.family = base_family == 0xf ? base_family + static_cast<int>((l1.a >> 20) & 0xff) : base_family;
  cpu.model = (base_family == 0x6 || base_family == 0xf)
                  ? base_model + static_cast<int>(((l1.a >> 16) & 0xf) << 4)
                  : base_model;
  if (cpuid(0x80000000u, 0).a >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002u + i, 0);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    std::string_view b(brand);
    while (!b.empty() && b.front() == ' ') b.remove_prefix(1);
    while (!b.empty() && b.back() == ' ') b.remove_suffix(1);
    cpu.model_name = std::string(b);
  }
  cpu.sse3 = bit(l1.c, 0);
  // AVX state must be saved by the OS (OSXSAVE, then XCR0 bits XMM|YMM; AVX-512 adds opmask,
  // ZMM_Hi256 and Hi16_ZMM; AMX adds XTILECFG and XTILEDATA).
  uint64_t xcr0 = 0;
  if (bit(l1.c, 27)) {
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (uint64_t{hi} << 32) | lo;
  }
  const bool os_avx = (xcr0 & 0x6) == 0x6, os_avx512 = (xcr0 & 0xe6) == 0xe6;
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;
  cpu.avx = os_avx && bit(l1.c, 28);
  cpu.fma = cpu.avx && bit(l1.c, 12);
  cpu.f16c = cpu.avx && bit(l1.c, 29);
  const Regs l7 = cpuid(0, 0).a >= 7 ? cpuid(7, 0) : Regs{};
  const Regs l71 = l7.a >= 1 ? cpuid(7, 1) : Regs{};
  cpu.avx2 = cpu.avx && bit(l7.b, 5);
  cpu.avx512f = os_avx512 && bit(l7.b, 16);
  cpu.avx512dq = cpu.avx512f && bit(l7.b, 17);
  cpu.avx512bw = cpu.avx512f && bit(l7.b, 30);
  cpu.avx512vl = cpu.avx512f && bit(l7.b, 31);
  cpu.avx512_bf16 = cpu.avx512f && bit(l71.a, 5);
  cpu.amx_bf16 = os_amx && bit(l7.d, 22);
  if (cpuid(0x80000000u, 0).a >= 0x80000001u) cpu.fma4 = cpu.avx && bit(cpuid(0x80000001u, 0).c, 16);
  return cpu;
}

bool any(const CpuInfo&) { return true; }
bool has_avx(const CpuInfo& c) { return c.avx; }
bool has_fma4(const CpuInfo& c) { return c.avx && c.fma4; }
bool has_avx2(const CpuInfo& c) { return c.avx2 && c.fma; }
bool has_avx512(const CpuInfo& c) { return c.avx512() && c.avx2 && c.fma; }
bool has_avx512_bf16(const CpuInfo& c) { return has_avx512(c) && c.avx512_bf16; }

// OpenBLAS 0.3.21's x86-64 corename list (driver/others/dynamic.c), older to newer. The AMD
// pre-Zen cores' kernels use FMA4 (they die of SIGILL on Zen and Intel).
constexpr OpenblasCore kCores[] = {
    {"Katmai", 1, any, "SSE"},          {"Coppermine", 1, any, "SSE"},
    {"Northwood", 1, any, "SSE2"},      {"Prescott", 1, any, "SSE3"},
    {"Banias", 1, any, "SSE2"},         {"Atom", 1, any, "SSSE3"},
    {"Core2", 1, any, "SSSE3"},         {"Penryn", 1, any, "SSE4.1"},
    {"Dunnington", 1, any, "SSE4.1"},   {"Nehalem", 1, any, "SSE4.2"},
    {"Athlon", 1, any, "SSE2"},         {"Opteron", 1, any, "SSE2"},
    {"Opteron_SSE3", 1, any, "SSE3"},   {"Barcelona", 1, any, "SSE4a"},
    {"Nano", 1, any, "SSE3"},           {"Bobcat", 1, any, "SSSE3"},
    {"Sandybridge", 2, has_avx, "AVX"}, {"Bulldozer", 2, has_fma4, "AVX, FMA4"},
    {"Piledriver", 2, has_fma4, "AVX, FMA4"}, {"Steamroller", 2, has_fma4, "AVX, FMA4"},
    {"Excavator", 2, has_fma4, "AVX, FMA4"},  {"Haswell", 3, has_avx2, "AVX2, FMA"},
    {"Zen", 3, has_avx2, "AVX2, FMA"},  {"SkylakeX", 4, has_avx512, "AVX-512 F/BW/VL/DQ"},
    {"Cooperlake", 5, has_avx512_bf16, "AVX-512 F/BW/VL/DQ and AVX512_BF16"},
};

}  // namespace

std::string CpuInfo::flags() const {
  std::string out;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!out.empty()) out += ' ';
    out += name;
  };
  add(sse3, "sse3"), add(avx, "avx"), add(avx2, "avx2"), add(fma, "fma"), add(fma4, "fma4");
  add(f16c, "f16c"), add(avx512f, "avx512f"), add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl"), add(avx512dq, "avx512dq"), add(avx512_bf16, "avx512_bf16");
  add(amx_bf16, "amx_bf16");
  return out;
}

const CpuInfo& cpu_info() {
  static const CpuInfo c = detect();
  return c;
}

std::span<const OpenblasCore> openblas_cores() { return kCores; }

const OpenblasCore* find_openblas_core(std::string_view name) {
  for (const OpenblasCore& c : kCores)
    if (c.name.size() == name.size() && strncasecmp(c.name.data(), name.data(), name.size()) == 0)
      return &c;
  return nullptr;
}

std::string openblas_core_names() {
  std::string out;
  for (const OpenblasCore& c : kCores) out += (out.empty() ? "" : ", ") + std::string(c.name);
  return out;
}

std::string_view best_openblas_core(const CpuInfo& cpu) {
  if (has_avx512_bf16(cpu)) return "Cooperlake";
  if (has_avx512(cpu)) return "SkylakeX";
  if (has_avx2(cpu)) return cpu.vendor == "AuthenticAMD" ? "Zen" : "Haswell";
  if (has_avx(cpu)) return "Sandybridge";
  return "Prescott";
}

Result<CoreChoice> choose_openblas_core(const CpuInfo& cpu, const char* openblas_coretype,
                                        const char* shardlab_coretype) {
  const OpenblasCore* best = find_openblas_core(best_openblas_core(cpu));
  if (shardlab_coretype != nullptr && *shardlab_coretype != '\0') {
    const OpenblasCore* forced = find_openblas_core(shardlab_coretype);
    if (forced == nullptr)
      return invalid_argument(
          "SHARDLAB_OPENBLAS_CORETYPE={}: not an OpenBLAS 0.3.21 core type; accepted: {}",
          shardlab_coretype, openblas_core_names());
    if (!forced->runs_on(cpu))
      return invalid_argument(
          "SHARDLAB_OPENBLAS_CORETYPE={}: its kernels need {}, which this CPU ({}) lacks; the "
          "strongest core it runs is {}",
          shardlab_coretype, forced->needs, cpu.model_name, best->name);
    return CoreChoice{std::string(forced->name),
                      fmt::format("OPENBLAS_CORETYPE={} (from SHARDLAB_OPENBLAS_CORETYPE)", forced->name),
                      false};
  }
  if (openblas_coretype != nullptr && *openblas_coretype != '\0') {
    const OpenblasCore* env = find_openblas_core(openblas_coretype);
    if (env != nullptr && env->runs_on(cpu) && env->strength >= best->strength)
      return CoreChoice{std::string(env->name),
                        fmt::format("OPENBLAS_CORETYPE={} kept (as strong as this CPU's best, {})",
                                    env->name, best->name),
                        false};
    const char* why = env == nullptr           ? "not an OpenBLAS core type"
                      : !env->runs_on(cpu)     ? "its kernels do not run on this CPU"
                                               : "weaker than this CPU allows";
    return CoreChoice{std::string(best->name),
                      fmt::format("OPENBLAS_CORETYPE={} replaced by {} ({}; set "
                                  "SHARDLAB_OPENBLAS_CORETYPE to force a core)",
                                  openblas_coretype, best->name, why),
                      true};
  }
  return CoreChoice{std::string(best->name),
                    fmt::format("OPENBLAS_CORETYPE={} (from CPUID: {})", best->name, best->needs),
                    false};
}

int fp32_flops_per_cycle(const CpuInfo& cpu, int strength) {
  const bool amd = cpu.vendor == "AuthenticAMD";
  if (strength >= 4) {
    if (amd && cpu.family <= 0x19) return 2 * 8 * 2;  // Zen 4: two 256-bit FMA pipes
    return 2 * 16 * 2;                                 // two 512-bit FMA units
  }
  if (strength == 3) {
    if (amd && cpu.family == 0x17 && cpu.model < 0x30) return 2 * 4 * 2;  // Zen 1: 128-bit
    return 2 * 8 * 2;                                                      // two 256-bit FMAs
  }
  if (strength == 2) return 8 + 8;  // one 256-bit multiply and one add per cycle
  return 4 + 4;                     // SSE: one 128-bit multiply and one add
}

namespace {
// The calling thread's CPU time: time the VM's scheduler gives other processes is not counted.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

double measure_clock_ghz(double seconds) {
  auto run = [](int64_t iters) {
    uint64_t x = 1, y = 3;
    for (int64_t i = 0; i < iters; ++i) {
      // 100 dependent 64-bit multiplies: 300 cycles (3-cycle latency on Intel's big cores since
      // Nehalem and on AMD's Zen 1-4; 4-6 on K10, Bulldozer and the Atoms, whose clock would read
      // low); the loop's own counter runs beside them. Not a chain of
      // `add $1`: Golden Cove class cores fold immediate adds at rename, several a cycle (an
      // Intel Xeon with AMX measured 23.6 "GHz" with it, 4.1 with this chain).
      __asm__ volatile(".rept 100\n\timulq %1, %0\n\t.endr" : "+r"(x) : "r"(y));
    }
    return x;
  };
  run(20000);  // wake the core up to its running clock
  int64_t iters = 10000;
  for (;;) {
    const double t0 = thread_seconds();
    run(iters);
    const double dt = thread_seconds() - t0;
    if (dt >= seconds || iters > (int64_t{1} << 40)) return 300.0 * static_cast<double>(iters) / dt / 1e9;
    iters = dt <= 0 ? iters * 16 : std::max(iters * 2, static_cast<int64_t>(iters * seconds / dt * 1.1));
  }
}

}  // namespace eng
