// engine/tensor/bf16_gemm.h: the engine's own bf16 GEMMs, private to engine/tensor/*.cpp: the
// avx512_bf16 one (bf16_gemm.cpp: Bf16MatmulPlan's kNative backend, and bf16 attention's
// blocks) and the one for CPUs without it (bf16_packed_gemm.cpp: kPacked, bf16 widened to f32
// in the packing, f32 FMA micro-kernel).
#pragma once

#include <cstdint>

#include "engine/tensor/onednn_matmul.h"
#if defined(__AVX512BF16__)
#include "engine/tensor/bf16_simd.h"
#include "engine/tensor/simd.h"
#endif

namespace eng::kern::detail {

// The calling thread's bf16 matmul scratch, one buffer shared by every backend (native packing,
// oneDNN's scratchpad, convert+sgemm's f32 blocks; they never nest on one thread), so that
// reserve_bf16_matmul_scratch covers whichever backend a plan has: at least `bytes`, 64-byte
// aligned, grown (the only allocation) when smaller.
void* thread_matmul_scratch(int64_t bytes);

#if defined(__AVX512BF16__)
// 16 f32 sums into C at element `at` (f32 or bf16, added to C's values when accumulating): how
// the vdpbf16ps and AMX GEMMs store their results.
inline void store_c(const Bf16MatmulShape& s, void* C, int64_t at, __m512 sum, simd::Mask m) {
  simd::Vec v{sum};
  if (s.c_dtype == DType::kF32) {
    float* c = static_cast<float*>(C) + at;
    if (s.accumulate) v = v + simd::load(c, m);
    simd::store(c, v, m);
  } else {
    uint16_t* c = static_cast<uint16_t*>(C) + at;
    if (s.accumulate) v = v + bf16::load(c, m);
    bf16::store(c, v, m);
  }
}
#endif

// native_gemm's shape of work: pool tasks of kNativeTaskRows rows of C, a micro-kernel of
// kNativeKernelRows x kNativeKernelCols (Bf16MatmulPlan::parts and describe report them).
inline constexpr int64_t kNativeTaskRows = 48, kNativeKernelRows = 6, kNativeKernelCols = 64;

// True when the CPU (and the build) can run native_gemm: cpu_has_avx512_bf16().
bool native_bf16_gemm_available();
// Per-thread packing scratch native_gemm(s) needs (in thread_matmul_scratch).
int64_t native_gemm_scratch_bytes(const Bf16MatmulShape& s);
// C = op(A) op(B) [+ C], f32 sums in a fixed order (bitwise the same for any thread count).
// Inside a pool task (or on a one-thread pool) it runs inline on the calling thread.
void native_gemm(const Bf16MatmulShape& s, const uint16_t* A, const uint16_t* B, void* C);

// Panel j of op(B) as native_gemm packs it (and the AMX GEMM reads it): for pair p, 32 columns
// x (b[2p][n], b[2p+1][n]), zero past K and N; (K + 1) / 2 pair rows of 64 elements.
void pack_b_panel32(const Bf16MatmulShape& s, const uint16_t* B, int64_t j, uint16_t* dst);

// The AMX GEMM (bf16_amx_gemm.cpp): pool tasks of kAmxTaskRows rows by at most 512 columns of C,
// 32 x 32 blocks of tdpbf16ps tiles. Available where the build has avx512_bf16 and the CPU AMX-BF16
// (the kernel granting the tile state); SHARDLAB_DISABLE_AMX=1 turns it off (read once).
inline constexpr int64_t kAmxTaskRows = 64;
bool amx_bf16_gemm_available();
int64_t amx_gemm_scratch_bytes(const Bf16MatmulShape& s);  // per-thread scratch for s
int64_t amx_gemm_tasks(const Bf16MatmulShape& s);          // tasks per pass, for parts()
// C = op(A) op(B) [+ C], f32 sums in a fixed order (bitwise the same for any thread count).
void amx_gemm(const Bf16MatmulShape& s, const uint16_t* A, const uint16_t* B, void* C);

// B packed once and used by several products on the calling thread (attention's heads):
// pack_b_all writes op(B)'s panels (packed_b_elems_all(s) elements) for s.N columns and s.K;
// native_gemm_packed_b runs C = op(A) B for a shape whose columns are a prefix of the packed
// ones and whose K is at most the packed K (`packed_k`; even, when smaller: the pairs past it
// are not read). Inline, allocation-free; the same sums, in the same order, as native_gemm.
int64_t packed_b_elems_all(const Bf16MatmulShape& s);
void pack_b_all(const Bf16MatmulShape& s, const uint16_t* B, uint16_t* dst);
void native_gemm_packed_b(const Bf16MatmulShape& s, const uint16_t* A, const uint16_t* packed_b,
                          int64_t packed_k, void* C);

// packed_gemm's shape of work: pool tasks of at most kPackedTaskRows rows (by at most 512
// columns of C); packed_gemm_tasks(s): how many it hands the pool for s (Bf16MatmulPlan::parts).
inline constexpr int64_t kPackedTaskRows = 96;
int64_t packed_gemm_tasks(const Bf16MatmulShape& s);
// True when the build has AVX2+FMA or AVX-512F (the CPU then has them too: -march).
bool packed_bf16_gemm_available();
const char* packed_bf16_gemm_isa();  // "avx512f", "avx2" or "none"
int64_t packed_gemm_kernel_rows();   // the micro-kernel's rows x columns, for describe()
int64_t packed_gemm_kernel_cols();
// Per-thread scratch packed_gemm(s) needs (in thread_matmul_scratch).
int64_t packed_gemm_scratch_bytes(const Bf16MatmulShape& s);
// C = op(A) op(B) [+ C], f32 sums in a fixed order (bitwise the same for any thread count).
void packed_gemm(const Bf16MatmulShape& s, const uint16_t* A, const uint16_t* B, void* C);

}  // namespace eng::kern::detail
