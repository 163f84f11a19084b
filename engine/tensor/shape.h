// engine/tensor/shape.h: a tensor's dimensions, as a value type.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "engine/base/limits.h"
#include "engine/base/hash.h"
#include "engine/base/status.h"

namespace eng {

class Shape {
 public:
  Shape() = default;  // rank 0: a scalar
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  // The checked way to make a shape from sizes a user or a file gave: every dim >= 0 and the
  // element count at most kMaxTensorElements, tested without overflow (numel() then never
  // overflows, nor does numel() * dtype size).
  static Result<Shape> checked(std::vector<int64_t> dims);

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t dim(int i) const { return dims_[i < 0 ? i + rank() : i]; }  // negative from the end
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t numel() const;                        // product of dims (1 for a scalar)
  int64_t prod(int begin, int end) const;       // product of dims [begin, end)
  Shape slice(int begin, int end) const;        // dims [begin, end)
  Shape concat(const Shape& other) const;

  // "(8, 256, 768)": the form used in error messages.
  std::string to_string() const;
  // "8,256,768": the form used inside types like f32[8,256,768].
  std::string to_list() const;

  bool operator==(const Shape&) const = default;
  uint64_t hash() const;

 private:
  std::vector<int64_t> dims_;  // major to minor (row-major layout)
};

inline Result<Shape> Shape::checked(std::vector<int64_t> dims) {
  int64_t n = 1;  // product of the nonzero dims: every sub-product of dims stays below it
  for (int64_t d : dims) {
    if (d < 0)
      return invalid_argument("shape ({}): dimension {} is negative", fmt::join(dims, ", "), d);
    if (d != 0 && n > kMaxTensorElements / d)
      return invalid_argument("shape ({}) has more than {} elements", fmt::join(dims, ", "),
                              kMaxTensorElements);
    if (d != 0) n *= d;
  }
  return Shape(std::move(dims));
}

}  // namespace eng
