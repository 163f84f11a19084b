// engine/tensor/dtype.h: element types (f32, bf16, i32) and bf16 <-> f32 conversion.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "engine/base/status.h"

namespace eng {

enum class DType : uint8_t { kF32, kBF16, kI32 };

// "f32", "bf16", "i32": the short names jax.typeof prints.
std::string_view dtype_name(DType d);
// "float32", "bfloat16", "int32": numpy/MaxText names (config values, safetensors uses F32...).
std::string_view dtype_long_name(DType d);
Result<DType> parse_dtype(std::string_view name);  // accepts both spellings
inline int64_t dtype_size(DType d) { return d == DType::kBF16 ? 2 : 4; }

// bf16 as the upper 16 bits of an f32, round-to-nearest-even (NaN stays NaN).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace eng
