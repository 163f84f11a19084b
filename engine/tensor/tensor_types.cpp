// engine/tensor/tensor_types.cpp: DType names and Shape helpers.
#include <fmt/format.h>

#include "engine/tensor/dtype.h"
#include "engine/tensor/shape.h"

namespace eng {

std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
  }
  return "?";
}

std::string_view dtype_long_name(DType d) {
  switch (d) {
    case DType::kF32: return "float32";
    case DType::kBF16: return "bfloat16";
    case DType::kI32: return "int32";
  }
  return "?";
}

Result<DType> parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "i32" || name == "int32") return DType::kI32;
  return invalid_argument("unknown dtype '{}': expected float32, bfloat16 or int32", name);
}

int64_t Shape::numel() const { return prod(0, rank()); }

int64_t Shape::prod(int begin, int end) const {
  int64_t n = 1;
  for (int i = begin; i < end; ++i)
    ENG_CHECK(!__builtin_mul_overflow(n, dims_[i], &n), "shape {}: product overflows int64",
              to_string());
  return n;
}

Shape Shape::slice(int begin, int end) const {
  return Shape(std::vector<int64_t>(dims_.begin() + begin, dims_.begin() + end));
}

Shape Shape::concat(const Shape& other) const {
  std::vector<int64_t> d = dims_;
  d.insert(d.end(), other.dims_.begin(), other.dims_.end());
  return Shape(std::move(d));
}

std::string Shape::to_string() const {
  if (dims_.size() == 1) return fmt::format("({},)", dims_[0]);
  return fmt::format("({})", fmt::join(dims_, ", "));
}

std::string Shape::to_list() const { return fmt::format("{}", fmt::join(dims_, ",")); }

uint64_t Shape::hash() const {
  uint64_t h = hash_mix(0, dims_.size());
  for (int64_t d : dims_) h = hash_mix(h, static_cast<uint64_t>(d));
  return h;
}

}  // namespace eng
